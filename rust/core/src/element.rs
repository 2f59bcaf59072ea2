//! Element types: what a buffer holds, so that ops can refuse the wrong one.

pub use weir_device::element::{Element, ElementType};
