//! `mxhost bench`: time quantize, the three grouped GEMM passes and a full training
//! step of one grouped linear layer through the same host ops a guest uses, on the
//! anchor shapes (and shapes given on the command line). Prints
//! `µs | TFLOP/s | GB/s | % copy | × BF16` per row and writes JSON.
//!
//! × BF16 and % copy are ratios taken side by side: run `bench_peers.py` in the same
//! device call and pass its CSV with `--peers`; × BF16 divides torch `_grouped_mm` BF16's
//! time for the same shape and pass by ours, % copy (quantize rows) is our GB/s over the
//! peer run's `copy_` bandwidth. Without `--peers` both columns are empty. Timings
//! include what a guest pays per call (output allocation, in-call quantization where
//! the row says so). On a GPU each row is timed as bench_peers.py times torch (Triton's
//! `do_bench`): L2 flushed before every call, CUDA events around the call, the median of
//! the repetitions; on the CPU, the mean wall time.

use crate::device::{self, Device, DeviceChoice};
use crate::error::OpResult;
use crate::ops::{self, GemmConfig, GemmOperand};
use crate::plugin::registry::{search_dirs, PluginRegistry};
use crate::plugin::LoadedPlugin;
use crate::tensor::{CpuBuffer, Storage, Tensor};
use anyhow::{bail, Context};
use mxhost_plugin_abi::{BlockLayout, DType, GemmPass, MxFormat, ScaleMode, WeightLayout};
use rand::SeedableRng;
use rand_distr::Distribution;
use std::path::PathBuf;
use std::time::Instant;

#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Anchor shapes to run (a, b, c, d: see shared/anchors/README.md).
    #[arg(long, default_value = "a,b,c,d")]
    pub shapes: String,
    /// Extra shapes as E:M:K:N (experts, rows per expert, K, N). Repeatable.
    #[arg(long = "shape")]
    pub extra: Vec<String>,
    #[arg(long, value_enum, default_value_t = DeviceChoice::Auto)]
    pub device: DeviceChoice,
    #[arg(long, default_value = "mxfp8")]
    pub plugin: String,
    /// Timed repetitions per row (after 2 warm-up calls).
    #[arg(long, default_value_t = 10)]
    pub reps: u32,
    /// Time the mean of back-to-back calls (one synchronisation per row) instead of the
    /// protocol bench_peers.py times torch with (L2 flushed before each call, CUDA events,
    /// median), the default on a GPU.
    #[arg(long)]
    pub back_to_back: bool,
    /// bench_peers.py's CSV from the same device call, for the × BF16 and % copy columns.
    #[arg(long)]
    pub peers: Option<PathBuf>,
    /// Write the rows as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Idle this long before each row (diagnostic): the card's power limiter lets the
    /// first ~0.5 s of work after idle run at up to 1980 MHz and then caps the clock at
    /// ~1450-1700 MHz (docs/perf.md run 74), so rows then read "burst" figures that
    /// bench_peers.py's torch rows do not get. Not for ratios.
    #[arg(long, default_value_t = 0)]
    pub cooldown_ms: u64,
    /// Run each row's call for this long before timing it, so that every row is timed
    /// with the power limiter settled (sustained clocks, as training runs), whatever came
    /// before it. Pair with bench_peers.py `--warmup` of the same length (run 75).
    #[arg(long, default_value_t = 0)]
    pub warmup_ms: u64,
}

#[derive(Debug, Clone, Copy)]
struct Shape {
    key: &'static str,
    e: u64,
    m: u64,
    k: u64,
    n: u64,
}

const ANCHORS: [Shape; 4] = [
    Shape {
        key: "a",
        e: 8,
        m: 4096,
        k: 4096,
        n: 4096,
    },
    Shape {
        key: "b",
        e: 8,
        m: 4096,
        k: 2048,
        n: 8192,
    },
    Shape {
        key: "c",
        e: 32,
        m: 1024,
        k: 2880,
        n: 2880,
    },
    Shape {
        key: "d",
        e: 128,
        m: 256,
        k: 2048,
        n: 768,
    },
];

#[derive(Debug, serde::Serialize)]
struct Row {
    shape: String,
    op: String,
    us: f64,
    tflops: Option<f64>,
    gbps: f64,
    /// Quantize rows: `gbps` as a percentage of the peer run's copy bandwidth.
    pct_copy: Option<f64>,
    x_bf16: Option<f64>,
}

