//! Page-locked memory an upload or download copies through: where an
//! upload's bytes wait, and how memory a copy may still use is held until
//! its completion, or abandoned when nobody will see the copy end.

use super::device::Loan;
use crate::host::HostBuffer;

/// Where an upload's bytes wait in page-locked memory.
pub(crate) enum Staged {
    /// Copied into a loan while the upload was prepared.
    Loan(Loan),
    /// The app's own buffer, locked by this device: held until the copy is done.
    Host(HostBuffer),
}

impl Staged {
    pub(super) fn ptr(&self) -> *const u8 {
        match self {
            Staged::Loan(loan) => loan.ptr(),
            Staged::Host(host) => host.as_ptr(),
        }
    }
}

/// Page-locked memory a device copy may still read or write. Only the
/// copy's completion callback lets it go; dropped unrun (the driver refused
/// the callback, so nobody learns when the copy ends), it is abandoned
/// rather than reused under a running copy.
pub(super) struct InFlight<T: Abandon>(Option<T>);

impl<T: Abandon> InFlight<T> {
    pub(super) fn new(memory: T) -> Self {
        InFlight(Some(memory))
    }

    pub(super) fn release(mut self) -> Option<T> {
        self.0.take()
    }
}

impl<T: Abandon> Drop for InFlight<T> {
    fn drop(&mut self) {
        if let Some(memory) = self.0.take() {
            memory.abandon();
        }
    }
}

/// Giving up page-locked memory that a copy nobody will see end may still use.
pub(super) trait Abandon {
    fn abandon(self);
}

impl Abandon for Loan {
    fn abandon(self) {
        // Stays lent until the device goes, which frees it after every stream synchronised.
        Loan::abandon(self)
    }
}

impl Abandon for Staged {
    fn abandon(self) {
        match self {
            Staged::Loan(loan) => loan.abandon(),
            // Never unique again, so never written or returned to the pool.
            Staged::Host(host) => std::mem::forget(host),
        }
    }
}
