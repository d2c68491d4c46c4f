//! `mxhost selftest`: the CUDA backend of the MX plugin against its CPU backend, through
//! the same plugin library and the same host ops a guest uses.
//!
//! - **Quantize**: byte-for-byte equality of data and scales (every layout the ABI has:
//!   1×32 along the last axis, 1×32 along axis rank−2, 32×32 tiles; both formats, all
//!   three scale modes, f32 and bf16 input, NaN/±Inf/subnormal inputs, odd shapes).
//! - **Dequantize**: bit equality (NaN = NaN).
//! - **Grouped GEMM** (forward, dgrad, wgrad): the GPU result against the CPU result on
//!   identical MX inputs: either pre-quantized operands (quantized once, the same bytes
//!   uploaded), or dense operands quantized inside each call (identical MX values because
//!   the quantizers are bit-exact, checked above). Reported: max relative error
//!   (max |gpu − cpu| / max |cpu|) and SNR = 10·log10(Σcpu² / Σ(gpu − cpu)²).
//! - **Wgrad values** (ABI 1.5): X and dY quantized with their wgrad values on both devices,
//!   the MX bytes equal to a plain quantize's, the values bit-identical to the CPU's, and wgrad
//!   on them bit-identical to wgrad on the dense tensors on each device.
//!
//! Tolerance. The CPU backend accumulates dequantized FP32 products in FP32 (> 120 dB
//! against FP64). The GPU computes each k32 block with one FP8 wgmma, whose internal
//! accumulation on Hopper is reduced-precision (~1.5e-4 of the block's largest partial
//! product), then promotes it into FP32 with the block scales; its order of FP32
//! additions differs too. Expected agreement with f32 output is ≥ ~80 dB (the kernels
//! measure ~87 dB against FP64); the gate is **SNR ≥ 75 dB and max rel ≤ 2e-3** for f32
//! output, and SNR ≥ 40 dB / max rel ≤ 2e-2 for bf16 output (one bf16 rounding each
//! side). NaN positions must match exactly.
//!
//! The anchor shapes (`/work/shared/anchors/README.md`) run at full size on the GPU; the
//! CPU reference is computed for a sample of experts (the first and the last; forward and
//! dgrad on up to 256 rows of each, since output rows are independent) so the check
//! stays fast. `--quick` shrinks the anchors (rows per expert ÷ 16, at least 64).
//!
//! Without a GPU it prints a skip message and exits 0; with `MXHOST_REQUIRE_CUDA=1` it

mod compare;
mod gemm;
mod inputs;
mod quantize;
mod wgrad_values;

use crate::device::{self, Device, DeviceChoice};
use crate::plugin::registry::{search_dirs, PluginRegistry};
use crate::plugin::LoadedPlugin;
use compare::Row;
use gemm::GemmCase;
use mxhost_plugin_abi::{BlockLayout, DType, GemmPass, MxFormat, ScaleMode, WeightLayout};
use std::time::Instant;

#[derive(Debug, clap::Args)]
pub struct SelftestArgs {
    /// The device to check against the CPU (only `cuda` has something to check).
    #[arg(long, value_enum, default_value_t = DeviceChoice::Auto)]
    pub device: DeviceChoice,
    /// Shrink the anchor shapes (rows per expert ÷ 16).
    #[arg(long)]
    pub quick: bool,
    /// Anchor shapes to run (subset of a,b,c,d; empty for none).
    #[arg(long, default_value = "a,b,c,d")]
    pub shapes: String,
    /// The MX plugin under test.
    #[arg(long, default_value = "mxfp8")]
    pub plugin: String,
    /// Check the harness itself: run the "GPU" side on the CPU too (no GPU needed).
    #[arg(long, hide = true)]
    pub harness_on_cpu: bool,
}

const ANCHORS: [(&str, usize, usize, usize, usize); 4] = [
    ("a", 8, 4096, 4096, 4096),
    ("b", 8, 4096, 2048, 8192),
    ("c", 32, 1024, 2880, 2880),
    ("d", 128, 256, 2048, 768),
];

struct Ctx {
    plugin: std::sync::Arc<LoadedPlugin>,
    gpu: Device,
    rows: Vec<Row>,
    /// The plugin quantizes (MX plugins); without it (the bf16 plugin) the quantizer
    /// checks, MX-operand GEMMs and MX-only limits are skipped.
    quantizes: bool,
}