/// What `mxhost bench` takes from bench_peers.py's CSV.
#[derive(Debug, Default, PartialEq)]
struct Peers {
    /// torch `_grouped_mm` BF16 milliseconds per (shape key, pass).
    grouped_mm: Vec<(String, String, f64)>,
    /// The device's `copy_` bandwidth (read + write bytes), GB/s.
    copy_gbps: Option<f64>,
}

impl Peers {
    fn ms(&self, key: &str, pass: &str) -> Option<f64> {
        self.grouped_mm
            .iter()
            .find(|(k, p, _)| k == key && p == pass)
            .map(|(_, _, ms)| *ms)
    }
}

fn random_bf16(device: Device, shape: &[u64], seed: u64) -> OpResult<Tensor> {
    let n: u64 = shape.iter().product();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let normal = rand_distr::StandardNormal;
    let mut buf = CpuBuffer::zeroed(n as usize * 2);
    for c in buf.as_bytes_mut().chunks_exact_mut(2) {
        let v: f32 = normal.sample(&mut rng);
        c.copy_from_slice(&half::bf16::from_f32(v).to_bits().to_le_bytes());
    }
    Tensor::new(shape.to_vec(), DType::Bf16, Storage::Cpu(buf)).to_device(device)
}

/// Bytes overwritten before every timed call on a GPU to evict the L2 cache: Triton's
/// `do_bench` (which bench_peers.py times torch with) zeroes 256 MB the same way.
const L2_FLUSH_BYTES: usize = 256_000_000;

/// How rows are timed ([`BenchArgs::reps`], [`BenchArgs::back_to_back`]).
#[derive(Debug, Clone, Copy)]
struct Timing {
    reps: u32,
    back_to_back: bool,
    cooldown: std::time::Duration,
    warmup: std::time::Duration,
}

/// Seconds per call of `f` after 2 warm-up calls. On a GPU, the protocol bench_peers.py
/// times torch with (Triton's `do_bench`): the L2 cache flushed before each call, each
/// call timed by CUDA events, the median of `reps`. On the CPU (or with `back_to_back`),
/// the mean wall time of `reps` calls in a row.
fn time(
    device: Device,
    timing: Timing,
    mut f: impl FnMut() -> OpResult<()>,
) -> anyhow::Result<f64> {
    let reps = timing.reps;
    std::thread::sleep(timing.cooldown);
    for _ in 0..2 {
        f()?;
    }
    device::synchronize(device)?;
    // Sustained state: one call in flight at a time, so the warm-up lasts what it says.
    let warm = Instant::now();
    while warm.elapsed() < timing.warmup {
        f()?;
        device::synchronize(device)?;
    }
    #[cfg(feature = "cuda")]
    if let (Device::Cuda(_), false) = (device, timing.back_to_back) {
        let dev = crate::cuda::device()?;
        let flush = dev.alloc(L2_FLUSH_BYTES)?;
        let mut times = (0..reps.max(1))
            .map(|_| dev.time_on_stream(Some(&flush), &mut f))
            .collect::<OpResult<Vec<f64>>>()?;
        times.sort_by(f64::total_cmp);
        return Ok(times[times.len() / 2]);
    }
    let start = Instant::now();
    for _ in 0..reps {
        f()?;
    }
    device::synchronize(device)?;
    Ok(start.elapsed().as_secs_f64() / reps.max(1) as f64)
}

fn peer_times(path: &PathBuf) -> anyhow::Result<Peers> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(parse_peers(&text))
}

/// bench_peers.py's CSV (`shape,method,ms,tflops,note`): the `_grouped_mm` BF16 rows and
/// the `copy_ N GiB (read+write bytes)` row (N GiB copied: 2·N GiB moved in `ms`).
fn parse_peers(text: &str) -> Peers {
    let mut out = Peers::default();
    for line in text.lines().skip(1) {
        let fields = split_csv(line);
        let (Some(shape), Some(method), Some(ms)) = (fields.first(), fields.get(1), fields.get(2))
        else {
            continue;
        };
        let Ok(ms) = ms.parse::<f64>() else { continue };
        if let Some(rest) = method.strip_prefix("copy_ ") {
            let gib = rest
                .split_whitespace()
                .next()
                .and_then(|n| n.parse::<f64>().ok());
            if let (Some(gib), true) = (gib, rest.contains("GiB") && ms > 0.0) {
                out.copy_gbps = Some(2.0 * gib * (1u64 << 30) as f64 / (ms / 1e3) / 1e9);
            }
            continue;
        }
        let pass = if method.starts_with("bf16 _grouped_mm fwd+dgrad+wgrad") {
            "step"
        } else if method.starts_with("bf16 _grouped_mm fwd ") {
            "forward"
        } else if method.starts_with("bf16 _grouped_mm dgrad") {
            "dgrad"
        } else if method.starts_with("bf16 _grouped_mm wgrad") {
            "wgrad"
        } else {
            continue;
        };
        let key = shape.split_whitespace().next().unwrap_or("").to_string();
        out.grouped_mm.push((key, pass.to_string(), ms));
    }
    out
}

