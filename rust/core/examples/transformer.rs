//! A transformer block's forward pass (GPT-2's: layernorm, QKV projection,
//! causal attention, output projection, residual, layernorm, MLP with GELU,
//! residual) served to several requests at once, each on a stream of its
//! own over the same read-only weights, checked against the same arithmetic
//! on the host.
//!
//! On CUDA the projections are cuBLAS GEMMs ordered by Weir like any op; on
//! wgpu (a GPU's Vulkan, Metal or DX12, or lavapipe in CI at `--small` size)
//! every step is a WGSL kernel. The kernels are the files of
//! `examples/transformer/kernels`, the ones the Kotlin and Swift versions load.
//!
//! The figures: the requests with `--in-flight K` of them on K streams,
//! beside the same requests one after another on one stream (tokens per
//! second, latency per request), and where the block records as a graph
//! (wgpu: every op a kernel), the K streams again with each request's
//! block replayed from a graph. The device's busy fraction is the share of
//! a run's wall time in which at least one request was on the device, from
//! timestamps each stream reaches around each request (a request's span
//! counts as busy throughout: the gaps between its own kernels, if the host
//! falls behind, are not seen). Options: `--backend cuda|wgpu` (default:
//! the first that opens), `--small` (d = 64, 4 heads, 16 tokens: what a
//! software device runs in seconds), `--requests N` (32), `--in-flight K` (8).

use std::time::{Duration, Instant};

use weir_core::{
    Arg, BackendKind, Buffer, ElementType, Graph, Grid, Kernel, PendingRead, Runtime, Stream, Timeline, TimelineBar,
};

const KERNELS: &str = "examples/transformer/kernels";
const LAYERNORM_WGSL: &str = include_str!("../../../examples/transformer/kernels/layernorm.wgsl");
pub const LAYERNORM_CU: &str = include_str!("../../../examples/transformer/kernels/layernorm.cu");
const BIAS_ACT_WGSL: &str = include_str!("../../../examples/transformer/kernels/bias_act.wgsl");
pub const BIAS_ACT_CU: &str = include_str!("../../../examples/transformer/kernels/bias_act.cu");
const ATTENTION_WGSL: &str = include_str!("../../../examples/transformer/kernels/attention.wgsl");
pub const ATTENTION_CU: &str = include_str!("../../../examples/transformer/kernels/attention.cu");
const MATMUL_WGSL: &str = include_str!("../../../examples/transformer/kernels/matmul.wgsl");

/// Threads per block of every kernel.
pub const BLOCK: u32 = 64;

/// The block's shape: model width, heads, tokens per request.
#[derive(Clone, Copy)]
pub struct Shape {
    pub d: usize,
    pub heads: usize,
    pub tokens: usize,
}

impl Shape {
    pub const GPT2_SMALL: Shape = Shape { d: 768, heads: 12, tokens: 64 };
    pub const SMALL: Shape = Shape { d: 64, heads: 4, tokens: 16 };
}

/// A deterministic stream of numbers in (-scale, scale): the weights and inputs.
pub struct Numbers(pub u64);