pub fn main(args: SelftestArgs) -> anyhow::Result<i32> {
    let require = std::env::var("MXHOST_REQUIRE_CUDA").as_deref() == Ok("1");
    if args.device == DeviceChoice::Cpu {
        println!("selftest checks a GPU backend against the CPU one; with --device cpu there is nothing to check");
        return Ok(if require { 1 } else { 0 });
    }
    let gpu = match device::cuda_device() {
        _ if args.harness_on_cpu => Device::Cpu,
        Ok(d) => d,
        Err(why) => {
            if require {
                eprintln!("mxhost selftest: FAILED: MXHOST_REQUIRE_CUDA=1 but CUDA is not available: {why}");
                return Ok(1);
            }
            println!("mxhost selftest: SKIPPED: CUDA is not available: {why}. Nothing was checked on a GPU (set MXHOST_REQUIRE_CUDA=1 to make this an error).");
            return Ok(0);
        }
    };
    let registry = PluginRegistry::open(&search_dirs(), &args.plugin)?;
    let plugin = registry.active();
    println!(
        "mxhost selftest: plugin `{}` ({}) on {gpu} vs cpu",
        plugin.name,
        plugin.path.display()
    );
    let portable = std::env::var("MXHOST_MX_PORTABLE")
        .ok()
        .filter(|v| !v.trim().is_empty() && v.trim() != "0");
    println!(
        "mxhost selftest: grouped GEMM kernel family: {} (MXHOST_MX_GEMM_KERNEL=tgemm|gemm, default tgemm; launches the TMA kernels cannot take fall back to mx_gemm_*; GPUs other than Hopper, or MXHOST_MX_PORTABLE=1, get the portable build: dequantize-to-BF16 + cuBLAS; MXHOST_MX_GEMM_TRACE=1 logs each launch)",
        match (portable, std::env::var("MXHOST_MX_GEMM_KERNEL").as_deref().map(str::trim)) {
            (Some(v), _) => format!("portable build (MXHOST_MX_PORTABLE={v})"),
            (None, Ok("gemm")) => "mx_gemm_* (cp.async)".to_string(),
            (None, Err(_) | Ok("") | Ok("tgemm")) => "mx_tgemm_* (TMA)".to_string(),
            (None, Ok(other)) => {
                format!("invalid MXHOST_MX_GEMM_KERNEL={other:?} (GEMMs will fail)")
            }
        }
    );
    let quantizes = plugin.has(mxhost_plugin_abi::caps::QUANTIZE);
    if !quantizes {
        println!(
            "mxhost selftest: plugin `{}` does not quantize: checking its dense grouped GEMMs only",
            plugin.name
        );
    }
    let mut ctx = Ctx {
        plugin,
        gpu,
        rows: Vec::new(),
        quantizes,
    };
    let t_all = Instant::now();

    // ---------------- quantize: edge cases ----------------
    let mut seed = 100;
    for dtype in [DType::Bf16, DType::F32] {
        for (format, mode) in [
            (MxFormat::E4m3, ScaleMode::Rceil),
            (MxFormat::E4m3, ScaleMode::Floor),
            (MxFormat::E4m3, ScaleMode::Even),
            (MxFormat::E5m2, ScaleMode::Rceil),
        ] {
            // [4, 64, 96]: whole 32×32 blocks and C % 32 == 0 (the flat 1×32 and
            // warp-per-block 32×32 kernels, batched); the others take the tiled kernel.
            for shape in [
                vec![977u64, 2880],
                vec![300, 200],
                vec![3, 96, 136],
                vec![4, 64, 96],
            ] {
                let rank = shape.len();
                for block in [
                    BlockLayout::vector(rank as u32 - 1),
                    BlockLayout::vector(rank as u32 - 2),
                    BlockLayout::tile(),
                ] {
                    seed += 1;
                    ctx.quantize_case(&shape, dtype, block, format, mode, seed, true);
                }
            }
        }
    }
    ctx.quantize_case(
        &[1000],
        DType::F32,
        BlockLayout::vector(0),
        MxFormat::E4m3,
        ScaleMode::Rceil,
        1,
        true,
    );
    ctx.quantize_case(
        &[2, 3, 37, 33],
        DType::Bf16,
        BlockLayout::vector(2),
        MxFormat::E4m3,
        ScaleMode::Rceil,
        2,
        true,
    );

    // ---------------- quantize with wgrad values (ABI 1.5) ----------------
    // Experts on multiples of 32 rows take the fused kernels (row tails of 16 and 0);
    // the others, and N = 200, a pass of their own. Every other case keeps the MX tensors'
    // values too (on the default path another fused kernel).
    for (counts, pad, kn) in [
        (vec![256usize, 0, 96, 512], 16, (2880, 320)),
        (vec![128, 256], 0, (512, 384)),
        (vec![100, 37, 0, 250], 5, (288, 200)),
    ] {
        for fm in [
            (MxFormat::E4m3, ScaleMode::Rceil),
            (MxFormat::E4m3, ScaleMode::Floor),
            (MxFormat::E5m2, ScaleMode::Even),
        ] {
            seed += 2;
            ctx.wgrad_values_case(&counts, pad, kn, fm, (seed, seed % 4 == 0));
        }
    }

    // ---------------- GEMM: edge cases (full CPU reference) ----------------
    let odd = vec![0usize, 37, 200, 1, 513, 0, 130];
    for pass in [GemmPass::Forward, GemmPass::Dgrad, GemmPass::Wgrad] {
        for mx in [false, true] {
            let mut g = GemmCase::new(pass, odd.clone(), 2880, 208);
            g.pad_rows = 19;
            g.mx = mx;
            ctx.gemm_case("odd experts", &g);
            if pass != GemmPass::Wgrad {
                g.w2d = false;
                ctx.gemm_case("odd experts", &g);
            }
        }
        let mut g = GemmCase::new(pass, vec![129, 0, 300, 64, 31], 304, 272);
        g.pad_rows = 7;
        g.layout = WeightLayout::Kn;
        ctx.gemm_case("Kn weights", &g);
        g.w2d = false;
        g.mx = true;
        ctx.gemm_case("Kn weights", &g);
        if pass != GemmPass::Wgrad {
            // 32×32 weight tiles stored [E, K, N] (quantize-with-transpose's copy).
            let mut g = GemmCase::new(pass, vec![129, 0, 300, 64, 31], 304, 272);
            g.pad_rows = 5;
            g.layout = WeightLayout::Kn;
            g.mx = true;
            ctx.gemm_case("Kn weights", &g);
        }
        let mut g = GemmCase::new(pass, odd.clone(), 2880, 208);
        g.out = DType::Bf16;
        g.pad_rows = 3;
        ctx.gemm_case("odd experts", &g);
        if pass != GemmPass::Wgrad {
            // X / dY pre-quantized in 32×32 tiles (the copy that also serves wgrad); the
            // tiles straddle expert boundaries, each row keeps its tile's scale.
            let mut g = GemmCase::new(pass, odd.clone(), 2880, 208);
            g.mx = true;
            g.pad_rows = 11;
            g.a_block = Some(BlockLayout::tile());
            ctx.gemm_case("A in 32x32 tiles", &g);
        }
        let mut g = GemmCase::new(pass, vec![64, 64, 0], 256, 128);
        g.format = MxFormat::E5m2;
        ctx.gemm_case("small", &g);
    }
    let mut g = GemmCase::new(GemmPass::Wgrad, vec![100, 0, 45], 96, 33);
    g.layout = WeightLayout::Nk;
    ctx.gemm_case("odd N", &g);
    let mut g = GemmCase::new(GemmPass::Wgrad, vec![100, 0, 45], 33, 96);
    ctx.gemm_case("odd K", &g);
    g.layout = WeightLayout::Kn;
    ctx.gemm_case("odd K", &g);
    // wgrad on pre-quantized X in 32×32 tiles, and on one pre-quantized and one dense
    // operand: the dequantize-to-BF16 path takes any layout (the FP8 kernel does not).
    if std::env::var("MXHOST_MX_WGRAD").as_deref() != Ok("fp8") {
        let mut g = GemmCase::new(GemmPass::Wgrad, vec![129, 0, 300, 64, 31], 304, 272);
        g.mx = true;
        g.pad_rows = 9;
        g.wgrad_x_block = Some(BlockLayout::tile());
        ctx.gemm_case("any MX layout", &g);
        g.wgrad_x_block = None;
        g.dense_b = true;
        ctx.gemm_case("mixed operands", &g);
    }
    let mut g = GemmCase::new(GemmPass::Forward, vec![64, 64], 256, 128);
    g.nan_row = true;
    g.mx = true;
    ctx.gemm_case("NaN propagation", &g);
    // A wide dynamic range inside each 128-deep stage: the product rests on the elements
    // the chained GEMM (MXHOST_MX_CHAIN=on|always) carries as residual corrections. Shapes
    // it takes (rows and columns multiples of 16), both weight layouts, both outputs.
    for pass in [GemmPass::Forward, GemmPass::Dgrad] {
        for (layout, out) in [
            (WeightLayout::Nk, DType::F32),
            (WeightLayout::Kn, DType::Bf16),
        ] {
            let mut g = GemmCase::new(pass, vec![512, 0, 384, 640], 2880, 256);
            (g.mx, g.layout, g.out, g.residual_carried) = (true, layout, out, true);
            ctx.gemm_case("residual-carried", &g);
            // The same, and plain operands, quantized on the GPU: under MXHOST_MX_CHAIN the
            // chained GEMM reads the chain forms the quantizer left in the annexes (the plain
            // ones with 1552 rows: a last 32-row tile half full, for the fused quantizer).
            for carried in [true, false] {
                let sizes = if carried {
                    [512, 0, 384, 640]
                } else {
                    [512, 0, 400, 640]
                };
                let mut g = GemmCase::new(pass, sizes.to_vec(), 2880, 256);
                (g.mx, g.layout, g.out) = (true, layout, out);
                (g.residual_carried, g.quantized_on_gpu) = (carried, true);
                g.keep_values = None;
                ctx.gemm_case("quantized on the GPU", &g);
            }
        }
    }
    // B's residuals carrying the product in one column of 32 (the chained GEMM's A'·B_res
    // corrections, a few per tile; f32 outputs: the other columns would hide a missing
    // correction under bf16's gate).
    for pass in [GemmPass::Forward, GemmPass::Dgrad] {
        for (layout, on_gpu) in [
            (WeightLayout::Nk, pass == GemmPass::Dgrad),
            (WeightLayout::Kn, pass == GemmPass::Forward),
        ] {
            let mut g = GemmCase::new(pass, vec![512, 0, 384, 640], 2880, 256);
            (g.mx, g.layout, g.b_residual_carried) = (true, layout, true);
            if on_gpu {
                (g.quantized_on_gpu, g.keep_values) = (true, None);
            }
            ctx.gemm_case("B residual-carried", &g);
        }
    }
    // The same B residuals, the weight quantized on the GPU first and named at A's quantize
    // call (ABI 1.9: A's form may hold only the part this weight's corrections read), or
    // named and then quantized again (the GEMM writes A's form whole first). Forward on Nk and
    // dgrad on Kn, the two GEMMs of guest-sdk's GroupedLinear; expert ends off the 16-row
    // chunks A's form is stored in (a chunk with rows of two experts).
    if ctx.plugin.abi_minor >= 9 {
        for (pass, layout) in [
            (GemmPass::Forward, WeightLayout::Nk),
            (GemmPass::Dgrad, WeightLayout::Kn),
        ] {
            for fresh in [true, false] {
                let mut g = GemmCase::new(pass, vec![520, 0, 376, 640], 2880, 256);
                (g.mx, g.layout, g.b_residual_carried) = (true, layout, true);
                (g.quantized_on_gpu, g.keep_values) = (true, None);
                g.name_weight = Some(fresh);
                ctx.gemm_case("B residual-carried", &g);
            }
        }
    }
    // The residual-carried forward quantized on the GPU and multiplied 18 times from the same
    // buffers: under MXHOST_MX_CHAIN=on (with its gate memory, chain_memory.rs) the
    // first call closes the gate, the next 15 run without annexes on the default path, the
    // 17th fills them again; every result is checked against the CPU.
    let mut g = GemmCase::new(GemmPass::Forward, vec![512, 0, 384, 640], 2880, 256);
    (g.mx, g.residual_carried, g.quantized_on_gpu) = (true, true, true);
    (g.keep_values, g.repeat) = (None, 18);
    ctx.gemm_case("repeated", &g);
    // Operands quantized with their bf16 values kept (ABI 1.2): forward/dgrad read them
    // on the dequantize-to-BF16 path (both kept: cuBLAS alone), from either stored layout
    // of the weight and with its values stored swapped; wgrad reads A's and B's.
    if ctx.plugin.abi_minor >= 2 {
        for pass in [GemmPass::Forward, GemmPass::Dgrad] {
            for (layout, swapped, out) in [
                (WeightLayout::Nk, false, DType::F32),
                (WeightLayout::Nk, true, DType::Bf16),
                (WeightLayout::Kn, false, DType::Bf16),
                (WeightLayout::Kn, true, DType::F32),
            ] {
                let mut g = GemmCase::new(pass, odd.clone(), 2880, 208);
                (g.pad_rows, g.mx, g.layout, g.out) = (13, true, layout, out);
                g.keep_values = Some(swapped);
                ctx.gemm_case("odd experts", &g);
            }
            let mut g = GemmCase::new(pass, odd.clone(), 2880, 208);
            (g.mx, g.a_block, g.keep_values) = (true, Some(BlockLayout::tile()), Some(true));
            ctx.gemm_case("A in 32x32 tiles", &g);
            // A dense (quantized in the call), only the weight kept: GroupedLinear's case.
            for w2d in [true, false] {
                let mut g = GemmCase::new(pass, odd.clone(), 2880, 208);
                (g.mx, g.dense_a, g.w2d, g.keep_values) = (true, true, w2d, Some(false));
                (g.pad_rows, g.out) = (6, DType::Bf16);
                ctx.gemm_case("odd experts", &g);
            }
        }
        if std::env::var("MXHOST_MX_WGRAD").as_deref() != Ok("fp8") {
            let mut g = GemmCase::new(GemmPass::Wgrad, vec![129, 0, 300, 64, 31], 304, 272);
            (g.mx, g.pad_rows, g.keep_values) = (true, 9, Some(false));
            ctx.gemm_case("values kept", &g);
            g.wgrad_x_block = Some(BlockLayout::tile());
            ctx.gemm_case("values kept", &g);
        }
    }
    let mut g = GemmCase::new(GemmPass::Forward, vec![0, 0, 0], 256, 128);
    g.pad_rows = 40;
    ctx.gemm_case("all experts empty", &g);
    if gpu != Device::Cpu {
        let mut g = GemmCase::new(GemmPass::Forward, vec![50, 50], 200, 128);
        g.expect_unsupported = true;
        ctx.gemm_case("K % 16 != 0", &g);
    }

    // ---------------- anchor shapes ----------------
    for key in args
        .shapes
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        let Some(&(name, e, mut m, k, n)) = ANCHORS.iter().find(|a| a.0 == key) else {
            anyhow::bail!("unknown anchor shape `{key}` (a, b, c, d)");
        };
        if args.quick {
            m = (m / 16).max(64);
        }
        let label = format!("anchor {name}");
        seed += 1;
        ctx.quantize_case(
            &[(e * m) as u64, k as u64],
            DType::Bf16,
            BlockLayout::vector(1),
            MxFormat::E4m3,
            ScaleMode::Rceil,
            seed,
            false,
        );
        ctx.quantize_case(
            &[e as u64, n as u64, k as u64],
            DType::Bf16,
            BlockLayout::tile(),
            MxFormat::E4m3,
            ScaleMode::Rceil,
            seed + 1,
            false,
        );
        ctx.quantize_case(
            &[(e * m) as u64, n as u64],
            DType::Bf16,
            BlockLayout::vector(0),
            MxFormat::E4m3,
            ScaleMode::Rceil,
            seed + 2,
            false,
        );
        for pass in [GemmPass::Forward, GemmPass::Dgrad, GemmPass::Wgrad] {
            let mut g = GemmCase::new(pass, vec![m; e], k, n);
            g.sample = true;
            g.seed = seed;
            ctx.gemm_case(&label, &g);
            if pass == GemmPass::Forward {
                g.w2d = false;
                ctx.gemm_case(&label, &g);
            }
        }
    }

    // ---------------- table ----------------
    let failed = ctx.rows.iter().filter(|r| !r.ok).count();
    println!();
    println!("| check | case | result | max rel err | SNR (dB) | ms | note |");
    println!("|---|---|---|---|---|---|---|");
    for r in &ctx.rows {
        println!(
            "| {} | {} | {} | {} | {} | {:.0} | {} |",
            r.check,
            r.case,
            if r.ok { "PASS" } else { "**FAIL**" },
            r.max_rel.map_or("-".into(), |v| format!("{v:.2e}")),
            r.snr.map_or("-".into(), |v| if v.is_infinite() {
                "inf".into()
            } else {
                format!("{v:.1}")
            }),
            r.ms,
            r.note.replace('|', "/")
        );
    }
    println!();
    println!(
        "mxhost selftest: {} checks, {} passed, {} failed ({:.1} s)",
        ctx.rows.len(),
        ctx.rows.len() - failed,
        failed,
        t_all.elapsed().as_secs_f64()
    );
    Ok(if failed == 0 { 0 } else { 1 })
}