fn split_csv(line: &str) -> Vec<String> {
    let (mut fields, mut cur, mut quoted) = (Vec::new(), String::new(), false);
    for ch in line.chars() {
        match ch {
            '"' => quoted = !quoted,
            ',' if !quoted => fields.push(std::mem::take(&mut cur)),
            c => cur.push(c),
        }
    }
    fields.push(cur);
    fields
}

fn bench_shape(
    plugin: &LoadedPlugin,
    device: Device,
    s: Shape,
    timing: Timing,
    peers: &Peers,
) -> anyhow::Result<Vec<Row>> {
    use GemmOperand::{Dense, Mx};
    let rows = s.e * s.m;
    let offs: Vec<i32> = (1..=s.e).map(|i| (i * s.m) as i32).collect();
    let x = random_bf16(device, &[rows, s.k], 1)?;
    let w = random_bf16(device, &[s.e, s.n, s.k], 2)?;
    let dy = random_bf16(device, &[rows, s.n], 3)?;
    if !plugin.has(mxhost_plugin_abi::caps::QUANTIZE) {
        return bench_dense(plugin, device, s, timing, peers, &offs, (&x, &w, &dy));
    }
    let q = |t: &Tensor, block: BlockLayout| {
        ops::quantize(plugin, t, MxFormat::E4m3, ScaleMode::Rceil, block)
    };
    let cfg = GemmConfig {
        weight_blocks_2d: true,
        out_dtype: DType::Bf16,
        ..GemmConfig::default()
    };
    let qwt = |w: &Tensor| {
        ops::quantize_with_transpose(
            plugin,
            w,
            MxFormat::E4m3,
            ScaleMode::Rceil,
            BlockLayout::tile(),
        )
    };
    // The weight in both layouts from one pass: [E, N, K] for forward, [E, K, N] for dgrad.
    let ((qx, (qw, qw_t)), qdy) = (
        (q(&x, BlockLayout::vector(1))?, qwt(&w)?),
        q(&dy, BlockLayout::vector(1))?,
    );
    let cfg_kn = GemmConfig {
        weight_layout: WeightLayout::Kn,
        ..cfg
    };
    let flops = 2.0 * (rows * s.n * s.k) as f64;
    let label = format!("{} E{} M{} K{} N{}", s.key, s.e, s.m, s.k, s.n);
    let ratio = |pass: &str, secs: f64| peers.ms(s.key, pass).map(|ms| ms / 1e3 / secs);
    let mut out = Vec::new();
    let mut push = |op: &str, pass: &str, secs: f64, gemm_flops: Option<f64>, bytes: f64| {
        out.push(Row {
            shape: label.clone(),
            op: op.to_string(),
            us: secs * 1e6,
            tflops: gemm_flops.map(|f| f / secs / 1e12),
            gbps: bytes / secs / 1e9,
            // byte-moving rows (no FLOP count): quantize
            pct_copy: match (gemm_flops, peers.copy_gbps) {
                (None, Some(c)) if bytes > 0.0 => Some(100.0 * bytes / secs / 1e9 / c),
                _ => None,
            },
            x_bf16: ratio(pass, secs),
        });
    };
    let xb = (rows * s.k) as f64;
    let t = time(device, timing, || q(&x, BlockLayout::vector(1)).map(drop))?;
    push(
        "quantize X 1x32 (bf16→e4m3)",
        "-",
        t,
        None,
        xb * 2.0 + xb + xb / 32.0,
    );
    let wb = (s.e * s.n * s.k) as f64;
    let t = time(device, timing, || qwt(&w).map(drop))?;
    push(
        "quantize W 32x32 + transposed copy (bf16→e4m3)",
        "-",
        t,
        None,
        wb * 2.0 + 2.0 * (wb + wb / 1024.0),
    );
    let gemm_bytes = |a: u64, b: u64, o: u64| (a + b) as f64 + 2.0 * o as f64;
    let gemm = |pass, a: GemmOperand<'_>, b: GemmOperand<'_>, c: &GemmConfig| {
        ops::grouped_gemm(plugin, pass, a, b, &offs, c).map(drop)
    };
    // One timed GEMM row: label, the peer pass it is compared with, the call, its FLOP
    // and bytes.
    let mut gemm_row = |label: &str,
                        pass: &str,
                        f: &mut dyn FnMut() -> OpResult<()>,
                        (fl, bytes): (f64, f64)|
     -> anyhow::Result<()> {
        let t = time(device, timing, f)?;
        push(label, pass, t, Some(fl), bytes);
        Ok(())
    };
    gemm_row(
        "forward X 1x32 · W 32x32 (pre-quantized)",
        "forward",
        &mut || gemm(GemmPass::Forward, Mx(&qx), Mx(&qw), &cfg),
        (flops, gemm_bytes(rows * s.k, s.e * s.n * s.k, rows * s.n)),
    )?;
    gemm_row(
        "dgrad dY 1x32 · W 32x32 [E,N,K] (re-laid out in the call)",
        "dgrad",
        &mut || gemm(GemmPass::Dgrad, Mx(&qdy), Mx(&qw), &cfg),
        (flops, gemm_bytes(rows * s.n, s.e * s.n * s.k, rows * s.k)),
    )?;
    gemm_row(
        "dgrad dY 1x32 · W 32x32 [E,K,N] (transposed copy)",
        "dgrad",
        &mut || gemm(GemmPass::Dgrad, Mx(&qdy), Mx(&qw_t), &cfg_kn),
        (flops, gemm_bytes(rows * s.n, s.e * s.n * s.k, rows * s.k)),
    )?;
    gemm_row(
        "wgrad dY·X 1x32 on M (quantized in the call)",
        "wgrad",
        &mut || gemm(GemmPass::Wgrad, Dense(&dy), Dense(&x), &cfg),
        (flops, gemm_bytes(rows * s.n, rows * s.k, s.e * s.n * s.k)),
    )?;
    // wgrad with X in 32×32 tiles (one copy serves forward and wgrad) and dY 1×32 along M,
    // both pre-quantized.
    let (qdy_m, qx_tile) = (q(&dy, BlockLayout::vector(0))?, q(&x, BlockLayout::tile())?);
    // The FP8 kernel (MXHOST_MX_WGRAD=fp8) does not take 32×32 X: say so, go on.
    if let Err(e) = gemm_row(
        "wgrad dY 1x32 on M · X 32x32 (pre-quantized)",
        "wgrad",
        &mut || gemm(GemmPass::Wgrad, Mx(&qdy_m), Mx(&qx_tile), &cfg),
        (flops, gemm_bytes(rows * s.n, rows * s.k, s.e * s.n * s.k)),
    ) {
        eprintln!("mxhost bench: wgrad with X 32x32 skipped: {e:#}");
    }
    drop((qdy_m, qx_tile));
    // One training step of a grouped linear with the default recipe, as a guest would
    // write it: X and dY quantized 1×32 along K/N, the weight once in 32×32 tiles with
    // its transposed copy, then forward, dgrad (transposed copy, layout kn) and wgrad
    // from the dense bf16 X and dY (quantized 1×32 along M inside the call).
    let step = || -> OpResult<()> {
        let qx = q(&x, BlockLayout::vector(1))?;
        let (qw, qw_t) = qwt(&w)?;
        let qdy = q(&dy, BlockLayout::vector(1))?;
        for (pass, a, b, c) in [
            (GemmPass::Forward, Mx(&qx), Mx(&qw), &cfg),
            (GemmPass::Dgrad, Mx(&qdy), Mx(&qw_t), &cfg_kn),
            (GemmPass::Wgrad, Dense(&dy), Dense(&x), &cfg),
        ] {
            gemm(pass, a, b, c)?;
        }
        Ok(())
    };
    gemm_row(
        "training step: 3 GEMMs + all quantization (bf16 in)",
        "step",
        &mut { step },
        (3.0 * flops, 0.0),
    )?;
    // Rows added in runs 53–54 come after the default step: rows measured later in a
    // shape's sequence read slower (docs/perf.md run 54), so new rows go last and leave the
    // positions of the rows earlier runs compare unchanged.
    // The same forward with X passed dense (quantized inside the call), as guest-sdk's
    // GroupedLinear passes its activations.
    gemm_row(
        "forward X bf16 (quantized in the call) · W 32x32",
        "forward",
        &mut || gemm(GemmPass::Forward, Dense(&x), Mx(&qw), &cfg),
        (
            flops,
            gemm_bytes(2 * rows * s.k, s.e * s.n * s.k, rows * s.n),
        ),
    )?;
    let qx_tile = q(&x, BlockLayout::tile())?;
    gemm_row(
        "forward X 32x32 · W 32x32 (pre-quantized)",
        "forward",
        &mut || gemm(GemmPass::Forward, Mx(&qx_tile), Mx(&qw), &cfg),
        (flops, gemm_bytes(rows * s.k, s.e * s.n * s.k, rows * s.n)),
    )?;
    drop(qx_tile);
    // The same step with X and dY in 32×32 tiles: one quantized copy per tensor serves both
    // GEMMs that read it (forward + wgrad, dgrad + wgrad); coarser scales, less work.
    let step_tiles = || -> OpResult<()> {
        let qx = q(&x, BlockLayout::tile())?;
        let (qw, qw_t) = qwt(&w)?;
        let qdy = q(&dy, BlockLayout::tile())?;
        for (pass, a, b, c) in [
            (GemmPass::Forward, &qx, &qw, &cfg),
            (GemmPass::Dgrad, &qdy, &qw_t, &cfg_kn),
            (GemmPass::Wgrad, &qdy, &qx, &cfg),
        ] {
            gemm(pass, Mx(a), Mx(b), c)?;
        }
        Ok(())
    };
    // wgrad on the FP8 kernel (MXHOST_MX_WGRAD=fp8) takes 1×32 along M only.
    if let Err(e) = gemm_row(
        "training step, X and dY in 32x32 tiles (one copy each)",
        "step",
        &mut { step_tiles },
        (3.0 * flops, 0.0),
    ) {
        eprintln!("mxhost bench: step with 32x32 activations skipped: {e:#}");
    }
    if plugin.abi_minor >= 2 {
        let xwd = (&x, &w, &dy);
        bench_kept_values(plugin, (device, timing), s, xwd, &cfg, &mut push)?;
    }
    Ok(out)
}

