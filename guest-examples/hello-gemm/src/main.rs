//! hello-gemm: quantize, run forward/dgrad/wgrad on a small MoE shape with plugin
//! `mxfp8`, switch to plugin `bf16` at run time, run again, and print SNRs.
//!
//! Two references, both FP64: the unquantized operands (what training loses to
//! quantization, gate ≥ 25 dB for E4M3) and the dequantized MX operands (what the
//! kernel itself loses, gate ≥ 90 dB on the CPU's FP32 accumulation).
//! Args: `[seed]` (default 7).

use mxhost_guest::prelude::*;
use mxhost_guest::{gemm::*, Error};

struct HelloGemm;

const K: u32 = 256;
const N: u32 = 192;
/// Rows per expert: an empty expert and sizes that are not multiples of 32 or 128 on
/// purpose (the reference project silently miscomputes those).
const GROUPS: [u32; 4] = [96, 0, 161, 67];
const PADDING_ROWS: u32 = 13;

const GATE_UNQUANTIZED_DB: f64 = 25.0;
const GATE_DEQUANTIZED_DB: f64 = 90.0;

struct Row {
    plugin: String,
    pass: &'static str,
    operands: &'static str,
    vs_unquantized: f64,
    vs_dequantized: Option<f64>,
}

fn offsets() -> Vec<i32> {
    GROUPS
        .iter()
        .scan(0i32, |acc, &g| {
            *acc += g as i32;
            Some(*acc)
        })
        .collect()
}

fn along(axis: u32) -> MxSpec {
    mx_spec(ElementFormat::E4m3, BlockLayout::Along(axis))
}

fn deq(q: &MxTensor) -> Result<Vec<f32>, Error> {
    dequantize(q)?.to_f32()
}

fn check_padding_zero(
    out: &[f32],
    rows_used: usize,
    cols: usize,
    what: &str,
) -> Result<(), String> {
    if out[rows_used * cols..].iter().any(|&v| v != 0.0) {
        return Err(format!("{what}: padding rows are not zero"));
    }
    Ok(())
}

