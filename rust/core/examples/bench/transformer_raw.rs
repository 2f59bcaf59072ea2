//! The transformer example (`examples/transformer.rs`) beside a raw
//! single-stream version of the same kernels: NVRTC, the driver and cuBLAS
//! called by hand on one stream, request after request, as a program
//! without Weir would serve them. Weir's figures are the example's own run
//! (one stream, and K requests in flight on K streams).

use std::ffi::c_void;
use std::time::{Duration, Instant};

use weir_core::backend::cuda::cudarc::cublas::{result as blas, sys as blas_sys};
use weir_core::backend::cuda::cudarc::driver::sys as cu;
use weir_core::Runtime;

use super::{ck, launch, Raw};
use crate::report::{Figure, Report};
use crate::transformer::{self, Shape, Weights};

const REQUESTS: usize = 32;
const IN_FLIGHT: usize = 8;

/// Device memory holding `values`.
fn upload(raw: &Raw, values: &[f32]) -> u64 {
    let ptr = raw.alloc(values.len() * 4);
    // SAFETY: a fresh allocation of exactly these bytes.
    ck("cuMemcpyHtoD", unsafe { cu::cuMemcpyHtoD_v2(ptr, values.as_ptr().cast(), values.len() * 4) });
    ptr
}

/// A pointer to each of `values`, as cuLaunchKernel takes its parameters.
fn params(values: &mut [u64]) -> Vec<*mut c_void> {
    values.iter_mut().map(|value| (value as *mut u64).cast()).collect()
}

pub fn run(report: &mut Report, runtime: &Runtime, raw: &Raw) {
    let shape = Shape::GPT2_SMALL;
    let options = transformer::Options { backend: None, shape, requests: REQUESTS, in_flight: IN_FLIGHT };
    let weir = match transformer::run(runtime, &options) {
        Ok(report) if report.worst <= transformer::TOLERANCE => report,
        Ok(report) => return eprintln!("cuda: transformer skipped: Weir's outputs are off: {}", report.summary),
        Err(error) => return eprintln!("cuda: transformer skipped: {error}"),
    };
    let figure = |name: &str| weir.figures.iter().find(|(figure, _)| figure.starts_with(name)).map(|(_, v)| *v);
    let (Some(weir_one), Some(weir_many)) =
        (figure("tokens/s, one stream"), figure(&format!("tokens/s, {IN_FLIGHT} streams")))
    else {
        return eprintln!("cuda: transformer skipped: the example reported no rates");
    };
    let served = raw_single_stream(raw, shape);
    let (raw_rate, raw_outputs) = (served.rate, served.first);
    // The raw outputs are the host's too (the same kernels, the same cuBLAS calls).
    let weights = Weights::random(shape, transformer::WEIGHTS_SEED);
    let first = transformer::inputs(shape, 1).remove(0);
    let want = transformer::forward_on_host(shape, &weights, &first);
    let worst = raw_outputs.iter().zip(&want).map(|(g, w)| (g - w).abs() / (1.0 + w.abs())).fold(0f32, f32::max);
    assert!(worst <= transformer::TOLERANCE, "the raw version's output is off the host's by {worst}");
    for (name, rate) in [("one stream", weir_one), (&*format!("{IN_FLIGHT} streams"), weir_many)] {
        let figure = Figure::beside(
            "cuda",
            &format!("transformer block (GPT-2 small), Weir {name}"),
            "tokens/s",
            rate,
            raw_rate,
            true,
            &format!(
                "{REQUESTS} requests of {} tokens, each checked against the host's; raw: the same kernels and cuBLAS \
                 calls by hand on one stream, request after request",
                shape.tokens
            ),
        );
        report.add(like_for_like(figure, name));
    }
    // Latency and the device's busy fraction, each way, beside raw's.
    let note = "each request admitted to read back, median; raw: the same kernels by hand on one stream";
    for (name, raw_value, higher, unit, note) in [
        ("latency per request", served.latency_ms, false, "ms", note),
        (
            "device busy fraction",
            served.busy,
            true,
            "of the wall time",
            "the share of the run in which a request was on the device, from timestamps (Weir) or timing events \
             (raw) around each request",
        ),
    ] {
        for streams in ["one stream".to_owned(), format!("{IN_FLIGHT} streams")] {
            if let Some(value) = figure(&format!("{name}, {streams}")) {
                let figure = Figure::beside(
                    "cuda",
                    &format!("transformer block, {name}, Weir {streams}"),
                    unit,
                    value,
                    raw_value,
                    higher,
                    note,
                );
                report.add(like_for_like(figure, &streams));
            }
        }
    }
}