/// `push` of [`bench_shape`]: label, peer pass, seconds, FLOP, bytes.
type PushRow<'a> = dyn FnMut(&str, &str, f64, Option<f64>, f64) + 'a;

/// Rows with the quantizers keeping the exact MX values in bf16 beside the bytes (ABI
/// 1.2, `ops::QuantizeExtras::keep_values`): the quantize passes that write them, the
/// GEMMs that then run on the BF16 tensor cores without an expansion pass, and the two
/// training steps built on them. Measured after every other row of the shape (see the
/// note on positions above).
#[allow(clippy::too_many_arguments)]
fn bench_kept_values(
    plugin: &LoadedPlugin,
    (device, timing): (Device, Timing),
    s: Shape,
    (x, w, dy): (&Tensor, &Tensor, &Tensor),
    cfg: &GemmConfig,
    push: &mut PushRow<'_>,
) -> anyhow::Result<()> {
    use GemmOperand::{Dense, Mx};
    let rows = s.e * s.m;
    let offs: Vec<i32> = (1..=s.e).map(|i| (i * s.m) as i32).collect();
    let keep = ops::QuantizeExtras {
        transposed: false,
        keep_values: true,
    };
    let qv = |t: &Tensor, block: BlockLayout| {
        ops::quantize_with(plugin, t, MxFormat::E4m3, ScaleMode::Rceil, block, keep).map(|r| r.0)
    };
    // The weight needs no transposed copy here: dgrad reads its values ([E, N, K]) as
    // cuBLAS's transposed operand.
    let qwv = |w: &Tensor| qv(w, BlockLayout::tile());
    let gemm = |pass, a: GemmOperand<'_>, b: GemmOperand<'_>, c: &GemmConfig| {
        ops::grouped_gemm(plugin, pass, a, b, &offs, c).map(drop)
    };
    let (xb, wb) = ((rows * s.k) as f64, (s.e * s.n * s.k) as f64);
    let t = time(device, timing, || qv(x, BlockLayout::vector(1)).map(drop))?;
    push(
        "quantize X 1x32, values kept (bf16→e4m3 + bf16)",
        "-",
        t,
        None,
        xb * 2.0 + xb + xb / 32.0 + 2.0 * xb,
    );
    let t = time(device, timing, || qwv(w).map(drop))?;
    push(
        "quantize W 32x32, values kept (no transposed copy)",
        "-",
        t,
        None,
        wb * 2.0 + wb + wb / 1024.0 + 2.0 * wb,
    );
    let flops = 2.0 * (rows * s.n * s.k) as f64;
    let gemm_bytes = |a: u64, b: u64, o: u64| 2.0 * (a + b) as f64 + 2.0 * o as f64;
    let mut gemm_row = |label: &str,
                        pass: &str,
                        f: &mut dyn FnMut() -> OpResult<()>,
                        (fl, bytes): (f64, f64)|
     -> anyhow::Result<()> {
        let t = time(device, timing, f)?;
        push(label, pass, t, Some(fl), bytes);
        Ok(())
    };
    let (qx, qw, qdy) = (
        qv(x, BlockLayout::vector(1))?,
        qwv(w)?,
        qv(dy, BlockLayout::vector(1))?,
    );
    gemm_row(
        "forward X 1x32 · W 32x32, values kept (pre-quantized)",
        "forward",
        &mut || gemm(GemmPass::Forward, Mx(&qx), Mx(&qw), cfg),
        (flops, gemm_bytes(rows * s.k, s.e * s.n * s.k, rows * s.n)),
    )?;
    gemm_row(
        "dgrad dY 1x32 · W 32x32 [E,N,K], values kept (pre-quantized)",
        "dgrad",
        &mut || gemm(GemmPass::Dgrad, Mx(&qdy), Mx(&qw), cfg),
        (flops, gemm_bytes(rows * s.n, s.e * s.n * s.k, rows * s.k)),
    )?;
    drop((qx, qw, qdy));
    // The default recipe's step as the quantizers keep values: forward and dgrad on
    // cuBLAS from the kept values, wgrad from dense X and dY (1×32 along M in the call).
    let step = || -> OpResult<()> {
        let qx = qv(x, BlockLayout::vector(1))?;
        let qw = qwv(w)?;
        let qdy = qv(dy, BlockLayout::vector(1))?;
        gemm(GemmPass::Forward, Mx(&qx), Mx(&qw), cfg)?;
        gemm(GemmPass::Dgrad, Mx(&qdy), Mx(&qw), cfg)?;
        gemm(GemmPass::Wgrad, Dense(dy), Dense(x), cfg)
    };
    gemm_row(
        "training step, values kept (default recipe)",
        "step",
        &mut { step },
        (3.0 * flops, 0.0),
    )?;
    // X and dY in 32×32 tiles with values kept: each tensor's values serve both GEMMs
    // that read it, wgrad included.
    let step_tiles = || -> OpResult<()> {
        let qx = qv(x, BlockLayout::tile())?;
        let qw = qwv(w)?;
        let qdy = qv(dy, BlockLayout::tile())?;
        gemm(GemmPass::Forward, Mx(&qx), Mx(&qw), cfg)?;
        gemm(GemmPass::Dgrad, Mx(&qdy), Mx(&qw), cfg)?;
        gemm(GemmPass::Wgrad, Mx(&qdy), Mx(&qx), cfg)
    };
    gemm_row(
        "training step, X and dY in 32x32 tiles, values kept",
        "step",
        &mut { step_tiles },
        (3.0 * flops, 0.0),
    )?;
    // Rows added in run 73 (after the steps, which keep run 71's positions).
    // wgrad from kept values (1×32 along M, X also in 32×32 tiles): cuBLAS alone. The
    // quantizations along M are not timed here (the in-call row above times its own).
    let (kdy_m, kx_m, kx_tile) = (
        qv(dy, BlockLayout::vector(0))?,
        qv(x, BlockLayout::vector(0))?,
        qv(x, BlockLayout::tile())?,
    );
    let wgrad_bytes = gemm_bytes(rows * s.n, rows * s.k, s.e * s.n * s.k);
    // (The FP8 kernel, MXHOST_MX_WGRAD=fp8, does not take 32×32 X: say so, go on.)
    for (label, xq) in [
        (
            "wgrad dY 1x32 on M · X 1x32 on M, values kept (pre-quantized)",
            &kx_m,
        ),
        (
            "wgrad dY 1x32 on M · X 32x32, values kept (pre-quantized)",
            &kx_tile,
        ),
    ] {
        let mut f = || gemm(GemmPass::Wgrad, Mx(&kdy_m), Mx(xq), cfg);
        if let Err(e) = gemm_row(label, "wgrad", &mut f, (flops, wgrad_bytes)) {
            eprintln!("mxhost bench: {label} skipped: {e:#}");
        }
    }
    drop((kdy_m, kx_m, kx_tile));
    // As guest-sdk's GroupedLinear runs a step on a GPU: only the weight quantized here
    // (values kept, once), X and dY dense and quantized in each call.
    let qw = qwv(w)?;
    gemm_row(
        "forward X bf16 (quantized in the call) · W 32x32, W's values kept",
        "forward",
        &mut || gemm(GemmPass::Forward, Dense(x), Mx(&qw), cfg),
        (flops, gemm_bytes(rows * s.k, s.e * s.n * s.k, rows * s.n)),
    )?;
    drop(qw);
    // The same step with keep_values(false): every operand dense, quantized in each call
    // (measured first: a later row reads slower, so this order favours it).
    // (`cfg` quantizes dense weights in 32×32 tiles.)
    let step_dense = || -> OpResult<()> {
        gemm(GemmPass::Forward, Dense(x), Dense(w), cfg)?;
        gemm(GemmPass::Wgrad, Dense(dy), Dense(x), cfg)?;
        gemm(GemmPass::Dgrad, Dense(dy), Dense(w), cfg)
    };
    gemm_row(
        "training step as GroupedLinear, all operands quantized in the calls",
        "step",
        &mut { step_dense },
        (3.0 * flops, 0.0),
    )?;
    let step_linear = || -> OpResult<()> {
        let qw = qwv(w)?;
        gemm(GemmPass::Forward, Dense(x), Mx(&qw), cfg)?;
        gemm(GemmPass::Wgrad, Dense(dy), Dense(x), cfg)?;
        gemm(GemmPass::Dgrad, Dense(dy), Mx(&qw), cfg)
    };
    gemm_row(
        "training step as GroupedLinear (W's values kept, X and dY in the call)",
        "step",
        &mut { step_linear },
        (3.0 * flops, 0.0),
    )
}

