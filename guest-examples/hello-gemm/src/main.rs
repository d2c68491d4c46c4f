//! hello-gemm: quantize, run forward/dgrad/wgrad on a small MoE shape with plugin
//! `mxfp8`, switch to plugin `bf16` at run time, run again, and print SNRs.
//!
//! Two references, both FP64: the unquantized operands (what training loses to
//! quantization, gate ≥ 25 dB for E4M3) and the dequantized MX operands (what the
//! kernel itself loses, gate ≥ 90 dB on the CPU's FP32 accumulation; ≥ 75 dB when the
//! tensors live on a CUDA device, whose FP8 tensor cores accumulate each k32 block with
//! reduced precision before the FP32 promotion: ~87 dB is expected there).
//! Args: `[seed]` (default 7).

use mxhost_guest::prelude::*;
use mxhost_guest::{gemm::*, Error, ErrorKind, QuantizeOptions};

struct HelloGemm;

const K: u32 = 256;
const N: u32 = 192;
/// Rows per expert: an empty expert and sizes that are not multiples of 32 or 128 on
/// purpose (the reference project silently miscomputes those).
const GROUPS: [u32; 4] = [96, 0, 161, 67];
const PADDING_ROWS: u32 = 13;

const GATE_UNQUANTIZED_DB: f64 = 25.0;
const GATE_DEQUANTIZED_DB: f64 = 90.0;
const GATE_DEQUANTIZED_DB_CUDA: f64 = 75.0;

#[derive(Clone, Copy, PartialEq)]
enum Pass {
    Forward,
    Dgrad,
    Wgrad,
}

const PASSES: [Pass; 3] = [Pass::Forward, Pass::Dgrad, Pass::Wgrad];

/// The problem: host tensors plus guest copies for the FP64 references.
/// An operand on the host and the values it was made from.
type HostOperand = (Tensor, Vec<f32>);

struct Problem {
    offs: Vec<i32>,
    rows: usize,
    used: usize,
    x: HostOperand,
    w: HostOperand,
    dy: HostOperand,
}

impl Pass {
    fn name(self) -> &'static str {
        match self {
            Pass::Forward => "forward",
            Pass::Dgrad => "dgrad",
            Pass::Wgrad => "wgrad",
        }
    }

    /// The pass's operands: forward (x, w), dgrad (dy, w), wgrad (dy, x).
    fn operands(self, p: &Problem) -> (&HostOperand, &HostOperand) {
        match self {
            Pass::Forward => (&p.x, &p.w),
            Pass::Dgrad => (&p.dy, &p.w),
            Pass::Wgrad => (&p.dy, &p.x),
        }
    }

    /// The axes the pass contracts over, as 1×32 quantization axes of (a, b).
    fn axes(self) -> (u32, u32) {
        match self {
            Pass::Forward => (1, 2),
            Pass::Dgrad => (1, 1),
            Pass::Wgrad => (0, 0),
        }
    }

    fn call(
        self,
        a: Operand<'_>,
        b: Operand<'_>,
        offs: &[i32],
        o: &GemmOptions,
    ) -> Result<Vec<f32>, Error> {
        match self {
            Pass::Forward => forward(a, b, offs, o),
            Pass::Dgrad => dgrad(a, b, offs, o),
            Pass::Wgrad => wgrad(a, b, offs, o),
        }?
        .to_f32()
    }

    fn reference(self, a: &[f32], b: &[f32], p: &Problem) -> Vec<f64> {
        let (n, k) = (N as usize, K as usize);
        match self {
            Pass::Forward => reference::forward(a, b, &p.offs, p.rows, n, k),
            Pass::Dgrad => reference::dgrad(a, b, &p.offs, p.rows, n, k),
            Pass::Wgrad => reference::wgrad(a, b, &p.offs, n, k),
        }
    }

    /// Forward and dgrad must write zeros in the padding rows.
    fn check_padding(self, out: &[f32], p: &Problem) -> Result<(), String> {
        let cols = match self {
            Pass::Forward => N as usize,
            Pass::Dgrad => K as usize,
            Pass::Wgrad => return Ok(()),
        };
        if out[p.used * cols..].iter().any(|&v| v != 0.0) {
            return Err(format!("{}: padding rows are not zero", self.name()));
        }
        Ok(())
    }
}

struct Row {
    plugin: String,
    pass: &'static str,
    operands: &'static str,
    vs_unquantized: f64,
    vs_dequantized: Option<f64>,
}

fn along(axis: u32) -> MxSpec {
    mx_spec(ElementFormat::E4m3, BlockLayout::Along(axis))
}

/// Whether two results are the same numbers bit for bit.
fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

fn deq(q: &MxTensor) -> Result<Vec<f32>, Error> {
    dequantize(q)?.to_f32()
}

