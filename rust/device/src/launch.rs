//! How an op touches its buffers, and a kernel's launch shape: what the
//! scheduler orders by and what a driver launches with.

/// How an op touches a buffer. Declared for every buffer of every op: the
/// scheduler orders ops from it and nothing else.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Access {
    Read,
    Write,
    ReadWrite,
}

impl Access {
    /// True if the op depends on the buffer's previous contents.
    pub fn reads(self) -> bool {
        matches!(self, Access::Read | Access::ReadWrite)
    }
    /// True if the op defines new contents.
    pub fn writes(self) -> bool {
        matches!(self, Access::Write | Access::ReadWrite)
    }
}

/// Launch shape of a custom kernel: work groups (CUDA/HIP blocks, WGSL
/// workgroups), the threads of one group (the block), and dynamic shared
/// memory in bytes for CUDA/HIP. The block is the grid's on every backend: a
/// CPU closure reads it from `CpuKernelArgs::grid`, and a WGSL kernel takes
/// it through `override` constants in its `@workgroup_size` (one written as
/// numbers must be this block, or the launch is refused).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grid {
    pub groups: [u32; 3],
    pub block: [u32; 3],
    pub shared_bytes: u32,
}

impl Grid {
    /// `groups` work groups of `block` threads, no shared memory.
    pub fn new(groups: [u32; 3], block: [u32; 3]) -> Self {
        Grid { groups, block, shared_bytes: 0 }
    }

    /// Enough groups of `block` threads along x to cover `items` items.
    pub fn linear(items: u32, block: u32) -> Self {
        let block = block.max(1);
        Grid::new([items.div_ceil(block).max(1), 1, 1], [block, 1, 1])
    }

    /// The same grid with `bytes` of dynamic shared memory.
    pub fn with_shared_bytes(mut self, bytes: u32) -> Self {
        self.shared_bytes = bytes;
        self
    }

    /// Total number of threads the grid launches; `None` if that overflows a `u64`.
    pub fn threads(&self) -> Option<u64> {
        self.groups.iter().chain(&self.block).try_fold(1u64, |total, &n| total.checked_mul(u64::from(n)))
    }
}
