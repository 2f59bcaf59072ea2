//! Locking without poisoning (the device layer's helper, one for every layer).

pub(crate) use weir_device::lock::lock;