fn problem(seed: u64) -> Result<Problem, Error> {
    let offs: Vec<i32> = GROUPS
        .iter()
        .scan(0i32, |acc, &g| {
            *acc += g as i32;
            Some(*acc)
        })
        .collect();
    let used = *offs.last().unwrap() as usize;
    let rows = used as u32 + PADDING_ROWS;
    let with_values = |t: Tensor| -> Result<(Tensor, Vec<f32>), Error> {
        let v = t.to_f32()?;
        Ok((t, v))
    };
    Ok(Problem {
        offs,
        rows: rows as usize,
        used,
        x: with_values(Tensor::randn_f32(&[rows, K], seed)?)?,
        w: with_values(Tensor::randn(
            &[GROUPS.len() as u32, N, K],
            Dtype::F32,
            seed + 1,
            0.0,
            0.05,
        )?)?,
        dy: with_values(Tensor::randn_f32(&[rows, N], seed + 2)?)?,
    })
}

fn run_all(p: &Problem) -> Result<Vec<Row>, String> {
    let mut table = Vec::new();
    let opts = options();
    let mut row = |pass: Pass,
                   operands: &'static str,
                   out: &[f32],
                   exact: Option<Vec<f64>>|
     -> Result<(), String> {
        pass.check_padding(out, p)?;
        let (a, b) = pass.operands(p);
        let unquantized = pass.reference(&a.1, &b.1, p);
        table.push(Row {
            plugin: plugin::active(),
            pass: pass.name(),
            operands,
            vs_unquantized: reference::snr_db(&unquantized, out),
            vs_dequantized: exact.map(|e| reference::snr_db(&e, out)),
        });
        Ok(())
    };

    plugin::select("mxfp8")?;
    // Pre-quantized operands: the kernel is checked against its exact inputs.
    for pass in PASSES {
        let ((a, _), (b, _)) = pass.operands(p);
        let (axis_a, axis_b) = pass.axes();
        let (qa, qb) = (quantize(a, along(axis_a))?, quantize(b, along(axis_b))?);
        let out = pass.call(
            Operand::Quantized(&qa),
            Operand::Quantized(&qb),
            &p.offs,
            &opts,
        )?;
        let exact = pass.reference(&deq(&qa)?, &deq(&qb)?, p);
        row(pass, "pre-quantized 1x32", &out, Some(exact))?;
    }
    // Dense operands quantized inside the call, with 32x32 weight tiles.
    let opts_2d = GemmOptions {
        weight_blocks_2d: true,
        ..opts
    };
    for pass in PASSES {
        let ((a, _), (b, _)) = pass.operands(p);
        let label = if pass == Pass::Wgrad {
            "in-call 1x32 on M"
        } else {
            "in-call 32x32 W"
        };
        let out = pass.call(Operand::Dense(a), Operand::Dense(b), &p.offs, &opts_2d)?;
        row(pass, label, &out, None)?;
    }
    // The weight quantized once in 32×32 tiles with its transposed copy (one pass):
    // forward reads [E, N, K], dgrad the [E, K, N] copy (layout kn), and must equal
    // dgrad on the [E, N, K] copy bit for bit (same MX values, other storage).
    let tile = mx_spec(ElementFormat::E4m3, BlockLayout::Tile32x32);
    let (qw, qw_t) = quantize_with_transpose(&p.w.0, tile)?;
    if qw_t.shape() != [GROUPS.len() as u32, K, N] {
        return Err(format!("transposed copy has shape {:?}", qw_t.shape()));
    }
    let (qx, qdy) = (quantize(&p.x.0, along(1))?, quantize(&p.dy.0, along(1))?);
    let w_exact = deq(&qw)?;
    let out = Pass::Forward.call(
        Operand::Quantized(&qx),
        Operand::Quantized(&qw),
        &p.offs,
        &opts,
    )?;
    let exact = Pass::Forward.reference(&deq(&qx)?, &w_exact, p);
    row(Pass::Forward, "pre-quantized W 32x32", &out, Some(exact))?;
    let opts_kn = GemmOptions {
        weight_layout: WeightLayout::Kn,
        ..opts
    };
    let out = Pass::Dgrad.call(
        Operand::Quantized(&qdy),
        Operand::Quantized(&qw_t),
        &p.offs,
        &opts_kn,
    )?;
    let same = Pass::Dgrad.call(
        Operand::Quantized(&qdy),
        Operand::Quantized(&qw),
        &p.offs,
        &opts,
    )?;
    if !same_bits(&out, &same) {
        return Err("dgrad on the transposed weight copy differs from dgrad on the weight".into());
    }
    let exact = Pass::Dgrad.reference(&deq(&qdy)?, &w_exact, p);
    row(Pass::Dgrad, "pre-quantized W^T copy kn", &out, Some(exact))?;
    // The same recipe with the exact MX values kept beside the bytes (quantize-ext): GEMMs
    // on the BF16 tensor cores read them (on CUDA, forward and dgrad run on cuBLAS alone);
    // the products are the same MX values, so the dequantized reference still holds.
    let (kx, kw, kdy) = (
        quantize_keep_values(&p.x.0, along(1))?,
        quantize_keep_values(&p.w.0, tile)?,
        quantize_keep_values(&p.dy.0, along(1))?,
    );
    if !(kx.has_values() && kw.has_values() && kdy.has_values()) || qx.has_values() {
        return Err("quantize-ext's keep-values is not reflected by has-values".into());
    }
    let out = Pass::Forward.call(
        Operand::Quantized(&kx),
        Operand::Quantized(&kw),
        &p.offs,
        &opts,
    )?;
    let exact = Pass::Forward.reference(&deq(&kx)?, &w_exact, p);
    row(Pass::Forward, "values kept, W 32x32", &out, Some(exact))?;
    let out = Pass::Dgrad.call(
        Operand::Quantized(&kdy),
        Operand::Quantized(&kw),
        &p.offs,
        &opts,
    )?;
    let exact = Pass::Dgrad.reference(&deq(&kdy)?, &w_exact, p);
    row(Pass::Dgrad, "values kept, W 32x32", &out, Some(exact))?;
    // X and dY with their wgrad values from the same pass (quantize-with-wgrad-values):
    // the MX tensors are the plain quantize's, and wgrad on the values equals wgrad on
    // the dense tensors bit for bit (the plugin multiplies what it would have computed).
    let plain = QuantizeOptions {
        transposed: false,
        keep_values: false,
        for_gemm: false,
    };
    let (vx, _, xv) = quantize_with_wgrad_values(&p.x.0, along(1), plain, &p.offs)?;
    let (vdy, _, dyv) = quantize_with_wgrad_values(&p.dy.0, along(1), plain, &p.offs)?;
    if deq(&vx)? != deq(&qx)? || deq(&vdy)? != deq(&qdy)? {
        return Err("quantize-with-wgrad-values changed the MX tensor".into());
    }
    let out = Pass::Wgrad.call(Operand::Dense(&dyv), Operand::Dense(&xv), &p.offs, &opts)?;
    let same = Pass::Wgrad.call(
        Operand::Dense(&p.dy.0),
        Operand::Dense(&p.x.0),
        &p.offs,
        &opts,
    )?;
    if !same_bits(&out, &same) {
        return Err("wgrad on the wgrad values differs from wgrad on the dense tensors".into());
    }
    row(Pass::Wgrad, "wgrad values (one pass)", &out, None)?;
    // The operands quantized for a GEMM (quantize-options.for-gemm): the plugin may write its
    // GEMM form beside them (mxfp8 on a Hopper GPU: the chained GEMM's, which forward and
    // dgrad then run), but the MX tensors are the plain quantize's and the products their
    // exact values'.
    let (gx, gdy) = (
        quantize_for_gemm(&p.x.0, along(1))?,
        quantize_for_gemm(&p.dy.0, along(1))?,
    );
    let (gw, gw_t) = quantize_with_transpose_for_gemm(&p.w.0, tile)?;
    if deq(&gx)? != deq(&qx)? || deq(&gdy)? != deq(&qdy)? || deq(&gw)? != w_exact {
        return Err("quantize-ext's for-gemm changed the MX tensor".into());
    }
    let out = Pass::Forward.call(
        Operand::Quantized(&gx),
        Operand::Quantized(&gw),
        &p.offs,
        &opts,
    )?;
    let exact = Pass::Forward.reference(&deq(&gx)?, &w_exact, p);
    row(Pass::Forward, "for a GEMM, W 32x32", &out, Some(exact))?;
    let out = Pass::Dgrad.call(
        Operand::Quantized(&gdy),
        Operand::Quantized(&gw_t),
        &p.offs,
        &opts_kn,
    )?;
    let exact = Pass::Dgrad.reference(&deq(&gdy)?, &w_exact, p);
    row(Pass::Dgrad, "for a GEMM, W^T copy kn", &out, Some(exact))?;
    named_weight_checks(p, (&gx, &gdy), (&gw, &gw_t), &opts_kn)?;
    // Same tensors, other precision: switching moves no data.
    plugin::select("bf16")?;
    for pass in PASSES {
        let ((a, _), (b, _)) = pass.operands(p);
        let out = pass.call(Operand::Dense(a), Operand::Dense(b), &p.offs, &opts)?;
        row(pass, "dense", &out, None)?;
    }
    plugin::select("mxfp8")?;
    Ok(table)
}

