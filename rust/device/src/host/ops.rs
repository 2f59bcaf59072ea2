//! Runs commands over host memory, on the calling thread.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::memory::{heap_copy, AccessGuard, CpuMemory};
use crate::command::{BinaryOp, Command, KernelArg, Span};
use crate::counters::Counters;
use crate::kernel::{CallArgs, CpuKernelArgs, CpuView, ScalarArg};
use crate::{Access, Grid};

type Run = Result<(), String>;

fn read(span: &Span<CpuMemory>) -> Result<AccessGuard, String> {
    CpuMemory::begin(span, false)
}

fn write(span: &Span<CpuMemory>) -> Result<AccessGuard, String> {
    CpuMemory::begin(span, true)
}

fn f32s(bytes: &[u8]) -> Result<&[f32], String> {
    bytemuck::try_cast_slice(bytes).map_err(|e| format!("f32 view: {e}"))
}

fn f32s_mut(bytes: &mut [u8]) -> Result<&mut [f32], String> {
    bytemuck::try_cast_slice_mut(bytes).map_err(|e| format!("f32 view: {e}"))
}

/// Runs one command to completion on the calling thread; a download's
/// bytes go to `deliver` with its sink, once its read of the memory ended.
pub fn run<S>(command: Command<CpuMemory, S>, counters: &Arc<Counters>, deliver: impl FnOnce(S, Vec<u8>)) -> Run {
    match command {
        Command::Zero { dst } => write(&dst)?.bytes_mut()?.fill(0),
        Command::Fill { dst, word } => {
            let (mut guard, pattern) = (write(&dst)?, word.to_ne_bytes());
            // Whole words as fixed-size copies (no copy call per word), then
            // the bytes of a last partial word.
            let mut words = guard.bytes_mut()?.chunks_exact_mut(4);
            words.by_ref().for_each(|chunk| chunk.copy_from_slice(&pattern));
            let tail = words.into_remainder();
            tail.copy_from_slice(&pattern[..tail.len()]);
        }
        Command::Copy { src, dst } => {
            let (from, mut to) = (read(&src)?, write(&dst)?);
            to.bytes_mut()?.copy_from_slice(from.bytes());
        }
        Command::Upload { dst, data } => {
            write(&dst)?.bytes_mut()?.copy_from_slice(&data);
            counters.host_to_device_copies.fetch_add(1, Ordering::Relaxed);
        }
        Command::Download { src, sink } => {
            // The read ends before its delivery, as on a device: a reader
            // woken by it may let another stream overwrite the source at once.
            let source = read(&src)?;
            // Out of host memory, the read fails rather than the process.
            let bytes = heap_copy(source.bytes()).map_err(|error| error.to_string())?;
            drop(source);
            deliver(sink, bytes);
            counters.device_to_host_copies.fetch_add(1, Ordering::Relaxed);
        }
        Command::Binary { op, a, b, out } => {
            let (a, b, mut out) = (read(&a)?, read(&b)?, write(&out)?);
            let (a, b, out) = (f32s(a.bytes())?, f32s(b.bytes())?, f32s_mut(out.bytes_mut()?)?);
            for ((o, x), y) in out.iter_mut().zip(a).zip(b) {
                *o = match op {
                    BinaryOp::Add => x + y,
                    BinaryOp::Mul => x * y,
                };
            }
        }
        Command::Scale { x, out, alpha } => {
            let (x, mut out) = (read(&x)?, write(&out)?);
            f32s_mut(out.bytes_mut()?)?.iter_mut().zip(f32s(x.bytes())?).for_each(|(o, v)| *o = alpha * v);
        }
        Command::Axpy { x, y, alpha } => {
            let (x, mut y) = (read(&x)?, write(&y)?);
            f32s_mut(y.bytes_mut()?)?.iter_mut().zip(f32s(x.bytes())?).for_each(|(o, v)| *o += alpha * v);
        }
        Command::Iota { out, start } => {
            let mut guard = write(&out)?;
            let words: &mut [u32] =
                bytemuck::try_cast_slice_mut(guard.bytes_mut()?).map_err(|e| format!("u32 view: {e}"))?;
            words.iter_mut().enumerate().for_each(|(i, w)| *w = start.wrapping_add(i as u32));
        }
        // Only a zero delay comes here; a longer one holds its stream at a
        // timed gate of the engine's instead.
        #[cfg(feature = "test-support")]
        Command::Delay { .. } => {}
        Command::Custom { kernel, grid, args } => {
            let body =
                kernel.cpu.as_ref().ok_or_else(|| format!("kernel {} has no CPU implementation", kernel.name))?;
            let mut buffers = CallArgs::new();
            let mut scalars = CallArgs::new();
            for arg in args {
                match arg {
                    KernelArg::Buffer(span, access) => buffers.push((span, access)),
                    KernelArg::Scalar(scalar) => scalars.push(scalar),
                }
            }
            with_kernel_args(&buffers, grid, scalars, |args| body(args))?;
        }
    }
    Ok(())
}