impl Experiment for HelloGemm {
    fn run(args: Vec<String>) -> Result<String, String> {
        let seed: u64 = args
            .first()
            .map(|s| {
                s.parse()
                    .map_err(|_| format!("seed must be an integer, got {s}"))
            })
            .transpose()?
            .unwrap_or(7);
        let offs = offsets();
        let used = *offs.last().unwrap() as usize;
        let rows = used as u32 + PADDING_ROWS;
        let (k, n, e) = (K as usize, N as usize, GROUPS.len());

        let x = Tensor::randn_f32(&[rows, K], seed)?;
        let w = Tensor::randn(&[e as u32, N, K], Dtype::F32, seed + 1, 0.0, 0.05)?;
        let dy = Tensor::randn_f32(&[rows, N], seed + 2)?;
        let (xv, wv, dyv) = (x.to_f32()?, w.to_f32()?, dy.to_f32()?);
        let ref_y = reference::forward(&xv, &wv, &offs, rows as usize, n, k);
        let ref_dx = reference::dgrad(&dyv, &wv, &offs, rows as usize, n, k);
        let ref_dw = reference::wgrad(&dyv, &xv, &offs, n, k);

        let mut table = Vec::new();
        let opts = options();
        plugin::select("mxfp8")?;

        // Pre-quantized operands: the kernel is checked against its exact inputs.
        let (qx_k, qw_k) = (quantize(&x, along(1))?, quantize(&w, along(2))?);
        let y = forward(
            Operand::Quantized(&qx_k),
            Operand::Quantized(&qw_k),
            &offs,
            &opts,
        )?
        .to_f32()?;
        check_padding_zero(&y, used, n, "forward")?;
        let exact = reference::forward(&deq(&qx_k)?, &deq(&qw_k)?, &offs, rows as usize, n, k);
        table.push(Row {
            plugin: plugin::active(),
            pass: "forward",
            operands: "pre-quantized 1x32",
            vs_unquantized: reference::snr_db(&ref_y, &y),
            vs_dequantized: Some(reference::snr_db(&exact, &y)),
        });

        let (qdy_n, qw_n) = (quantize(&dy, along(1))?, quantize(&w, along(1))?);
        let dx = dgrad(
            Operand::Quantized(&qdy_n),
            Operand::Quantized(&qw_n),
            &offs,
            &opts,
        )?
        .to_f32()?;
        check_padding_zero(&dx, used, k, "dgrad")?;
        let exact = reference::dgrad(&deq(&qdy_n)?, &deq(&qw_n)?, &offs, rows as usize, n, k);
        table.push(Row {
            plugin: plugin::active(),
            pass: "dgrad",
            operands: "pre-quantized 1x32",
            vs_unquantized: reference::snr_db(&ref_dx, &dx),
            vs_dequantized: Some(reference::snr_db(&exact, &dx)),
        });

        let (qdy_m, qx_m) = (quantize(&dy, along(0))?, quantize(&x, along(0))?);
        let dw = wgrad(
            Operand::Quantized(&qdy_m),
            Operand::Quantized(&qx_m),
            &offs,
            &opts,
        )?
        .to_f32()?;
        let exact = reference::wgrad(&deq(&qdy_m)?, &deq(&qx_m)?, &offs, n, k);
        table.push(Row {
            plugin: plugin::active(),
            pass: "wgrad",
            operands: "pre-quantized 1x32",
            vs_unquantized: reference::snr_db(&ref_dw, &dw),
            vs_dequantized: Some(reference::snr_db(&exact, &dw)),
        });

        // Dense operands quantized inside the call, with 32x32 weight tiles.
        let opts_2d = GemmOptions {
            weight_blocks_2d: true,
            ..opts
        };
        let y = forward(Operand::Dense(&x), Operand::Dense(&w), &offs, &opts_2d)?.to_f32()?;
        table.push(Row {
            plugin: plugin::active(),
            pass: "forward",
            operands: "in-call 32x32 W",
            vs_unquantized: reference::snr_db(&ref_y, &y),
            vs_dequantized: None,
        });
        let dx = dgrad(Operand::Dense(&dy), Operand::Dense(&w), &offs, &opts_2d)?.to_f32()?;
        table.push(Row {
            plugin: plugin::active(),
            pass: "dgrad",
            operands: "in-call 32x32 W",
            vs_unquantized: reference::snr_db(&ref_dx, &dx),
            vs_dequantized: None,
        });
        let dw = wgrad(Operand::Dense(&dy), Operand::Dense(&x), &offs, &opts)?.to_f32()?;
        table.push(Row {
            plugin: plugin::active(),
            pass: "wgrad",
            operands: "in-call 1x32 on M",
            vs_unquantized: reference::snr_db(&ref_dw, &dw),
            vs_dequantized: None,
        });

        // Same tensors, other precision: switching moves no data.
        plugin::select("bf16")?;
        let y = forward(Operand::Dense(&x), Operand::Dense(&w), &offs, &opts)?.to_f32()?;
        table.push(Row {
            plugin: plugin::active(),
            pass: "forward",
            operands: "dense",
            vs_unquantized: reference::snr_db(&ref_y, &y),
            vs_dequantized: None,
        });
        let dx = dgrad(Operand::Dense(&dy), Operand::Dense(&w), &offs, &opts)?.to_f32()?;
        table.push(Row {
            plugin: plugin::active(),
            pass: "dgrad",
            operands: "dense",
            vs_unquantized: reference::snr_db(&ref_dx, &dx),
            vs_dequantized: None,
        });
        let dw = wgrad(Operand::Dense(&dy), Operand::Dense(&x), &offs, &opts)?.to_f32()?;
        table.push(Row {
            plugin: plugin::active(),
            pass: "wgrad",
            operands: "dense",
            vs_unquantized: reference::snr_db(&ref_dw, &dw),
            vs_dequantized: None,
        });
        plugin::select("mxfp8")?;

        println!("hello-gemm: E = {e} experts, rows per expert {GROUPS:?} + {PADDING_ROWS} padding, K = {K}, N = {N}, seed {seed}");
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
            if let Some(d) = r.vs_dequantized {
                if d < GATE_DEQUANTIZED_DB {
                    failures.push(format!(
                        "{} {} {} vs dequantized: {d:.1} dB < {GATE_DEQUANTIZED_DB} dB",
                        r.plugin, r.pass, r.operands
                    ));
                }
            }
        }
        if failures.is_empty() {
            Ok(format!("hello-gemm: all SNR gates passed (MXFP8 E4M3 ≥ {GATE_UNQUANTIZED_DB} dB vs unquantized, ≥ {GATE_DEQUANTIZED_DB} dB vs dequantized)"))
        } else {
            Err(format!("SNR gates failed: {}", failures.join("; ")))
        }
    }
}

mxhost_guest::export_experiment!(HelloGemm);

fn main() {}
