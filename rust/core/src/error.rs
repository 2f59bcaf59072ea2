//! Errors: the device layer's, which every layer of Weir reports.

pub(crate) use weir_device::error::panic_text;
pub use weir_device::error::{DriverStatus, Error, Failures, Result};
