//! Errors: the device layer's, which every layer of Weir reports.

pub use weir_device::error::{DriverStatus, Error, Failures, Result};
