//! The recorded graph handle.

use std::sync::Arc;

use crate::error::Result;
use crate::stream::WeirStream;

/// Ops recorded once (`WeirStream.record` in Kotlin and Swift) and replayed
/// as one op by `WeirStream.replay`, any number of times, on any stream of
/// the runtime that recorded them: a replay waits for what any recorded op
/// depends on and publishes one version of each buffer they write. The
/// buffers named stay alive while the graph does. On CUDA a graph is a CUDA
/// graph; on wgpu and the CPU, a recorded command list.
#[derive(Debug, uniffi::Object)]
pub struct Graph {
    inner: weir_core::Graph,
}

impl Graph {
    pub(crate) fn new(inner: weir_core::Graph) -> Self {
        Graph { inner }
    }
}

#[uniffi::export]
impl Graph {
    /// How many ops a replay runs.
    pub fn op_count(&self) -> u64 {
        self.inner.len() as u64
    }
}

#[uniffi::export]
impl WeirStream {
    /// Admits `graph` as one op on this stream. A graph of another runtime
    /// is `ForeignHandle`.
    pub fn replay(&self, graph: Arc<Graph>) -> Result<()> {
        Ok(self.core().replay(&graph.inner)?)
    }
}
