//! NCCL, loaded at run time: the few calls a group's collectives make.
//!
//! The library is found as `libnccl.so.2`, then `libnccl.so`, on the
//! loader's path, as the CUDA driver, NVRTC and cuBLAS are; missing, every
//! collective is `Unavailable` saying so, and nothing else changes. One
//! communicator per group: `ncclCommInitAll` over the members' device
//! ordinals, one rank per member, made at the group's first collective.
//! Each collective enqueues every rank's call inside one
//! `ncclGroupStart`/`ncclGroupEnd`, on the members' own streams.
//!
//! This is a loader of our own rather than cudarc's `nccl` module: cudarc
//! 0.19 looks NCCL up as `libnccl.so` or by the CUDA toolkit's version
//! numbers (`libnccl.so.13`, `.12`, …), never as `libnccl.so.2`, the one name
//! NCCL's runtime packages install (`libnccl2`, the `nvidia-nccl` wheels), so
//! it would miss NCCL where only those are (and panic where it is asked
//! anyway). The few calls made here are typed from `nccl.h` below.
//!
//! A group whose ranks live in several processes (or hosts) meets through an
//! `ncclUniqueId` made in rank 0's process (`ncclGetUniqueId`) and handed to
//! the others by the caller; each process's one member joins with
//! `ncclCommInitRank` on its device, which returns once every rank has.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::OnceLock;

use super::driver::Cuda;
use crate::collective::{Collective, CollectiveKind, ReduceOp};
use crate::driver::{status_error, Driver, Handle, RawPart};
use crate::element::ElementType;
use crate::error::{Error, Result};
use crate::info::BackendKind;

const NAME: BackendKind = BackendKind::Cuda;

const LIBRARY_NAMES: [&str; 2] = ["libnccl.so.2", "libnccl.so"];

type NcclResult = c_int;
type Comm = *mut c_void;
type Stream = *mut c_void;

const SUCCESS: NcclResult = 0;

/// `ncclUniqueId`: 128 opaque bytes (`NCCL_UNIQUE_ID_BYTES`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct UniqueId {
    pub internal: [c_char; 128],
}

/// The signature all-reduce, broadcast and reduce-scatter share: send,
/// receive, count, data type, then a reduction (or broadcast's root).
type Collect = unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, Comm, Stream) -> NcclResult;

/// The functions, looked up once; the library stays loaded for the process.
struct Nccl {
    _library: libloading::Library,
    /// `ncclGetVersion`: major × 10000 + minor × 100 + patch, for messages.
    version: c_int,
    get_error_string: unsafe extern "C" fn(NcclResult) -> *const c_char,
    comm_init_all: unsafe extern "C" fn(*mut Comm, c_int, *const c_int) -> NcclResult,
    comm_destroy: unsafe extern "C" fn(Comm) -> NcclResult,
    group_start: unsafe extern "C" fn() -> NcclResult,
    group_end: unsafe extern "C" fn() -> NcclResult,
    all_reduce: Collect,
    broadcast: Collect,
    all_gather: unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, Comm, Stream) -> NcclResult,
    reduce_scatter: Collect,
    get_unique_id: unsafe extern "C" fn(*mut UniqueId) -> NcclResult,
    comm_init_rank: unsafe extern "C" fn(*mut Comm, c_int, UniqueId, c_int) -> NcclResult,
}

/// The library, or why it cannot be used here.
fn nccl() -> Result<&'static Nccl> {
    static LOADED: OnceLock<std::result::Result<Nccl, String>> = OnceLock::new();
    LOADED
        .get_or_init(|| load_from(&LIBRARY_NAMES.map(str::to_owned)))
        .as_ref()
        .map_err(|reason| Error::unavailable(NAME, reason.clone()))
}