/// X and dY quantized for a GEMM naming the weight that GEMM reads
/// (quantize-with-wgrad-values-for: W for X's forward, its transposed copy for dY's dgrad):
/// the MX tensors are the plain ones, and forward and dgrad give the same bits as on the
/// operands quantized without a name (the plugin may write less of their GEMM forms, never
/// other results). A weight whose shape does not fit x is an invalid argument.
fn named_weight_checks(
    p: &Problem,
    (gx, gdy): (&MxTensor, &MxTensor),
    (gw, gw_t): (&MxTensor, &MxTensor),
    opts_kn: &GemmOptions,
) -> Result<(), Error> {
    let opts = options();
    let for_gemm = QuantizeOptions {
        transposed: false,
        keep_values: false,
        for_gemm: true,
    };
    let named = |t: &Tensor, w: &MxTensor| {
        quantize_with_wgrad_values_for(t, along(1), for_gemm, &p.offs, w).map(|(q, _, _)| q)
    };
    let (nx, ndy) = (named(&p.x.0, gw)?, named(&p.dy.0, gw_t)?);
    if deq(&nx)? != deq(gx)? || deq(&ndy)? != deq(gdy)? {
        return Err(invalid(
            "quantize-with-wgrad-values-for changed the MX tensor",
        ));
    }
    let forward = |a: &MxTensor| {
        Pass::Forward.call(
            Operand::Quantized(a),
            Operand::Quantized(gw),
            &p.offs,
            &opts,
        )
    };
    let dgrad = |a: &MxTensor| {
        Pass::Dgrad.call(
            Operand::Quantized(a),
            Operand::Quantized(gw_t),
            &p.offs,
            opts_kn,
        )
    };
    if !same_bits(&forward(&nx)?, &forward(gx)?) || !same_bits(&dgrad(&ndy)?, &dgrad(gdy)?) {
        return Err(invalid(
            "a GEMM on operands quantized naming their weight gave other bits",
        ));
    }
    // (K != N: the transposed copy's last axis is not X's)
    match named(&p.x.0, gw_t) {
        Err(e) if e.kind == ErrorKind::InvalidArgument => Ok(()),
        Err(e) => Err(e),
        Ok(_) => Err(invalid("naming a weight of the wrong shape was accepted")),
    }
}