impl Numbers {
    pub fn take(&mut self, count: usize, scale: f32) -> Vec<f32> {
        (0..count)
            .map(|_| {
                // xorshift64*
                self.0 ^= self.0 >> 12;
                self.0 ^= self.0 << 25;
                self.0 ^= self.0 >> 27;
                let bits = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 40;
                (bits as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
            })
            .collect()
    }
}

/// The seed of the weights every run (and every language's version) uses.
pub const WEIGHTS_SEED: u64 = 0x5eed;

/// Request `i`'s input: `tokens × d` numbers from seed `i + 1`.
pub fn inputs(shape: Shape, requests: usize) -> Vec<Vec<f32>> {
    (0..requests).map(|request| Numbers(1 + request as u64).take(shape.tokens * shape.d, 1.0)).collect()
}

/// The block's parameters, row-major: `w_qkv` is d × 3d, `w_out` d × d,
/// `w_up` d × 4d, `w_down` 4d × d.
pub struct Weights {
    pub ln1: (Vec<f32>, Vec<f32>),
    pub w_qkv: Vec<f32>,
    pub b_qkv: Vec<f32>,
    pub w_out: Vec<f32>,
    pub b_out: Vec<f32>,
    pub ln2: (Vec<f32>, Vec<f32>),
    pub w_up: Vec<f32>,
    pub b_up: Vec<f32>,
    pub w_down: Vec<f32>,
    pub b_down: Vec<f32>,
}

impl Weights {
    pub fn random(shape: Shape, seed: u64) -> Weights {
        let (d, mut numbers) = (shape.d, Numbers(seed));
        let gain = |numbers: &mut Numbers| numbers.take(d, 0.1).into_iter().map(|v| 1.0 + v).collect();
        Weights {
            ln1: (gain(&mut numbers), numbers.take(d, 0.1)),
            w_qkv: numbers.take(d * 3 * d, 0.05),
            b_qkv: numbers.take(3 * d, 0.02),
            w_out: numbers.take(d * d, 0.05),
            b_out: numbers.take(d, 0.02),
            ln2: (gain(&mut numbers), numbers.take(d, 0.1)),
            w_up: numbers.take(d * 4 * d, 0.05),
            b_up: numbers.take(4 * d, 0.02),
            w_down: numbers.take(4 * d * d, 0.05),
            b_down: numbers.take(d, 0.02),
        }
    }
}

/// The weights on the device, uploaded once and only read after.
struct DeviceWeights {
    ln1: (Buffer, Buffer),
    w_qkv: Buffer,
    b_qkv: Buffer,
    w_out: Buffer,
    b_out: Buffer,
    ln2: (Buffer, Buffer),
    w_up: Buffer,
    b_up: Buffer,
    w_down: Buffer,
    b_down: Buffer,
}

impl DeviceWeights {
    fn upload(stream: &Stream, w: &Weights) -> weir_core::Result<DeviceWeights> {
        Ok(DeviceWeights {
            ln1: (stream.upload(&w.ln1.0)?, stream.upload(&w.ln1.1)?),
            w_qkv: stream.upload(&w.w_qkv)?,
            b_qkv: stream.upload(&w.b_qkv)?,
            w_out: stream.upload(&w.w_out)?,
            b_out: stream.upload(&w.b_out)?,
            ln2: (stream.upload(&w.ln2.0)?, stream.upload(&w.ln2.1)?),
            w_up: stream.upload(&w.w_up)?,
            b_up: stream.upload(&w.b_up)?,
            w_down: stream.upload(&w.w_down)?,
            b_down: stream.upload(&w.b_down)?,
        })
    }
}

/// One request's activations on the device: a slot reused by every K-th request.
struct Slot {
    x: Buffer,
    normed: Buffer,
    qkv: Buffer,
    attended: Buffer,
    projected: Buffer,
    residual: Buffer,
    hidden: Buffer,
    out: Buffer,
}

impl Slot {
    fn new(stream: &Stream, shape: Shape) -> weir_core::Result<Slot> {
        let (t, d) = (shape.tokens as u64, shape.d as u64);
        let floats = |count: u64| stream.zeros(ElementType::F32, count);
        Ok(Slot {
            x: floats(t * d)?,
            normed: floats(t * d)?,
            qkv: floats(t * 3 * d)?,
            attended: floats(t * d)?,
            projected: floats(t * d)?,
            residual: floats(t * d)?,
            hidden: floats(t * 4 * d)?,
            out: floats(t * d)?,
        })
    }
}

/// How the projections run: cuBLAS on CUDA, the WGSL kernel elsewhere.
enum Gemms {
    #[cfg(feature = "cuda")]
    Cublas(weir_core::Blas),
    Kernel(Kernel),
}

/// The model on one runtime: its kernels, weights and GEMMs.
struct Model {
    shape: Shape,
    layernorm: Kernel,
    bias_act: Kernel,
    attention: Kernel,
    gemms: Gemms,
    weights: DeviceWeights,
}

fn grid(items: usize) -> Grid {
    Grid::linear(items as u32, BLOCK)
}

impl Model {
    fn new(runtime: &Runtime, weights: &Weights, shape: Shape) -> weir_core::Result<Model> {
        let kernel = |name: &str, wgsl: &str, cuda: &str| {
            let kernel = Kernel::custom(name).wgsl(wgsl, name);
            if cuda.is_empty() { kernel } else { kernel.cuda(cuda, name) }.build()
        };
        let gemms = match runtime.info().backend {
            #[cfg(feature = "cuda")]
            BackendKind::Cuda => Gemms::Cublas(weir_core::Blas::new(runtime)?),
            _ => Gemms::Kernel(kernel("matmul", MATMUL_WGSL, "")),
        };
        let stream = runtime.default_stream();
        let model = Model {
            shape,
            layernorm: kernel("layernorm", LAYERNORM_WGSL, LAYERNORM_CU),
            bias_act: kernel("bias_act", BIAS_ACT_WGSL, BIAS_ACT_CU),
            attention: kernel("attention", ATTENTION_WGSL, ATTENTION_CU),
            gemms,
            weights: DeviceWeights::upload(&stream, weights)?,
        };
        stream.fence()?.wait()?;
        Ok(model)
    }