/// The first of `candidates` (paths or names for the loader) that loads as NCCL 2.
fn load_from(candidates: &[String]) -> std::result::Result<Nccl, String> {
    let mut tried = Vec::new();
    let library = candidates.iter().find_map(|candidate| {
        // SAFETY: loading NCCL runs its initialisers, which only set up the
        // library itself; no symbol is called here.
        match unsafe { libloading::Library::new(candidate) } {
            Ok(library) => Some(library),
            Err(error) => {
                tried.push(format!("{candidate}: {error}"));
                None
            }
        }
    });
    let Some(library) = library else {
        return Err(format!(
            "NCCL, which CUDA collectives run on, could not be loaded ({}); install NCCL 2, or put the \
             folder of its libnccl.so.2 on the loader's path (LD_LIBRARY_PATH)",
            tried.join("; ")
        ));
    };
    macro_rules! symbol {
        ($name:literal) => {
            // SAFETY: the type is the function's C signature in nccl.h (NCCL 2).
            *unsafe { library.get($name) }
                .map_err(|error| format!("the NCCL library lacks {}: {error}", String::from_utf8_lossy($name)))?
        };
    }
    let get_version: unsafe extern "C" fn(*mut c_int) -> NcclResult = symbol!(b"ncclGetVersion");
    let mut version = 0;
    // SAFETY: an out-pointer to a local.
    let status = unsafe { get_version(&mut version) };
    if status != SUCCESS || version < 20000 {
        return Err(format!("the NCCL library reports version {version} (status {status}); collectives need NCCL 2"));
    }
    Ok(Nccl {
        version,
        get_error_string: symbol!(b"ncclGetErrorString"),
        comm_init_all: symbol!(b"ncclCommInitAll"),
        comm_destroy: symbol!(b"ncclCommDestroy"),
        group_start: symbol!(b"ncclGroupStart"),
        group_end: symbol!(b"ncclGroupEnd"),
        all_reduce: symbol!(b"ncclAllReduce"),
        broadcast: symbol!(b"ncclBroadcast"),
        all_gather: symbol!(b"ncclAllGather"),
        reduce_scatter: symbol!(b"ncclReduceScatter"),
        get_unique_id: symbol!(b"ncclGetUniqueId"),
        comm_init_rank: symbol!(b"ncclCommInitRank"),
        _library: library,
    })
}

/// NCCL's name of a status, as nccl.h spells it.
fn status_name(status: NcclResult) -> &'static str {
    match status {
        0 => "ncclSuccess",
        1 => "ncclUnhandledCudaError",
        2 => "ncclSystemError",
        3 => "ncclInternalError",
        4 => "ncclInvalidArgument",
        5 => "ncclInvalidUsage",
        6 => "ncclRemoteError",
        7 => "ncclInProgress",
        _ => "an unknown NCCL status",
    }
}

impl Nccl {
    fn check(&self, call: &str, status: NcclResult) -> Result<()> {
        if status == SUCCESS {
            return Ok(());
        }
        // SAFETY: NCCL returns a static string for any status.
        let text = unsafe { (self.get_error_string)(status) };
        let described = if text.is_null() {
            String::new()
        } else {
            // SAFETY: a NUL-terminated static string (above).
            format!(": {}", unsafe { CStr::from_ptr(text) }.to_string_lossy())
        };
        let name = format!("{}{described}", status_name(status));
        Err(status_error(NAME, &format!("{call} (NCCL {})", self.version), name, status, false))
    }
}

/// One NCCL communicator per member of a group, in rank order.
pub struct Communicator {
    comms: Vec<Handle<Comm>>,
}

impl Communicator {
    /// `ncclCommInitAll` over `ordinals`: one rank per device, which must
    /// all differ (NCCL refuses a device twice).
    pub fn open(ordinals: &[i32]) -> Result<Communicator> {
        if let Some((rank, ordinal)) =
            ordinals.iter().enumerate().find(|(rank, ordinal)| ordinals[..*rank].contains(ordinal))
        {
            return Err(Error::unsupported(
                NAME,
                format!(
                    "collectives over a group that names CUDA device {ordinal} twice (member {rank} too): \
                     NCCL takes one rank per device"
                ),
            ));
        }
        let nccl = nccl()?;
        let count = c_int::try_from(ordinals.len()).map_err(|_| Error::invalid("a group of too many devices"))?;
        let mut comms: Vec<Comm> = vec![std::ptr::null_mut(); ordinals.len()];
        // SAFETY: `comms` has room for one communicator per device listed.
        let status = unsafe { (nccl.comm_init_all)(comms.as_mut_ptr(), count, ordinals.as_ptr()) };
        nccl.check("ncclCommInitAll", status)?;
        Ok(Communicator { comms: comms.into_iter().map(Handle).collect() })
    }

