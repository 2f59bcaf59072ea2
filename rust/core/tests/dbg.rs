use weir_core::*;
#[test]
fn dbg() {
    let rt = Runtime::open(BackendKind::Wgpu).unwrap();
    let s = rt.default_stream();
    let h = s.hold().unwrap();
    let b = s.zeros(16).unwrap();
    let f1 = s.fence().unwrap();
    s.fill_u32(&b, 5).unwrap();
    let f2 = s.fence().unwrap();
    s.memset_zero(&b).unwrap();
    let f3 = s.fence().unwrap();
    let r = s.enqueue_read(&b).unwrap();
    let f4 = s.fence().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(100));
    eprintln!(
        "{} {} {} {} read={}",
        f1.is_complete(),
        f2.is_complete(),
        f3.is_complete(),
        f4.is_complete(),
        r.is_complete()
    );
    h.release();
    f4.wait().unwrap();
}
