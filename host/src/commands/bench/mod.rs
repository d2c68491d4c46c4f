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

mod dense;
mod kept_values;
mod peers;
mod rows;
mod step_trace;
mod timing;

use crate::device::{self, Device, DeviceChoice};
use crate::plugin::registry::{search_dirs, PluginRegistry};
use anyhow::{bail, Context};
use peers::{peer_times, Peers};
use rows::bench_shape;
use std::path::PathBuf;
use timing::Timing;

/// How long a GPU row runs before it is timed when `--warmup-ms` is not given. An H100's
/// power limiter (700 W) lets a burst of work after idle run at up to 1980 MHz for ~0.8–1 s,
/// then clamps the SM clock to 1365–1485 MHz for a few hundred ms before it settles at
/// 1500–1800 MHz: with 300 ms a shape's third row was timed inside that clamp and read
/// 10–18 % slow while its kernels were as fast as the rows before it (docs/perf.md runs
/// 159–161). 1500 ms times every row past it.
pub const GPU_SETTLE_MS: u64 = 1500;

/// How long each row runs before it is timed: `--warmup-ms` when given, else
/// [`GPU_SETTLE_MS`] on a GPU and nothing on the CPU (no power limiter to wait for).
fn settle_ms(warmup_ms: Option<u64>, device: Device) -> u64 {
    warmup_ms.unwrap_or(match device {
        Device::Cpu => 0,
        Device::Cuda(_) => GPU_SETTLE_MS,
    })
}

#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Anchor shapes to run (a, b, c, d: see shared/anchors/README.md).
    #[arg(long, default_value = "a,b,c,d")]
    pub shapes: String,
    /// Extra shapes as E:M:K:N (experts, rows per expert, K, N). Repeatable.
    #[arg(long = "shape")]
    pub extra: Vec<String>,
    /// Where the plugin's kernels run.
    #[arg(long, value_enum, default_value_t = DeviceChoice::Auto)]
    pub device: DeviceChoice,
    /// The plugin to time, by name (`mxhost plugins` lists them).
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
    /// before it. Pair with bench_peers.py `--warmup` of the same length. Default: 1500
    /// on a GPU (past the power limiter's clamp; docs/gpu.md), 0 on the CPU.
    #[arg(long)]
    pub warmup_ms: Option<u64>,
    /// Time only the rows whose label contains one of these comma-separated words
    /// (case-insensitive), e.g. `--only "quantize,step:"` for the quantizers and the
    /// training steps: a shorter device call when a change touches only those. Commas
    /// inside square brackets belong to the word, so a label's `[E,K,N]` can be given.
    #[arg(long)]
    pub only: Vec<String>,
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
    let settle_ms = settle_ms(args.warmup_ms, device);
    eprintln!(
        "mxhost bench: plugin `{}` on {device}, {} reps per row ({}), each row run {settle_ms} ms before it is timed",
        plugin.name,
        args.reps,
        if args.back_to_back || device == Device::Cpu {
            "mean of back-to-back calls"
        } else {
            "median, L2 flushed before each call, as bench_peers.py"
        }
    );
    if let Some(chain) = std::env::var("MXHOST_MX_CHAIN")
        .ok()
        .filter(|v| !matches!(v.trim(), "" | "off" | "0" | "auto"))
    {
        // The plugin then fills annexes (ABI 1.3) in every quantize call, plain ones too:
        // their GB/s count only the MX tensor's bytes. (Under the default `auto` only the
        // GEMM rows' operands, quantized for a GEMM, get them.)
        eprintln!(
            "mxhost bench: MXHOST_MX_CHAIN={chain}: quantize rows also write the plugin's chain-form annexes (not counted in GB/s); GEMMs on pre-quantized operands read them"
        );
    }
    println!(
        "{:<26} {:<50} {:>10} {:>9} {:>8} {:>7} {:>7}",
        "shape", "op", "µs", "TFLOP/s", "GB/s", "% copy", "× BF16"
    );
    let timing = Timing {
        reps: args.reps,
        back_to_back: args.back_to_back,
        cooldown: std::time::Duration::from_millis(args.cooldown_ms),
        warmup: std::time::Duration::from_millis(settle_ms),
        // Lives for the whole command (Timing stays Copy for the row helpers).
        only: Vec::leak(timing::only_words(&args.only)),
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
    let unmatched: Vec<String> = all
        .iter()
        .filter(|r| r.tflops.is_some() && r.x_bf16.is_none())
        .map(|r| r.shape.split_whitespace().next().unwrap_or("").to_string())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    if args.peers.is_some() && !unmatched.is_empty() {
        eprintln!(
            "mxhost bench: no torch baseline in the peers CSV for some GEMM rows of shape {} (bench_peers.py skips passes when its --budget-s runs out): their × BF16 reads -",
            unmatched.join(", ")
        );
    }
    if all.is_empty() && !timing.only.is_empty() {
        eprintln!(
            "mxhost bench: no row matched --only {} (rows are named as in docs/perf.md, e.g. \"quantize X 1x32\", \"training step\")",
            args.only.join(",")
        );
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

    /// A GPU row settles past the power limiter's clamp unless told otherwise; the CPU
    /// has nothing to wait for; an explicit `--warmup-ms` wins on both.
    #[test]
    fn rows_settle_on_a_gpu_only_unless_told() {
        assert_eq!(settle_ms(None, Device::Cuda(0)), GPU_SETTLE_MS);
        assert_eq!(settle_ms(None, Device::Cpu), 0);
        assert_eq!(settle_ms(Some(300), Device::Cuda(0)), 300);
        assert_eq!(settle_ms(Some(0), Device::Cuda(1)), 0);
        assert_eq!(settle_ms(Some(20), Device::Cpu), 20);
    }
}
