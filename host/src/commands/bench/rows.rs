//! One shape's rows (`bench_shape`): the random inputs, then on an MX plugin quantize, the
//! three GEMM passes and training steps; `dense` and `kept_values` add the other rows.

use super::dense::bench_dense;
use super::kept_values::{bench_kept_values, quantize_kept};
use super::peers::Peers;
use super::step_trace::StepTrace;
use super::timing::{push_gemm_row, push_timed_row, Timing};
use super::{Row, Shape};
use crate::device::Device;
use crate::error::OpResult;
use crate::ops::{self, GemmConfig, GemmOperand};
use crate::plugin::LoadedPlugin;
use crate::tensor::{CpuBuffer, MxTensor, Storage, Tensor};
use mxhost_plugin_abi::{caps, BlockLayout, DType, GemmPass, MxFormat, ScaleMode, WeightLayout};
use rand::SeedableRng;
use rand_distr::Distribution;

fn random_bf16(device: Device, shape: &[u64], seed: u64) -> OpResult<Tensor> {
    random_bf16_channels(device, shape, seed, &[])
}

/// N(0, 1) values times `chan[i % chan.len()]` along the last axis (no factor when empty).
fn random_bf16_channels(
    device: Device,
    shape: &[u64],
    seed: u64,
    chan: &[f32],
) -> OpResult<Tensor> {
    let n: u64 = shape.iter().product();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let normal = rand_distr::StandardNormal;
    let mut buf = CpuBuffer::zeroed(n as usize * 2);
    for (i, c) in buf.as_bytes_mut().chunks_exact_mut(2).enumerate() {
        let v: f32 = normal.sample(&mut rng);
        let v = if chan.is_empty() {
            v
        } else {
            v * chan[i % chan.len()]
        };
        c.copy_from_slice(&half::bf16::from_f32(v).to_bits().to_le_bytes());
    }
    Tensor::new(shape.to_vec(), DType::Bf16, Storage::Cpu(buf)).to_device(device)
}

/// Channel magnitudes with 1 % outlier channels at 30× (every 100th channel, from channel
/// 7), the structure of LLM hidden states that the anchors' i.i.d. data lacks.
fn outlier_channels(k: u64) -> Vec<f32> {
    (0..k)
        .map(|i| if i % 100 == 7 { 30.0 } else { 1.0 })
        .collect()
}

