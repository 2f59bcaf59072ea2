//! Device groups: several devices of one backend, each its own runtime, and
//! the ops that span them.

use crate::device::BackendKind;
use crate::error::{Error, Result};
use crate::runtime::Runtime;

/// Several devices of one backend, opened together. Each device is a
/// [`Runtime`] with its own streams and its own ordering boundary, as ever;
/// [`Stream::copy_from_peer`](crate::Stream::copy_from_peer) copies a buffer
/// of one into a buffer of another, ordered by the versions on both.
///
/// On the CPU every member is a device of its own (host memory, its own
/// threads), so the ordering across devices is tested without a GPU. On
/// CUDA the members are device ordinals; a group may name one device twice
/// (two runtimes on it). HIP members are ordinals and wgpu members adapters
/// (indices as [`devices`](crate::devices) lists them), without peer copies.
#[derive(Clone, Debug)]
pub struct DeviceGroup {
    pub(crate) devices: Vec<Runtime>,
    /// The backend's communicator for collectives, made at the first one and
    /// shared by the group's clones.
    pub(crate) communicator: std::sync::Arc<crate::scheduler::CommunicatorSlot>,
}

impl DeviceGroup {
    /// Opens `devices` (indices as [`Runtime::open_device`] takes them) of `kind`.
    pub fn open(kind: BackendKind, devices: &[usize]) -> Result<DeviceGroup> {
        if devices.is_empty() {
            return Err(Error::invalid("a device group needs at least one device"));
        }
        let devices = devices.iter().map(|&index| Runtime::open_device(kind, index)).collect::<Result<Vec<_>>>()?;
        Ok(DeviceGroup { devices, communicator: Default::default() })
    }

    /// The members, in the order opened.
    pub fn devices(&self) -> &[Runtime] {
        &self.devices
    }

    /// Member `index`.
    pub fn device(&self, index: usize) -> Result<&Runtime> {
        self.devices
            .get(index)
            .ok_or_else(|| Error::invalid(format!("device {index} of a group of {} devices", self.devices.len())))
    }

    /// Waits, without blocking a thread, for all work admitted on every
    /// member so far.
    pub async fn sync(&self) -> Result<()> {
        let fences = self.devices.iter().map(Runtime::fence).collect::<Result<Vec<_>>>()?;
        for fence in fences {
            fence.await?;
        }
        Ok(())
    }

    /// Closes every member (see [`Runtime::close`]); the first error comes back.
    pub fn close(&self) -> Result<()> {
        let mut first = Ok(());
        for device in &self.devices {
            let closed = device.close();
            if first.is_ok() {
                first = closed;
            }
        }
        first
    }
}
