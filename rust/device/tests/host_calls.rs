//! A CPU kernel's call on its worker: the argument views it gets are built
//! without touching the heap (a heap allocation on the worker, freed
//! there, costs little; but on a pool shared by every stream each one is
//! a trip through the allocator per op, and the kernels that matter most
//! here are the tiny ones).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Arc;

use weir_device::command::{Command, KernelArg, Span};
use weir_device::counters::Counters;
use weir_device::host::{self, CpuMemory};
use weir_device::kernel::{CpuKernelArgs, CustomKernel, ScalarArg};
use weir_device::{Access, Grid};

/// Counts the calling thread's heap allocations.
struct PerThread;

thread_local! {
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: every call is the system allocator's, with the same arguments.
unsafe impl GlobalAlloc for PerThread {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // `try_with`: a thread's last allocations may come after its locals are gone.
        let _ = ALLOCATIONS.try_with(|count| count.set(count.get() + 1));
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static COUNTING: PerThread = PerThread;

fn allocations() -> usize {
    ALLOCATIONS.with(Cell::get)
}

#[test]
fn a_kernel_call_over_eight_buffers_and_scalars_allocates_nothing() {
    let counters = Arc::new(Counters::default());
    let memories: Vec<CpuMemory> = (0..8).map(|_| CpuMemory::allocate(64, &counters).expect("64 bytes")).collect();
    let body = |args: &mut CpuKernelArgs<'_>| {
        assert_eq!(args.buffer_count(), 8);
        args.u32s_mut(7)?[0] = args.scalar(1)?.to_bytes()[0].into();
        Ok(())
    };
    let kernel = Arc::new(CustomKernel {
        name: "touch".to_owned(),
        cpu: Some(Arc::new(body)),
        wgsl: None,
        cuda: None,
        hip: None,
    });
    let call = |kernel: &Arc<CustomKernel>| {
        let mut args: Vec<KernelArg<CpuMemory>> = memories
            .iter()
            .enumerate()
            .map(|(at, memory)| {
                let access = if at % 2 == 0 { Access::Read } else { Access::ReadWrite };
                KernelArg::Buffer(Span { buffer: memory.clone(), offset: 0, len: 64 }, access)
            })
            .collect();
        args.extend([KernelArg::Scalar(ScalarArg::U32(1)), KernelArg::Scalar(ScalarArg::U32(9))]);
        Command::<CpuMemory, ()>::Custom { kernel: kernel.clone(), grid: Grid::linear(1, 1), args }
    };
    // Warm: whatever is made once per thread is made now.
    host::run(call(&kernel), &counters, |(), _| {}).expect("the first call runs");
    let command = call(&kernel);
    let before = allocations();
    host::run(command, &counters, |(), _| {}).expect("the call runs");
    assert_eq!(allocations() - before, 0, "the call allocated on the heap");
    // The body ran over the right views: the last buffer, written, holds the second scalar.
    let written = memories[7].clone();
    let mut seen = None;
    host::run(
        Command::Download { src: Span { buffer: written, offset: 0, len: 4 }, sink: () },
        &counters,
        |(), bytes| seen = Some(bytes),
    )
    .expect("the read runs");
    assert_eq!(seen, Some(9u32.to_ne_bytes().to_vec()));
}