    /// `out[m × n] = a[m × k] · w[k × n] + bias`, GELU'd when asked.
    #[allow(clippy::too_many_arguments)] // a GEMM's operands and shape
    fn linear(
        &self,
        s: &Stream,
        a: &Buffer,
        w: &Buffer,
        bias: &Buffer,
        out: &Buffer,
        (m, n, k): (usize, usize, usize),
        gelu: bool,
    ) -> weir_core::Result<()> {
        match &self.gemms {
            // Row-major C = A · W is column-major Cᵀ = Wᵀ · Aᵀ.
            #[cfg(feature = "cuda")]
            Gemms::Cublas(blas) => blas.sgemm(s, &weir_core::Gemm::new(n as u32, m as u32, k as u32), w, a, out)?,
            Gemms::Kernel(matmul) => s.execute(
                matmul,
                grid(m * n),
                &[
                    Arg::read(a),
                    Arg::read(w),
                    Arg::write(out),
                    Arg::u32(m as u32),
                    Arg::u32(n as u32),
                    Arg::u32(k as u32),
                ],
            )?,
        }
        s.execute(
            &self.bias_act,
            grid(m * n),
            &[
                Arg::read_write(out),
                Arg::read(bias),
                Arg::u32((m * n) as u32),
                Arg::u32(n as u32),
                Arg::u32(gelu.into()),
            ],
        )
    }

    fn layernorm(
        &self,
        s: &Stream,
        x: &Buffer,
        (gamma, beta): &(Buffer, Buffer),
        out: &Buffer,
    ) -> weir_core::Result<()> {
        let Shape { d, tokens, .. } = self.shape;
        s.execute(
            &self.layernorm,
            grid(tokens),
            &[
                Arg::read(x),
                Arg::read(gamma),
                Arg::read(beta),
                Arg::write(out),
                Arg::u32(tokens as u32),
                Arg::u32(d as u32),
            ],
        )
    }

    /// Admits one request's forward pass on `s`: its input into the slot,
    /// the block, and the read of its output.
    fn forward(&self, s: &Stream, slot: &Slot, input: &[f32]) -> weir_core::Result<PendingRead> {
        s.write(&slot.x, 0, input)?;
        self.block(s, slot)?;
        s.enqueue_read(&slot.out)
    }