/// The raw version's run: its rate, the first request's output, the median
/// latency per request and the device's busy fraction.
struct RawServed {
    rate: f64,
    first: Vec<f32>,
    latency_ms: f64,
    busy: f64,
}

/// Serves the example's requests one after another on one raw stream.
fn raw_single_stream(raw: &Raw, shape: Shape) -> RawServed {
    let Shape { d, heads, tokens } = shape;
    let w = Weights::random(shape, transformer::WEIGHTS_SEED);
    let inputs = transformer::inputs(shape, REQUESTS);
    raw.bind();
    let stream = raw.stream();
    let layernorm = raw.function(transformer::LAYERNORM_CU, "layernorm");
    let bias_act = raw.function(transformer::BIAS_ACT_CU, "bias_act");
    let attention = raw.function(transformer::ATTENTION_CU, "attention");
    let add = raw.function(ADD, "add");
    let (ln1, ln2) = ((upload(raw, &w.ln1.0), upload(raw, &w.ln1.1)), (upload(raw, &w.ln2.0), upload(raw, &w.ln2.1)));
    let (w_qkv, b_qkv, w_out, b_out) =
        (upload(raw, &w.w_qkv), upload(raw, &w.b_qkv), upload(raw, &w.w_out), upload(raw, &w.b_out));
    let (w_up, b_up, w_down, b_down) =
        (upload(raw, &w.w_up), upload(raw, &w.b_up), upload(raw, &w.w_down), upload(raw, &w.b_down));
    let floats = |count: usize| raw.alloc(count * 4);
    let (x, normed, qkv, attended) =
        (floats(tokens * d), floats(tokens * d), floats(tokens * 3 * d), floats(tokens * d));
    let (projected, residual, hidden, out) =
        (floats(tokens * d), floats(tokens * d), floats(tokens * 4 * d), floats(tokens * d));
    let handle = blas::create_handle().expect("cuBLAS handle");
    // SAFETY: a live handle and stream.
    unsafe { blas::set_stream(handle, stream as blas_sys::cudaStream_t) }.expect("cublasSetStream");
    let groups = |items: usize| (items as u32).div_ceil(transformer::BLOCK);
    let u32s = |value: usize| value as u64;
    let linear = |a: u64, weights: u64, bias: u64, c: u64, (m, n, k): (usize, usize, usize), gelu: bool| {
        let (alpha, beta) = (1.0f32, 0.0f32);
        // SAFETY: live allocations sized for these shapes, on the handle's stream
        // (row-major C = A · W as column-major Cᵀ = Wᵀ · Aᵀ).
        unsafe {
            blas::sgemm(
                handle,
                blas_sys::cublasOperation_t::CUBLAS_OP_N,
                blas_sys::cublasOperation_t::CUBLAS_OP_N,
                n as i32,
                m as i32,
                k as i32,
                &alpha,
                weights as usize as *const f32,
                n as i32,
                a as usize as *const f32,
                k as i32,
                &beta,
                c as usize as *mut f32,
                n as i32,
            )
        }
        .expect("cublasSgemm");
        let mut values = [c, bias, u32s(m * n), u32s(n), u64::from(gelu)];
        launch_values(bias_act, groups(m * n), stream, &mut values);
    };
    let norm = |input: u64, (gamma, beta): (u64, u64), output: u64| {
        let mut values = [input, gamma, beta, output, u32s(tokens), u32s(d)];
        launch_values(layernorm, groups(tokens), stream, &mut values);
    };
    // Timing events: the stream reaches `before` as a request starts and
    // `after` once its output is read back; `origin` places them on the host's clock.
    let (origin, before, after) = (raw.timing_event(), raw.timing_event(), raw.timing_event());
    let record = |event: cu::CUevent| {
        // SAFETY: a live event and stream.
        ck("cuEventRecord", unsafe { cu::cuEventRecord(event, stream) });
    };
    let forward = |input: &[f32], output: &mut [f32]| {
        record(before);
        // SAFETY: `x` holds tokens × d floats, as `input` does; `out` likewise for `output`.
        unsafe { ck("cuMemcpyHtoDAsync", cu::cuMemcpyHtoDAsync_v2(x, input.as_ptr().cast(), input.len() * 4, stream)) };
        norm(x, ln1, normed);
        linear(normed, w_qkv, b_qkv, qkv, (tokens, 3 * d, d), false);
        let mut values = [qkv, attended, u32s(tokens), u32s(d), u32s(heads)];
        launch_values(attention, groups(heads * tokens), stream, &mut values);
        linear(attended, w_out, b_out, projected, (tokens, d, d), false);
        let mut values = [x, projected, residual, u32s(tokens * d)];
        launch_values(add, groups(tokens * d), stream, &mut values);
        norm(residual, ln2, normed);
        linear(normed, w_up, b_up, hidden, (tokens, 4 * d, d), true);
        linear(hidden, w_down, b_down, projected, (tokens, d, 4 * d), false);
        let mut values = [residual, projected, out, u32s(tokens * d)];
        launch_values(add, groups(tokens * d), stream, &mut values);
        // SAFETY: as above.
        unsafe {
            ck("cuMemcpyDtoHAsync", cu::cuMemcpyDtoHAsync_v2(output.as_mut_ptr().cast(), out, output.len() * 4, stream))
        };
        record(after);
        raw.sync(stream);
    };
    let mut first = vec![0f32; tokens * d];
    forward(&inputs[0], &mut first);
    let mut output = vec![0f32; tokens * d];
    let since_origin = |event: cu::CUevent| {
        let mut ms = 0f32;
        // SAFETY: both events recorded on `stream`, which is synchronized.
        ck("cuEventElapsedTime", unsafe { cu::cuEventElapsedTime_v2(&mut ms, origin, event) });
        Duration::from_secs_f64(f64::from(ms.max(0.0)) / 1e3)
    };
    let start = Instant::now();
    // The stream is idle: the device reaches `origin` as it is recorded.
    record(origin);
    let origin_at = start.elapsed();
    let (mut latencies, mut spans) = (Vec::new(), Vec::new());
    for input in &inputs {
        let admitted = start.elapsed();
        forward(input, &mut output);
        latencies.push(start.elapsed() - admitted);
        spans.push((origin_at + since_origin(before), origin_at + since_origin(after)));
    }
    let wall = start.elapsed();
    latencies.sort_unstable();
    // SAFETY: made above; the last sync ended every use.
    unsafe {
        blas::destroy_handle(handle).expect("cublasDestroy");
        for event in [origin, before, after] {
            ck("cuEventDestroy", cu::cuEventDestroy_v2(event));
        }
    }
    RawServed {
        rate: (REQUESTS * tokens) as f64 / wall.as_secs_f64(),
        first,
        latency_ms: latencies[latencies.len() / 2].as_secs_f64() * 1e3,
        busy: transformer::busy_fraction(spans, wall),
    }
}

/// Launches `function` with `values`, each a device pointer (8 bytes) or an
/// `unsigned` parameter, which the driver reads as the first 4 bytes of its
/// value: its low half on a little-endian host.
fn launch_values(function: cu::CUfunction, groups: u32, stream: cu::CUstream, values: &mut [u64]) {
    launch(function, groups, transformer::BLOCK, stream, &mut params(values));
}

/// `out = a + b` over `n` floats: Weir's built-in add, by hand.
const ADD: &str = r#"extern "C" __global__ void add(const float* a, const float* b, float* out, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}"#;

/// `figure`, Weir on `streams` beside raw on one: Weir against raw only on
/// one stream; on more, it shows what the concurrency buys, not Weir's cost,
/// so it stays out of the picture of Weir beside raw.
fn like_for_like(figure: Figure, streams: &str) -> Figure {
    match streams {
        "one stream" => figure,
        _ => figure.against_itself(),
    }
}
