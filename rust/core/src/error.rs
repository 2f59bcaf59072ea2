//! Errors: the device layer's, which every layer of Weir reports.

pub use weir_device::error::{DriverStatus, Error, Failures, Result};

/// What a caught panic said: its message, if it carried one.
pub(crate) fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    match (panic.downcast_ref::<&str>(), panic.downcast_ref::<String>()) {
        (Some(text), _) => (*text).to_owned(),
        (None, Some(text)) => text.clone(),
        (None, None) => "no message".to_owned(),
    }
}