pub(super) fn bench_shape(
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
    // The GEMM rows' operands are quantized as a guest quantizes them for forward and dgrad
    // (guest-sdk's GroupedLinear): `for_gemm` where the plugin reports a chained GEMM, so
    // mxfp8 on a Hopper GPU writes the chained GEMM's forms by default (`MXHOST_MX_CHAIN`
    // unset). The quantize rows time the plain calls (`gemm` false).
    let for_gemm = plugin.has(caps::CHAINED_GEMM);
    // (the weight in 32×32 tiles with its transposed copy, from one pass)
    let qwt = |w: &Tensor, gemm: bool| -> OpResult<(MxTensor, MxTensor)> {
        let extras = ops::QuantizeExtras {
            transposed: true,
            keep_values: false,
            for_gemm: gemm && for_gemm,
        };
        let (f, m, b) = (MxFormat::E4m3, ScaleMode::Rceil, BlockLayout::tile());
        let (q, t) = ops::quantize_with(plugin, w, f, m, b, extras)?;
        Ok((q, t.expect("requested")))
    };
    let fmb = (MxFormat::E4m3, ScaleMode::Rceil, BlockLayout::vector(1));
    // (X or dY along rows: with its wgrad values, with its own values kept, or for a GEMM
    // where the plugin chains: `gemm`, a GEMM row's operand, not a quantize row's)
    // (`weight`: the GEMM partner named for the quantize call, ABI 1.9)
    let qvw = |t: &Tensor, with_values: bool, keep: bool, gemm: bool, weight: Option<&MxTensor>| {
        let extras = ops::QuantizeExtras {
            transposed: false,
            keep_values: keep,
            for_gemm: gemm && for_gemm && !keep,
        };
        if with_values {
            let (q, _, v) = ops::quantize_with_wgrad_values(plugin, t, fmb, extras, &offs, weight)?;
            Ok((q, Some(v)))
        } else {
            let (f, m, b) = fmb;
            Ok((ops::quantize_with(plugin, t, f, m, b, extras)?.0, None))
        }
    };
    let qv = |t: &Tensor, with_values: bool, keep: bool, gemm: bool| {
        qvw(t, with_values, keep, gemm, None)
    };
    // The weight in both layouts from one pass: [E, N, K] for forward, [E, K, N] for dgrad.
    let ((qx, (qw, qw_t)), qdy) = (
        (qv(&x, false, false, true)?.0, qwt(&w, true)?),
        qv(&dy, false, false, true)?.0,
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
    push_timed_row(
        (device, timing),
        &mut push,
        ("quantize X 1x32 (bf16→e4m3)", "-"),
        &mut || q(&x, BlockLayout::vector(1)).map(drop),
        (None, xb * 2.0 + xb + xb / 32.0),
    )?;
    let wb = (s.e * s.n * s.k) as f64;
    push_timed_row(
        (device, timing),
        &mut push,
        ("quantize W 32x32 + transposed copy (bf16→e4m3)", "-"),
        &mut || qwt(&w, false).map(drop),
        (None, wb * 2.0 + 2.0 * (wb + wb / 1024.0)),
    )?;
    let gemm_bytes = |a: u64, b: u64, o: u64| (a + b) as f64 + 2.0 * o as f64;
    let gemm = |pass, a: GemmOperand<'_>, b: GemmOperand<'_>, c: &GemmConfig| {
        ops::grouped_gemm(plugin, pass, a, b, &offs, c).map(drop)
    };
    // One timed GEMM row: label, the peer pass it is compared with, the call, its FLOP
    // and bytes.
    let mut gemm_row = |label: &str, pass: &str, f: &mut dyn FnMut() -> OpResult<()>, fb| {
        push_gemm_row((device, timing), &mut push, (label, pass), f, fb)
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
    // Two switches write this row's step another way in this row's place, so that an A/B of
    // the ways compares rows measured at the same point of the sequence (docs/perf.md runs
    // 150, 154): MXHOST_BENCH_STEP_WGRAD_VALUES=1 quantizes X and dY with their wgrad values
    // (ABI 1.5), which wgrad then reads; MXHOST_BENCH_STEP_KEEP_W=1 quantizes the weight with
    // its values kept and no transposed copy (ABI 1.2; dgrad reads it as [E, N, K]);
    // MXHOST_BENCH_STEP_KEEP_X=1 keeps X's and dY's values too. All three together are
    // guest-sdk's GroupedLinear with 32×32 weights on a GPU where no chained GEMM runs (the
    // last row of the shape).
    let env_on = |name: &str| std::env::var(name).as_deref() == Ok("1");
    let recipe_env = StepRecipe {
        wgrad_values: plugin.abi_minor >= 5 && env_on("MXHOST_BENCH_STEP_WGRAD_VALUES"),
        keep_w: plugin.abi_minor >= 2 && env_on("MXHOST_BENCH_STEP_KEEP_W"),
        keep_x: plugin.abi_minor >= 2 && env_on("MXHOST_BENCH_STEP_KEEP_X"),
        name_weight: false,
    };
    let trace = StepTrace::from_env(device, s.key);
    let step_with = |x: &Tensor, recipe: StepRecipe| -> OpResult<()> {
        trace.begin()?;
        // (the weight for forward, and for dgrad with that dgrad's layout)
        let quantize_w = || -> OpResult<_> {
            Ok(if recipe.keep_w {
                (quantize_kept(plugin, &w, BlockLayout::tile())?, None, &cfg)
            } else {
                let (qw, qw_t) = qwt(&w, true)?;
                (qw, Some(qw_t), &cfg_kn)
            })
        };
        // GroupedLinear's order where it names the weight: W, then X and dY each with the
        // weight its GEMM reads (W for forward, the transposed copy for dgrad)
        let named = recipe.name_weight && recipe.wgrad_values && !recipe.keep_w;
        let w_first = if named {
            let w = quantize_w()?;
            trace.mark("quantize W")?;
            Some(w)
        } else {
            None
        };
        let weight = w_first.as_ref().map(|(qw, ..)| qw);
        let (qx, xv) = qvw(x, recipe.wgrad_values, recipe.keep_x, true, weight)?;
        trace.mark("quantize X")?;
        let (qw, qw_dgrad, cfg_dgrad) = match w_first {
            Some(w) => w,
            None => {
                let w = quantize_w()?;
                trace.mark("quantize W")?;
                w
            }
        };
        let weight_t = named.then_some(qw_dgrad.as_ref()).flatten();
        let (qdy, dyv) = qvw(&dy, recipe.wgrad_values, recipe.keep_x, true, weight_t)?;
        trace.mark("quantize dY")?;
        let (dy_w, x_w) = (dyv.as_ref().unwrap_or(&dy), xv.as_ref().unwrap_or(x));
        for (pass, a, b, c) in [
            (GemmPass::Forward, Mx(&qx), Mx(&qw), &cfg),
            (
                GemmPass::Dgrad,
                Mx(&qdy),
                Mx(qw_dgrad.as_ref().unwrap_or(&qw)),
                cfg_dgrad,
            ),
            (GemmPass::Wgrad, Dense(dy_w), Dense(x_w), &cfg),
        ] {
            gemm(pass, a, b, c)?;
            trace.mark(match pass {
                GemmPass::Forward => "forward",
                GemmPass::Dgrad => "dgrad",
                _ => "wgrad",
            })?;
        }
        Ok(())
    };
    let step = |x: &Tensor| step_with(x, recipe_env);
    gemm_row(
        "training step: 3 GEMMs + all quantization (bf16 in)",
        "step",
        &mut || step(&x),
        (3.0 * flops, 0.0),
    )?;
    trace.report("step (bf16 in)")?;
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
        let (qw, qw_t) = qwt(&w, false)?;
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
    // The default step again with X's channels structured (1 % at 30×): the same work for
    // the per-k32 kernels, but X's chain form carries 3–6× the residuals the chained GEMM's
    // gate takes (docs/perf.md, "Residuals on structured activations"), so under
    // MXHOST_MX_CHAIN=on this row shows what the gate's fallback costs. Last, so that the
    // rows before it keep their positions. (Its X is made only when the row is timed.)
    let op = "training step: 3 GEMMs + all quantization, X with 1 % outlier channels at 30x";
    if timing.wants(op) {
        let x_out = random_bf16_channels(device, &[rows, s.k], 4, &outlier_channels(s.k))?;
        push_gemm_row(
            (device, timing),
            &mut push,
            (op, "step"),
            &mut || step(&x_out),
            (3.0 * flops, 0.0),
        )?;
        trace.report("step, X with outlier channels")?;
    }
    // The rows of ABI 1.5's wgrad values, after every other row so that those keep their
    // positions: X quantized with them, wgrad on them, and the default step written with
    // them (X and dY each read once for their two quantizations).
    if plugin.abi_minor >= 5 {
        let xb = (rows * s.k) as f64;
        push_timed_row(
            (device, timing),
            &mut push,
            ("quantize X 1x32 + wgrad values (bf16→e4m3, bf16)", "-"),
            &mut || qv(&x, true, false, false).map(drop),
            (None, xb * 2.0 + xb + xb / 32.0 + xb * 2.0),
        )?;
        let ((_, xv), (_, dyv)) = (qv(&x, true, false, false)?, qv(&dy, true, false, false)?);
        let (xv, dyv) = (xv.expect("requested"), dyv.expect("requested"));
        push_gemm_row(
            (device, timing),
            &mut push,
            ("wgrad dY·X on their wgrad values (bf16)", "wgrad"),
            &mut || gemm(GemmPass::Wgrad, Dense(&dyv), Dense(&xv), &cfg),
            (
                flops,
                gemm_bytes(2 * rows * s.n, 2 * rows * s.k, s.e * s.n * s.k),
            ),
        )?;
        drop((xv, dyv));
        push_gemm_row(
            (device, timing),
            &mut push,
            (
                "training step: 3 GEMMs + all quantization, X and dY with wgrad values",
                "step",
            ),
            &mut || {
                let values = StepRecipe {
                    wgrad_values: true,
                    keep_w: false,
                    keep_x: false,
                    name_weight: false,
                };
                step_with(&x, values)
            },
            (3.0 * flops, 0.0),
        )?;
        trace.report("step, X and dY with wgrad values")?;
        // guest-sdk's GroupedLinear with 32×32 weights on a GPU (keep_values on, the
        // default): the weight quantized once per forward in 32×32 tiles with its values kept,
        // serving forward and dgrad (with its transposed copy instead where the plugin reports
        // a chained GEMM and the GEMM is large enough); X and dY each quantized with their
        // wgrad values.
        let chained =
            plugin.has(caps::CHAINED_GEMM) && rows * s.k * s.n >= GROUPED_LINEAR_CHAINED_MIN_MACS;
        let linear = StepRecipe {
            wgrad_values: true,
            keep_w: !chained,
            keep_x: !chained,
            name_weight: plugin.abi_minor >= 9,
        };
        push_gemm_row(
            (device, timing),
            &mut push,
            (
                "training step as GroupedLinear with 32x32 weights (X and dY with wgrad values)",
                "step",
            ),
            &mut || step_with(&x, linear),
            (3.0 * flops, 0.0),
        )?;
        trace.report("step as GroupedLinear")?;
    }
    Ok(out)
}

/// guest-sdk's `nn::CHAINED_MIN_MACS`: from this many multiply-adds per GEMM `GroupedLinear`
/// gives a chained GEMM the weight's transposed copy instead of its kept values.
const GROUPED_LINEAR_CHAINED_MIN_MACS: u64 = 1 << 35;

/// How the training-step rows quantize their operands (module rows above).
#[derive(Clone, Copy)]
struct StepRecipe {
    /// X and dY quantized with their wgrad values (ABI 1.5), which wgrad reads.
    wgrad_values: bool,
    /// The weight quantized once in 32×32 tiles with its values kept (ABI 1.2), no
    /// transposed copy.
    keep_w: bool,
    /// X and dY quantized with their values kept (ABI 1.2).
    keep_x: bool,
    /// With `wgrad_values` and a transposed weight copy: the weight quantized first and named
    /// at X's and dY's quantize calls (ABI 1.9, `quantize-with-wgrad-values-for`), as
    /// GroupedLinear does.
    name_weight: bool,
}
