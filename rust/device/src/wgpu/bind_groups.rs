//! Bind groups, kept for reuse: an op that binds the same windows of the
//! same buffers with the same layout as an earlier one (a kernel launched
//! again and again on its buffers) binds the group made then, instead of
//! making one per dispatch.
//!
//! Only groups of storage windows are kept (scalars are immediate data
//! there); a group holding a per-op uniform buffer is made per dispatch. An
//! entry holds its buffers alive, so dropping a buffer's memory drops the
//! entries that bind it ([`BindGroups::forget`]); the cache holds at most
//! `MOST` entries and starts over when full.

use std::collections::HashMap;
use std::sync::Mutex;

use smallvec::SmallVec;

use crate::lock::lock;

/// Entries kept at most.
const MOST: usize = 1024;

/// A storage window as bound: buffer, offset, size.
pub(crate) type Window = (wgpu::Buffer, u64, u64);

/// The windows of one group, at bindings `0..`.
pub(crate) type Windows = SmallVec<[Window; 3]>;

/// The kept groups, by layout and windows.
#[derive(Default)]
pub struct BindGroups {
    entries: Mutex<HashMap<(wgpu::BindGroupLayout, Windows), wgpu::BindGroup>>,
}

impl BindGroups {
    /// The group of `layout` binding `windows` at bindings `0..`, made with
    /// `make` if none is kept.
    pub fn get(
        &self,
        layout: &wgpu::BindGroupLayout,
        windows: Windows,
        make: impl FnOnce() -> wgpu::BindGroup,
    ) -> wgpu::BindGroup {
        let key = (layout.clone(), windows);
        let mut entries = lock(&self.entries);
        if let Some(group) = entries.get(&key) {
            return group.clone();
        }
        if entries.len() >= MOST {
            entries.clear();
        }
        let group = make();
        entries.insert(key, group.clone());
        group
    }

    /// Entries kept now.
    #[cfg(feature = "test-support")]
    pub fn kept(&self) -> usize {
        lock(&self.entries).len()
    }

    /// Drops every entry binding bytes `start..start + len` of `buffer`
    /// (an allocation there is being freed).
    pub fn forget(&self, buffer: &wgpu::Buffer, start: u64, len: u64) {
        let mut entries = lock(&self.entries);
        if !entries.is_empty() {
            let binds =
                |(bound, offset, size): &Window| bound == buffer && *offset < start + len && start < offset + size;
            entries.retain(|(_, windows), _| !windows.iter().any(binds));
        }
    }
}