/// Runs `body` over `buffers`, each opened as declared and in order, and
/// `scalars`: what a CPU kernel, or an external op's host work, gets.
pub fn with_kernel_args(
    buffers: &[(Span<CpuMemory>, Access)],
    grid: Grid,
    scalars: impl IntoIterator<Item = ScalarArg>,
    body: impl FnOnce(&mut CpuKernelArgs<'_>) -> Run,
) -> Run {
    let mut guards = buffers
        .iter()
        .map(|(span, access)| CpuMemory::begin(span, access.writes()))
        .collect::<Result<CallArgs<_>, _>>()?;
    let mut views = CallArgs::with_capacity(guards.len());
    for guard in &mut guards {
        views.push(if guard.is_write() { CpuView::Write(guard.bytes_mut()?) } else { CpuView::Read(guard.bytes()) });
    }
    let mut args = CpuKernelArgs::new(grid, views, scalars.into_iter().collect());
    body(&mut args)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whole(memory: &CpuMemory) -> Span<CpuMemory> {
        Span { buffer: memory.clone(), offset: 0, len: memory.size() }
    }

    #[test]
    fn a_download_is_delivered_once_its_read_of_the_memory_is_over() {
        let counters = Arc::new(Counters::default());
        let memory = CpuMemory::allocate(8, &counters).expect("8 bytes");
        let fill = Command::<CpuMemory, ()>::Fill { dst: whole(&memory), word: 7 };
        run(fill, &counters, |(), _| unreachable!("a fill delivers nothing")).expect("the fill runs");
        let mut delivered = None;
        let download = Command::Download { src: whole(&memory), sink: memory.clone() };
        run(download, &counters, |sink: CpuMemory, bytes| {
            // A reader woken by the delivery may let another stream write
            // the source at once: the download's read must be over by then.
            let write = CpuMemory::begin(&whole(&sink), true);
            delivered = Some((bytes, write.is_ok()));
        })
        .expect("the download runs");
        assert_eq!(delivered, Some((7u32.to_ne_bytes().repeat(2), true)));
        assert_eq!(counters.race_violations.load(Ordering::SeqCst), 0);
        assert_eq!(counters.device_to_host_copies.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_fill_repeats_its_word_to_the_last_byte_of_a_span_of_any_length() {
        let counters = Arc::new(Counters::default());
        let word = u32::from_ne_bytes([1, 2, 3, 4]);
        for len in [0, 1, 3, 4, 10, 64, 67] {
            let memory = CpuMemory::allocate(len, &counters).expect("memory");
            run(Command::<CpuMemory, ()>::Fill { dst: whole(&memory), word }, &counters, |(), _| {}).expect("the fill");
            let mut filled = Vec::new();
            let download = Command::Download { src: whole(&memory), sink: () };
            run(download, &counters, |(), bytes| filled = bytes).expect("the read");
            let expected: Vec<u8> = [1u8, 2, 3, 4].iter().copied().cycle().take(len as usize).collect();
            assert_eq!(filled, expected, "a fill of {len} bytes");
        }
    }

    #[test]
    fn a_failed_read_delivers_nothing() {
        let counters = Arc::new(Counters::default());
        let memory = CpuMemory::allocate(8, &counters).expect("8 bytes");
        let _writing = CpuMemory::begin(&whole(&memory), true).expect("a write of the whole buffer");
        let download = Command::Download { src: whole(&memory), sink: () };
        let ran = run(download, &counters, |(), _| panic!("a read that overlaps a running write delivered bytes"));
        assert!(ran.is_err_and(|message| message.contains("race detected")));
        assert_eq!(counters.device_to_host_copies.load(Ordering::SeqCst), 0);
    }
}
