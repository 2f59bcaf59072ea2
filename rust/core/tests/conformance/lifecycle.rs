//! Closing a runtime: in-flight work finishes, close is idempotent.

use std::time::Duration;

use weir_core::{Error, Runtime};

conformance! {
    fn close_waits_for_work_in_flight_and_is_idempotent(runtime: &Runtime) {
        // A runtime of its own, so the harness can still check the shared one.
        let own = Runtime::open(runtime.info().backend).unwrap();
        let s = own.default_stream();
        let out = s.zeros(4096).unwrap();
        s.delay(Duration::from_millis(100)).unwrap();
        s.fill_u32(&out, 5).unwrap();
        let fence = s.fence().unwrap();
        own.close().unwrap();
        assert!(fence.is_complete(), "close returned before work in flight finished");
        fence.wait().unwrap();
        own.close().unwrap();
        assert!(matches!(s.fill_u32(&out, 1), Err(Error::Closed)));
    }
}