    /// `ncclCommInitRank` as rank `rank` of `ranks`, on the device whose
    /// context is current on this thread; returns once every rank joined.
    pub fn join(id: &[u8; 128], ranks: usize, rank: usize) -> Result<Communicator> {
        let nccl = nccl()?;
        let count = c_int::try_from(ranks).map_err(|_| {
            Error::invalid(format!("a group of {ranks} ranks: NCCL counts at most {} ranks", c_int::MAX))
        })?;
        let rank = c_int::try_from(rank).map_err(|_| Error::invalid("a rank past any group's"))?;
        let id = UniqueId { internal: id.map(|byte| byte as c_char) };
        let mut comm: Comm = std::ptr::null_mut();
        // SAFETY: an out-pointer to a local; the id is passed by value as
        // nccl.h declares it.
        let status = unsafe { (nccl.comm_init_rank)(&mut comm, count, id, rank) };
        nccl.check("ncclCommInitRank", status)?;
        Ok(Communicator { comms: vec![Handle(comm)] })
    }
}

/// A new `ncclUniqueId`, as rank 0's process makes it: NCCL's bootstrap
/// starts listening in this process.
pub fn unique_id() -> Result<[u8; 128]> {
    let nccl = nccl()?;
    let mut id = UniqueId { internal: [0; 128] };
    // SAFETY: an out-pointer to a local of the type nccl.h names.
    nccl.check("ncclGetUniqueId", unsafe { (nccl.get_unique_id)(&mut id) })?;
    Ok(id.internal.map(|byte| byte as u8))
}

impl Drop for Communicator {
    fn drop(&mut self) {
        let Ok(nccl) = nccl() else { return };
        for comm in self.comms.drain(..) {
            // SAFETY: made by `ncclCommInitAll` or `ncclCommInitRank`, destroyed once; NCCL
            // finishes the collectives in flight on it first (the group's
            // slot drops it on the release thread, so that wait blocks no
            // caller).
            let _ = unsafe { (nccl.comm_destroy)(comm.0) };
        }
    }
}

fn data_type(element: ElementType) -> c_int {
    // ncclDataType_t: ncclUint8 = 1, ncclInt32 = 2, ncclUint32 = 3, ncclFloat32 = 7.
    match element {
        ElementType::Bytes => 1,
        ElementType::I32 => 2,
        ElementType::U32 => 3,
        ElementType::F32 => 7,
    }
}

fn reduction(op: ReduceOp) -> c_int {
    // ncclRedOp_t: ncclSum = 0, ncclMax = 2, ncclMin = 3.
    match op {
        ReduceOp::Sum => 0,
        ReduceOp::Max => 2,
        ReduceOp::Min => 3,
    }
}

