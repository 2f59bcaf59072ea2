//! Page-locked memory an upload or download copies through: where an
//! upload's bytes wait, and how memory a copy may still use is held until
//! its completion, or abandoned when nobody will see the copy end.

use super::device::Loan;
use crate::host::HostBuffer;

/// Page-locked memory a copy goes through.
pub(crate) enum Staged {
    /// A loan: an upload's bytes, copied in while it was prepared, or where a download lands.
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

    /// Gives up memory that a copy nobody will see end may still use: what a
    /// copy's completion callback holds is abandoned this way when dropped
    /// unrun (the driver refused the callback, so nobody learns when the copy
    /// ends), rather than reused under a running copy.
    pub(super) fn abandon(self) {
        match self {
            // Stays lent until the device goes, which frees it after every stream synchronised.
            Staged::Loan(loan) => loan.abandon(),
            // Never unique again, so never written or returned to the pool.
            Staged::Host(host) => std::mem::forget(host),
        }
    }
}