/// The rows for a plugin that does not quantize (the bf16 baseline): the three passes
/// and a step on the dense bf16 operands, so its × BF16 column compares it with torch.
fn bench_dense(
    plugin: &LoadedPlugin,
    device: Device,
    s: Shape,
    timing: Timing,
    peers: &Peers,
    offs: &[i32],
    (x, w, dy): (&Tensor, &Tensor, &Tensor),
) -> anyhow::Result<Vec<Row>> {
    let rows = s.e * s.m;
    let flops = 2.0 * (rows * s.n * s.k) as f64;
    let label = format!("{} E{} M{} K{} N{}", s.key, s.e, s.m, s.k, s.n);
    let cfg = GemmConfig {
        out_dtype: DType::Bf16,
        ..GemmConfig::default()
    };
    let passes = [
        (GemmPass::Forward, x, w, "forward"),
        (GemmPass::Dgrad, dy, w, "dgrad"),
        (GemmPass::Wgrad, dy, x, "wgrad"),
    ];
    let gemm = |(pass, a, b, _): (GemmPass, &Tensor, &Tensor, &str)| {
        ops::grouped_gemm(
            plugin,
            pass,
            GemmOperand::Dense(a),
            GemmOperand::Dense(b),
            offs,
            &cfg,
        )
        .map(drop)
    };
    let mut out = Vec::new();
    let mut push = |op: String, pass: &str, secs: f64, f: f64| {
        let ratio = peers.ms(s.key, pass).map(|ms| ms / 1e3 / secs);
        out.push(Row {
            shape: label.clone(),
            op,
            us: secs * 1e6,
            tflops: Some(f / secs / 1e12),
            gbps: 0.0,
            pct_copy: None,
            x_bf16: ratio,
        });
    };
    for p in passes {
        let t = time(device, timing, || gemm(p))?;
        push(
            format!("{} dense bf16 ({})", p.3, plugin.name),
            p.3,
            t,
            flops,
        );
    }
    let t = time(device, timing, || passes.iter().try_for_each(|&p| gemm(p)))?;
    push(
        format!("training step: 3 dense GEMMs ({})", plugin.name),
        "step",
        t,
        3.0 * flops,
    );
    Ok(out)
}