/// Enqueues every rank's call of `collective` inside one NCCL group.
///
/// # Safety
/// As for `Driver::enqueue_collective`: live allocations of the sizes
/// given, live streams of their ranks' drivers, one part per rank.
pub unsafe fn enqueue(communicator: &Communicator, collective: &Collective, parts: &[RawPart<'_, Cuda>]) -> Result<()> {
    let nccl = nccl()?;
    if parts.len() != communicator.comms.len() {
        return Err(Error::internal("a collective with parts for another communicator"));
    }
    let datatype = data_type(collective.element);
    let size = collective.element.size_bytes();
    // All-gather alone takes neither a reduction nor a root.
    let (call, collect, arg) = match collective.kind {
        CollectiveKind::AllReduce(op) => ("ncclAllReduce", Some(nccl.all_reduce), reduction(op)),
        CollectiveKind::Broadcast { root } => ("ncclBroadcast", Some(nccl.broadcast), root as c_int),
        CollectiveKind::ReduceScatter(op) => ("ncclReduceScatter", Some(nccl.reduce_scatter), reduction(op)),
        CollectiveKind::AllGather => ("ncclAllGather", None, 0),
    };
    // Every rank's device is bound once before the group: a rank whose bind
    // fails inside it would make no call, while the ranks before it had
    // theirs launched, waiting for it forever.
    parts.iter().try_for_each(|part| part.driver.bind())?;
    // SAFETY: no NCCL call of this thread is in a group yet.
    nccl.check("ncclGroupStart", unsafe { (nccl.group_start)() })?;
    // The first rank whose call fails ends the loop: the ranks after it make none.
    let called = parts.iter().zip(&communicator.comms).try_for_each(|(part, comm)| {
        part.driver.bind()?;
        let (send, receive) = (part.send.ptr as *const c_void, part.receive.ptr as *mut c_void);
        // Reduce-scatter counts the elements each rank receives; the others, those it sends.
        let counted =
            if matches!(collective.kind, CollectiveKind::ReduceScatter(_)) { part.receive } else { part.send };
        let (count, stream) = ((counted.len / size) as usize, part.stream.0.cast::<c_void>());
        // SAFETY: the pointers and counts lie in live allocations (this
        // function's contract); the stream and communicator are the rank's,
        // live; NCCL only enqueues inside a group.
        let status = unsafe {
            match collect {
                Some(collect) => collect(send, receive, count, datatype, arg, comm.0, stream),
                None => (nccl.all_gather)(send, receive, count, datatype, comm.0, stream),
            }
        };
        nccl.check(call, status)
    });
    // The group is closed whatever happened inside it; a rank's failure is the one reported.
    // SAFETY: closes the group opened above, on this thread.
    let ended = nccl.check("ncclGroupEnd", unsafe { (nccl.group_end)() });
    called.and(ended)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cudarc_still_misses_nccls_runtime_name_so_this_loader_is_needed() {
        // When this fails, cudarc finds `libnccl.so.2`: its `nccl` module can
        // replace this loader (see the module doc).
        let candidates = cudarc::get_lib_name_candidates("nccl");
        assert!(candidates.iter().any(|name| name == "libnccl.so"), "{candidates:?}");
        assert!(!candidates.iter().any(|name| name == "libnccl.so.2"), "{candidates:?}");
    }

    #[test]
    fn a_missing_library_says_what_was_tried_and_where_to_put_it() {
        let missing = "/nonexistent/libnccl.so.2".to_owned();
        let Err(reason) = load_from(std::slice::from_ref(&missing)) else { panic!("a missing path loaded") };
        assert!(reason.contains(&missing) && reason.contains("LD_LIBRARY_PATH"), "{reason}");
    }

    #[test]
    fn a_library_that_is_not_nccl_is_refused_by_its_missing_symbols() {
        // The C library loads everywhere this backend builds, and has no NCCL in it.
        let Err(reason) = load_from(&["libc.so.6".to_owned()]) else { panic!("libc loaded as NCCL") };
        assert!(reason.contains("lacks ncclGetVersion"), "{reason}");
    }

    #[test]
    fn a_group_naming_one_device_twice_is_unsupported_before_nccl_is_asked() {
        match Communicator::open(&[0, 1, 0]) {
            Err(Error::Unsupported { what, .. }) => assert!(what.contains("device 0 twice"), "{what}"),
            Err(other) => panic!("expected Unsupported, got {other}"),
            Ok(_) => panic!("a group naming device 0 twice got a communicator"),
        }
    }

    #[test]
    fn element_types_and_reductions_map_to_ncclh() {
        assert_eq!(
            [ElementType::Bytes, ElementType::I32, ElementType::U32, ElementType::F32].map(data_type),
            [1, 2, 3, 7]
        );
        assert_eq!([ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min].map(reduction), [0, 2, 3]);
        assert_eq!(status_name(5), "ncclInvalidUsage");
    }
}