    /// The block's ops over `slot`, from its input to its output.
    fn block(&self, s: &Stream, slot: &Slot) -> weir_core::Result<()> {
        let (Shape { d, heads, tokens }, w) = (self.shape, &self.weights);
        self.layernorm(s, &slot.x, &w.ln1, &slot.normed)?;
        self.linear(s, &slot.normed, &w.w_qkv, &w.b_qkv, &slot.qkv, (tokens, 3 * d, d), false)?;
        s.execute(
            &self.attention,
            grid(heads * tokens),
            &[
                Arg::read(&slot.qkv),
                Arg::write(&slot.attended),
                Arg::u32(tokens as u32),
                Arg::u32(d as u32),
                Arg::u32(heads as u32),
            ],
        )?;
        self.linear(s, &slot.attended, &w.w_out, &w.b_out, &slot.projected, (tokens, d, d), false)?;
        s.add(&slot.x, &slot.projected, &slot.residual)?;
        self.layernorm(s, &slot.residual, &w.ln2, &slot.normed)?;
        self.linear(s, &slot.normed, &w.w_up, &w.b_up, &slot.hidden, (tokens, 4 * d, d), true)?;
        self.linear(s, &slot.hidden, &w.w_down, &w.b_down, &slot.projected, (tokens, d, 4 * d), false)?;
        s.add(&slot.residual, &slot.projected, &slot.out)
    }
}

/// The same block on the host, in f32 with f64 sums.
pub fn forward_on_host(shape: Shape, w: &Weights, x: &[f32]) -> Vec<f32> {
    let Shape { d, heads, tokens } = shape;
    let layernorm = |x: &[f32], (gamma, beta): &(Vec<f32>, Vec<f32>)| -> Vec<f32> {
        x.chunks(d)
            .flat_map(|row| {
                let mean = row.iter().map(|&v| f64::from(v)).sum::<f64>() / d as f64;
                let var = row.iter().map(|&v| (f64::from(v) - mean).powi(2)).sum::<f64>() / d as f64;
                let scale = 1.0 / (var + 1e-5).sqrt();
                row.iter()
                    .enumerate()
                    .map(move |(i, &v)| ((f64::from(v) - mean) * scale) as f32 * gamma[i] + beta[i])
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    let linear = |a: &[f32], w: &[f32], bias: &[f32], n: usize, gelu: bool| -> Vec<f32> {
        let k = a.len() / tokens;
        let mut out = vec![0f32; tokens * n];
        for row in 0..tokens {
            for col in 0..n {
                let sum: f64 = (0..k).map(|l| f64::from(a[row * k + l]) * f64::from(w[l * n + col])).sum();
                let v = sum as f32 + bias[col];
                out[row * n + col] =
                    if gelu { 0.5 * v * (1.0 + (0.797_884_6 * (v + 0.044_715 * v * v * v)).tanh()) } else { v };
            }
        }
        out
    };
    let normed = layernorm(x, &w.ln1);
    let qkv = linear(&normed, &w.w_qkv, &w.b_qkv, 3 * d, false);
    let size = d / heads;
    let mut attended = vec![0f32; tokens * d];
    for head in 0..heads {
        for t in 0..tokens {
            let q = &qkv[t * 3 * d + head * size..][..size];
            let scores: Vec<f64> = (0..=t)
                .map(|s| {
                    let k = &qkv[s * 3 * d + d + head * size..][..size];
                    q.iter().zip(k).map(|(&a, &b)| f64::from(a) * f64::from(b)).sum::<f64>() / (size as f64).sqrt()
                })
                .collect();
            let top = scores.iter().copied().fold(f64::MIN, f64::max);
            let weights: Vec<f64> = scores.iter().map(|&score| (score - top).exp()).collect();
            let total: f64 = weights.iter().sum();
            for i in 0..size {
                let v: f64 = (0..=t).map(|s| weights[s] * f64::from(qkv[s * 3 * d + 2 * d + head * size + i])).sum();
                attended[t * d + head * size + i] = (v / total) as f32;
            }
        }
    }
    let projected = linear(&attended, &w.w_out, &w.b_out, d, false);
    let residual: Vec<f32> = x.iter().zip(&projected).map(|(a, b)| a + b).collect();
    let normed = layernorm(&residual, &w.ln2);
    let hidden = linear(&normed, &w.w_up, &w.b_up, 4 * d, true);
    let down = linear(&hidden, &w.w_down, &w.b_down, d, false);
    residual.iter().zip(&down).map(|(a, b)| a + b).collect()
}

/// A request served: its index, when it was admitted and read back (host
/// time from the run's start), its output, and when it was on the device.
type Done = (usize, Duration, Duration, Vec<f32>, Option<DeviceSpan>);

/// When a request was on the device, on the run's host clock: from a
/// timestamp its stream reached just before the request's first op to one
/// just after its read-back. Each stream's device clock is placed on the
/// host's by a timestamp taken while the stream was idle, which the device
/// reaches as it is enqueued (microseconds off, against milliseconds a
/// request).
pub type DeviceSpan = (Duration, Duration);

/// The fraction of `wall` in which the device held at least one of `spans`:
/// the device's busy fraction, as far as the spans cover what it ran.
pub fn busy_fraction(mut spans: Vec<DeviceSpan>, wall: Duration) -> f64 {
    spans.sort_unstable();
    let mut covered = Duration::ZERO;
    let mut reach = Duration::ZERO;
    for (from, to) in spans {
        let from = from.max(reach);
        if to > from {
            covered += to - from;
            reach = to;
        }
    }
    (covered.as_secs_f64() / wall.as_secs_f64().max(f64::MIN_POSITIVE)).min(1.0)
}

/// How one way of serving went: its wall time, and per request its stream,
/// when it was admitted and read back (from the start), and its output.
struct Served {
    wall: Duration,
    spans: Vec<(usize, Duration, Duration)>,
    outputs: Vec<Vec<f32>>,
    /// Every request's [`DeviceSpan`], where the backend takes timestamps.
    on_device: Option<Vec<DeviceSpan>>,
}

/// Serves `inputs` on `streams`: request i on stream i mod K with slot i
/// mod K, from a thread per stream, which waits for a request's read before
/// it admits the next into the slot (as the Kotlin version's coroutines and
/// the Swift version's Tasks do).
fn serve(model: &Model, streams: &[Stream], slots: &[Slot], inputs: &[Vec<f32>]) -> weir_core::Result<Served> {
    serve_with(streams, inputs, |k, input| model.forward(&streams[k], &slots[k], input))
}

/// [`serve`], each request admitted on stream `k` by `admit(k, input)`.
fn serve_with(
    streams: &[Stream],
    inputs: &[Vec<f32>],
    admit: impl Fn(usize, &[f32]) -> weir_core::Result<PendingRead> + Sync,
) -> weir_core::Result<Served> {
    // Each request's output, made (its pages touched) before the clock
    // starts, as the raw version's is: a fresh allocation of an output's
    // size per request costs more in page faults than the copy into it
    // (130 us a request for GPT-2 small's 196 KiB on an H100's host).
    // Filled with NaN, not zero: a zeroed one comes from `calloc` with its
    // pages untouched, and the copy into it would fault them in on the clock.
    let outputs: Vec<Vec<Vec<f32>>> = (0..streams.len())
        .map(|k| {
            (k..inputs.len()).step_by(streams.len()).map(|request| vec![f32::NAN; inputs[request].len()]).collect()
        })
        .collect();
    let start = Instant::now();
    let served: Vec<weir_core::Result<Vec<Done>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = outputs
            .into_iter()
            .enumerate()
            .map(|(k, outputs)| {
                let admit = &admit;
                let mut outputs = outputs.into_iter();
                scope.spawn(move || {
                    let stream = &streams[k];
                    // The stream is idle: the device reaches this as it is enqueued.
                    let origin = stream.timestamp().ok().map(|origin| (origin, start.elapsed()));
                    let mut done = Vec::new();
                    for request in (k..inputs.len()).step_by(streams.len()) {
                        let admitted = start.elapsed();
                        let before = origin.as_ref().and_then(|_| stream.timestamp().ok());
                        let pending = admit(k, &inputs[request])?;
                        let after = before.as_ref().and_then(|_| stream.timestamp().ok());
                        let bytes = pending.wait_host()?;
                        let read = start.elapsed();
                        let on_device = match (&origin, before, after) {
                            (Some((origin, at)), Some(before), Some(after)) => {
                                Some((*at + before.elapsed_since(origin)?, *at + after.elapsed_since(origin)?))
                            }
                            _ => None,
                        };
                        let mut output = outputs.next().unwrap_or_default();
                        output.clear();
                        output.extend_from_slice(bytes.as_slice::<f32>()?);
                        done.push((request, admitted, read, output, on_device));
                    }
                    Ok(done)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| {
                handle
                    .join()
                    .unwrap_or_else(|_| Err(weir_core::Error::InvalidArgument("a serving thread panicked".into())))
            })
            .collect()
    });
    let wall = start.elapsed();
    let mut all: Vec<Done> = Vec::with_capacity(inputs.len());
    for done in served {
        all.extend(done?);
    }
    all.sort_by_key(|(request, ..)| *request);
    let spans = all.iter().map(|(request, from, to, ..)| (request % streams.len(), *from, *to)).collect();
    let on_device = all.iter().map(|(.., on_device)| *on_device).collect();
    Ok(Served { wall, spans, on_device, outputs: all.into_iter().map(|(.., output, _)| output).collect() })
}

/// Each request's latency: admitted to read back.
fn latencies(served: &Served) -> Vec<Duration> {
    served.spans.iter().map(|(_, from, to)| to.saturating_sub(*from)).collect()
}

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort_unstable();
    values.get(values.len() / 2).copied().unwrap_or_default()
}

pub struct Options {
    pub backend: Option<BackendKind>,
    pub shape: Shape,
    pub requests: usize,
    pub in_flight: usize,
}

fn options() -> Result<Options, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |name: &str| args.windows(2).find(|pair| pair[0] == name).map(|pair| pair[1].clone());
    let number = |name: &str, default: usize| match value(name) {
        None => Ok(default),
        Some(text) => text.parse::<usize>().map_err(|_| format!("{name} takes a number, not {text}")),
    };
    let backend = match value("--backend").as_deref() {
        None => None,
        Some("cuda") => Some(BackendKind::Cuda),
        Some("wgpu") => Some(BackendKind::Wgpu),
        Some(other) => return Err(format!("--backend takes cuda or wgpu, not {other}")),
    };
    let shape = if args.iter().any(|arg| arg == "--small") { Shape::SMALL } else { Shape::GPT2_SMALL };
    Ok(Options {
        backend,
        shape,
        requests: number("--requests", 32)?.max(1),
        in_flight: number("--in-flight", 8)?.max(1),
    })
}

/// What a run found: the largest difference of an output from the host's
/// (relative), and the figures by name.
pub struct Report {
    pub worst: f32,
    pub figures: Vec<(String, f64)>,
    pub summary: String,
    /// The run with every stream: a row per stream, a bar per request.
    pub timeline: Timeline,
}

/// The outputs may differ from the host's by this much, relative: summation
/// order and fused multiply-adds, over sums of up to 4d terms.
pub const TOLERANCE: f32 = 1e-4;

/// Serves `options.requests` requests both ways on `runtime`, checks every
/// output against the host's, and measures.
pub fn run(runtime: &Runtime, options: &Options) -> Result<Report, Box<dyn std::error::Error>> {
    let shape = options.shape;
    let weights = Weights::random(shape, WEIGHTS_SEED);
    let model = Model::new(runtime, &weights, shape)?;
    let inputs = inputs(shape, options.requests);
    let k = options.in_flight.min(options.requests);
    let streams: Vec<Stream> = (0..k).map(|_| runtime.new_stream()).collect::<Result<_, _>>()?;
    let slots: Vec<Slot> = (0..k).map(|_| Slot::new(&streams[0], shape)).collect::<Result<_, _>>()?;
    runtime.fence()?.wait()?;

    // Warm-up (first launches compile), then each way once, timed.
    serve(&model, &streams[..1], &slots[..1], &inputs[..1])?;
    let serial = serve(&model, &streams[..1], &slots[..1], &inputs)?;
    let overlapped = serve(&model, &streams, &slots, &inputs)?;
    // Each slot's block recorded once as a graph, replayed per request (one
    // op to admit instead of 14). cuBLAS calls are foreign code run at
    // admission, which a recording cannot hold: none on CUDA.
    let graphs: Option<Vec<Graph>> =
        slots.iter().map(|slot| streams[0].record(|s| model.block(s, slot)).ok()).collect();
    let replayed = match &graphs {
        Some(graphs) => Some(serve_with(&streams, &inputs, |k, input| {
            streams[k].write(&slots[k].x, 0, input)?;
            streams[k].replay(&graphs[k])?;
            streams[k].enqueue_read(&slots[k].out)
        })?),
        None => None,
    };

    // Every output of both runs against the host's arithmetic.
    let expected: Vec<Vec<f32>> = std::thread::scope(|scope| {
        let handles: Vec<_> =
            inputs.iter().map(|input| scope.spawn(|| forward_on_host(shape, &weights, input))).collect();
        handles.into_iter().map(|handle| handle.join().unwrap_or_default()).collect()
    });
    let mut worst = 0f32;
    for (request, want) in expected.iter().enumerate() {
        let replayed_output = replayed.as_ref().map(|replayed| &replayed.outputs[request]);
        for got in
            [Some(&serial.outputs[request]), Some(&overlapped.outputs[request]), replayed_output].into_iter().flatten()
        {
            if got.len() != want.len() {
                return Err(
                    format!("request {request}: {} values read back, {} expected", got.len(), want.len()).into()
                );
            }
            let error = got.iter().zip(want).map(|(g, w)| (g - w).abs() / (1.0 + w.abs())).fold(0f32, f32::max);
            worst = worst.max(if error.is_nan() { f32::INFINITY } else { error });
        }
    }

    let tokens = (options.requests * shape.tokens) as f64;
    let rate = |wall: Duration| tokens / wall.as_secs_f64();
    let (serial_wall, wall) = (serial.wall, overlapped.wall);
    let mut figures = vec![
        ("tokens/s, one stream".to_owned(), rate(serial_wall)),
        (format!("tokens/s, {k} streams"), rate(wall)),
        ("throughput, streams / one stream".to_owned(), serial_wall.as_secs_f64() / wall.as_secs_f64()),
        ("latency per request, one stream (ms)".to_owned(), median(latencies(&serial)).as_secs_f64() * 1e3),
        (format!("latency per request, {k} streams (ms)"), median(latencies(&overlapped)).as_secs_f64() * 1e3),
    ];
    for (name, served) in [("one stream".to_owned(), &serial), (format!("{k} streams"), &overlapped)] {
        if let Some(on_device) = &served.on_device {
            figures.push((format!("device busy fraction, {name}"), busy_fraction(on_device.clone(), served.wall)));
        }
    }
    if let Some(replayed) = &replayed {
        figures.push((format!("tokens/s, {k} streams, each request a replayed graph"), rate(replayed.wall)));
    }
    // The overlapped run as a picture: a row per stream, a bar per request.
    let timeline = Timeline {
        title: format!("transformer block on {}: {} requests on {k} streams", runtime.info().name, options.requests),
        rows: (0..k).map(|stream| format!("stream {stream}")).collect(),
        bars: overlapped
            .spans
            .iter()
            .enumerate()
            .map(|(request, &(row, start, end))| TimelineBar { row, start, end, label: format!("request {request}") })
            .collect(),
        waits: Vec::new(),
    };
    let summary = format!(
        "{k} streams: {:.0} tokens/s, {:.2}x one stream; every output of every run within {worst:.1e} of the host's",
        rate(wall),
        serial_wall.as_secs_f64() / wall.as_secs_f64()
    );
    Ok(Report { worst, figures, summary, timeline })
}

#[allow(dead_code)] // a test includes this file for `run`
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let options = options()?;
    let runtime = match options.backend {
        Some(kind) => Runtime::open(kind)?,
        None => Runtime::open(BackendKind::Cuda).or_else(|_| Runtime::open(BackendKind::Wgpu))?,
    };
    let (shape, info) = (options.shape, runtime.info());
    println!(
        "transformer block (d {}, {} heads, {} tokens a request) on {} ({}): {} requests, {} in flight; kernels: {KERNELS}",
        shape.d,
        shape.heads,
        shape.tokens,
        info.backend.name(),
        info.name,
        options.requests,
        options.in_flight
    );
    let report = run(&runtime, &options)?;
    let backend = info.backend.name();
    for (name, value) in &report.figures {
        println!("{{\"backend\":\"{backend}\",\"example\":\"transformer: {name}\",\"value\":{value:.3}}}");
    }
    println!("{}", report.summary);
    let picture = std::path::Path::new("target").join("weir-transformer-timeline.svg");
    match std::fs::create_dir_all("target").and_then(|()| std::fs::write(&picture, report.timeline.to_svg())) {
        Ok(()) => println!("the timeline as a picture: {}", picture.display()),
        Err(error) => println!("the timeline picture could not be written to {}: {error}", picture.display()),
    }
    if report.worst > TOLERANCE {
        return Err(
            format!("an output is off the host's by {:.2e} (relative), more than {TOLERANCE:e}", report.worst).into()
        );
    }
    Ok(())
}