fn parse_shape(spec: &str) -> anyhow::Result<Shape> {
    let v: Vec<u64> = spec
        .split(':')
        .map(|p| p.parse())
        .collect::<Result<_, _>>()
        .with_context(|| format!("--shape {spec}: expected E:M:K:N"))?;
    match v.as_slice() {
        [e, m, k, n] if *e > 0 && *m > 0 && *k > 0 && *n > 0 => Ok(Shape {
            key: "custom",
            e: *e,
            m: *m,
            k: *k,
            n: *n,
        }),
        _ => bail!("--shape {spec}: expected four positive numbers E:M:K:N"),
    }
}

pub fn main(args: BenchArgs) -> anyhow::Result<i32> {
    let device = device::resolve(args.device)?;
    device::set_current(device);
    let registry = PluginRegistry::open(&search_dirs(), &args.plugin)?;
    let plugin = registry.active();
    let peers = match &args.peers {
        Some(p) => peer_times(p)?,
        None => Peers::default(),
    };
    let mut shapes: Vec<Shape> = Vec::new();
    for key in args
        .shapes
        .split(',')
        .map(str::trim)
        .filter(|k| !k.is_empty())
    {
        shapes.push(
            *ANCHORS
                .iter()
                .find(|s| s.key == key)
                .with_context(|| format!("unknown anchor shape `{key}` (a, b, c, d)"))?,
        );
    }
    for spec in &args.extra {
        shapes.push(parse_shape(spec)?);
    }
    eprintln!(
        "mxhost bench: plugin `{}` on {device}, {} reps per row ({})",
        plugin.name,
        args.reps,
        if args.back_to_back || device == Device::Cpu {
            "mean of back-to-back calls"
        } else {
            "median, L2 flushed before each call, as bench_peers.py"
        }
    );
    println!(
        "{:<26} {:<50} {:>10} {:>9} {:>8} {:>7} {:>7}",
        "shape", "op", "µs", "TFLOP/s", "GB/s", "% copy", "× BF16"
    );
    let timing = Timing {
        reps: args.reps,
        back_to_back: args.back_to_back,
        cooldown: std::time::Duration::from_millis(args.cooldown_ms),
        warmup: std::time::Duration::from_millis(args.warmup_ms),
    };
    let mut all = Vec::new();
    for s in shapes {
        for r in bench_shape(&plugin, device, s, timing, &peers)? {
            let fmt = |v: Option<f64>, p: usize| v.map_or("-".to_string(), |v| format!("{v:.p$}"));
            println!(
                "{:<26} {:<50} {:>10.1} {:>9} {:>8.0} {:>7} {:>7}",
                r.shape,
                r.op,
                r.us,
                fmt(r.tflops, 0),
                r.gbps,
                fmt(r.pct_copy, 0),
                fmt(r.x_bf16, 2)
            );
            all.push(r);
        }
    }
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&all)?)
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("mxhost bench: wrote {}", path.display());
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_csv_gives_grouped_mm_times_and_copy_bandwidth() {
        // as bench_peers.py writes it: fields with commas quoted
        let csv = "shape,method,ms,tflops,note\n\
device,copy_ 2 GiB (read+write bytes),1.0106879472732544,nan,4.25 TB/s\n\
device,dense bf16 matmul 8192^3 (random),1.56,701.3,\n\
a E8 M4096 K4096 N4096,\"bf16 _grouped_mm fwd  (M,K)x(E,K,N)\",1.646,668.1,\n\
a E8 M4096 K4096 N4096,\"bf16 _grouped_mm wgrad 2d-2d -> (E,N,K)\",1.646,668.0,\n\
a E8 M4096 K4096 N4096,bf16 _grouped_mm fwd+dgrad+wgrad (3 GEMMs),5.100,646.8,\n\
b E8 M4096 K2048 N8192,\"bf16 _grouped_mm dgrad (M,N)x(E,N,K)\",1.638,671.3,\n\
b E8 M4096 K2048 N8192,fp8 rowwise _scaled_grouped_mm fwd,1.197,918.9,\n";
        let p = parse_peers(csv);
        let copy = p.copy_gbps.expect("copy row");
        // 4 GiB moved in 1.0107 ms
        assert!((copy - 4249.6).abs() < 1.0, "{copy}");
        assert_eq!(p.ms("a", "forward"), Some(1.646));
        assert_eq!(p.ms("a", "wgrad"), Some(1.646));
        assert_eq!(p.ms("a", "step"), Some(5.1));
        assert_eq!(p.ms("b", "dgrad"), Some(1.638));
        assert_eq!(
            p.ms("b", "forward"),
            None,
            "fp8 rows are not the BF16 baseline"
        );
        assert_eq!(p.grouped_mm.len(), 4);
        // no copy row, no bandwidth
        assert_eq!(parse_peers("shape,method,ms\n").copy_gbps, None);
    }
}