/// An invalid-argument error with `message`.
fn invalid(message: &str) -> Error {
    Error {
        kind: ErrorKind::InvalidArgument,
        message: message.into(),
    }
}

impl Experiment for HelloGemm {
    fn run(args: Vec<String>) -> Result<String, String> {
        let seed: u64 = match args.first() {
            Some(s) => s
                .parse()
                .map_err(|_| format!("seed must be an integer, got {s}"))?,
            None => 7,
        };
        let p = problem(seed)?;
        let table = run_all(&p)?;
        let gate_deq = if p.x.0.device() == mxhost_guest::DeviceKind::Cuda {
            GATE_DEQUANTIZED_DB_CUDA
        } else {
            GATE_DEQUANTIZED_DB
        };

        println!(
            "hello-gemm: E = {} experts, rows per expert {GROUPS:?} + {PADDING_ROWS} padding, K = {K}, N = {N}, seed {seed}",
            GROUPS.len()
        );
        println!(
            "{:<7} {:<8} {:<20} {:>22} {:>22}",
            "plugin", "pass", "operands", "SNR vs FP64 unquant.", "SNR vs FP64 dequant."
        );
        let mut failures = Vec::new();
        for r in &table {
            let deq = r
                .vs_dequantized
                .map_or("-".to_string(), |v| format!("{v:.1} dB"));
            println!(
                "{:<7} {:<8} {:<20} {:>19.1} dB {:>22}",
                r.plugin, r.pass, r.operands, r.vs_unquantized, deq
            );
            metric(
                &format!("snr_db/{}/{}/{}", r.plugin, r.pass, r.operands),
                0,
                r.vs_unquantized,
            );
            if r.plugin == "mxfp8" && r.vs_unquantized < GATE_UNQUANTIZED_DB {
                failures.push(format!(
                    "{} {} {}: {:.1} dB < {GATE_UNQUANTIZED_DB} dB",
                    r.plugin, r.pass, r.operands, r.vs_unquantized
                ));
            }
            if let Some(d) = r.vs_dequantized.filter(|&d| d < gate_deq) {
                failures.push(format!(
                    "{} {} {} vs dequantized: {d:.1} dB < {gate_deq} dB",
                    r.plugin, r.pass, r.operands
                ));
            }
        }
        if failures.is_empty() {
            Ok(format!(
                "hello-gemm: all SNR gates passed (MXFP8 E4M3 ≥ {GATE_UNQUANTIZED_DB} dB vs unquantized, ≥ {gate_deq} dB vs dequantized)"
            ))
        } else {
            Err(format!("SNR gates failed: {}", failures.join("; ")))
        }
    }
}

mxhost_guest::export_experiment!(HelloGemm);

fn main() {}
