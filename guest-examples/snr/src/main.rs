//! snr: SNR (dB) of MXFP8 grouped GEMM for every element format (E4M3, E5M2), scale
//! mode (rceil, floor, even) and weight block (1×32, 32×32), for forward, dgrad and
//! wgrad, on a routed MoE layout (expert groups aligned to 32, an empty expert, padding).
//!
//! Three numbers per row, all against FP64 references:
//! - `in-call vs unq.`: dense operands quantized inside the call (what training sees)
//!   against the unquantized data;
//! - `pre-q. vs unq.`: pre-quantized operands (`mx.quantize`; forward with 32×32 weight
//!   tiles: `gemm::quantize_for_gemm`, as GroupedLinear) against the unquantized data;
//! - `pre-q. vs deq.`: the same output against an FP64 GEMM of the dequantized operands
//!   (what the kernel itself loses; FP32 accumulation gives > 100 dB on the CPU).
//!
//! Gates (the reference project's): forward vs dequantized ≥ 40 dB; forward, dgrad and
//! wgrad vs unquantized ≥ 20, 15 and 15 dB. wgrad has no weight operand, so its value
//! repeats on the 32×32 rows. Args: `[--seed S]` (default 11). Runs on plugin `mxfp8`.

// `!(v >= gate)` on purpose: a NaN must fail a gate.
#![allow(clippy::neg_cmp_op_on_partial_ord)]

use mxhost_guest::prelude::*;
use mxhost_guest::{gemm::*, Error};

struct Snr;

const K: u32 = 256;
const N: u32 = 256;
/// Rows per expert as a router with align 32 leaves them (one expert empty).
const GROUPS: [u32; 4] = [96, 0, 160, 64];
const PADDING_ROWS: u32 = 32;

const GATE_FWD_DEQ: f64 = 40.0;
const GATE_UNQ: [(&str, f64); 3] = [("forward", 20.0), ("dgrad", 15.0), ("wgrad", 15.0)];

fn deq(q: &MxTensor) -> Result<Vec<f32>, Error> {
    dequantize(q)?.to_f32()
}

struct Row {
    pass: &'static str,
    format: &'static str,
    mode: &'static str,
    block: &'static str,
    in_call: f64,
    pre_unq: f64,
    pre_deq: f64,
}

impl Experiment for Snr {
    fn run(args: Vec<String>) -> Result<String, String> {
        let seed: u64 = match args.iter().position(|a| a == "--seed") {
            Some(i) => args
                .get(i + 1)
                .and_then(|s| s.parse().ok())
                .ok_or("--seed needs an integer")?,
            None => 11,
        };
        plugin::select("mxfp8")?;
        let offs: Vec<i32> = GROUPS
            .iter()
            .scan(0i32, |a, &g| {
                *a += g as i32;
                Some(*a)
            })
            .collect();
        let rows = *offs.last().unwrap() as u32 + PADDING_ROWS;
        let (r, n, k, e) = (rows as usize, N as usize, K as usize, GROUPS.len() as u32);
        let x = Tensor::randn_f32(&[rows, K], seed)?;
        let w = Tensor::randn(&[e, N, K], Dtype::F32, seed + 1, 0.0, 0.05)?;
        let dy = Tensor::randn_f32(&[rows, N], seed + 2)?;
        let (xv, wv, dyv) = (x.to_f32()?, w.to_f32()?, dy.to_f32()?);
        let ref_y = reference::forward(&xv, &wv, &offs, r, n, k);
        let ref_dx = reference::dgrad(&dyv, &wv, &offs, r, n, k);
        let ref_dw = reference::wgrad(&dyv, &xv, &offs, n, k);

        let formats = [(ElementFormat::E4m3, "e4m3"), (ElementFormat::E5m2, "e5m2")];
        let modes = [
            (ScaleMode::Rceil, "rceil"),
            (ScaleMode::Floor, "floor"),
            (ScaleMode::Even, "even"),
        ];
        let blocks = [(false, "1x32"), (true, "32x32")];
        let total = (formats.len() * modes.len() * blocks.len()) as u64;
        let mut table = Vec::new();
        let mut done = 0;
        for &(format, fname) in &formats {
            for &(mode, mname) in &modes {
                let spec = |block| MxSpec {
                    format,
                    mode,
                    block,
                };
                // wgrad: dy and x along M; no weight operand.
                let o = GemmOptions {
                    format,
                    mode,
                    ..options()
                };
                let dw_in = wgrad(Operand::Dense(&dy), Operand::Dense(&x), &offs, &o)?.to_f32()?;
                let (qdy_m, qx_m) = (
                    quantize(&dy, spec(BlockLayout::Along(0)))?,
                    quantize(&x, spec(BlockLayout::Along(0)))?,
                );
                let dw = wgrad(
                    Operand::Quantized(&qdy_m),
                    Operand::Quantized(&qx_m),
                    &offs,
                    &o,
                )?
                .to_f32()?;
                let exact_dw = reference::wgrad(&deq(&qdy_m)?, &deq(&qx_m)?, &offs, n, k);
                for &(blocks_2d, bname) in &blocks {
                    let o = GemmOptions {
                        weight_blocks_2d: blocks_2d,
                        ..o
                    };
                    let wspec = |axis| {
                        spec(if blocks_2d {
                            BlockLayout::Tile32x32
                        } else {
                            BlockLayout::Along(axis)
                        })
                    };
                    // forward: x along K, w along K (or tiles: then both quantized for a GEMM,
                    // as GroupedLinear quantizes them; the same MX tensors, on a Hopper GPU
                    // multiplied by the chained GEMM).
                    let y_in =
                        forward(Operand::Dense(&x), Operand::Dense(&w), &offs, &o)?.to_f32()?;
                    let quant = |t: &Tensor, s: MxSpec| match blocks_2d {
                        true => quantize_for_gemm(t, s),
                        false => quantize(t, s),
                    };
                    let (qx, qw) = (
                        quant(&x, spec(BlockLayout::Along(1)))?,
                        quant(&w, wspec(2))?,
                    );
                    let y = forward(Operand::Quantized(&qx), Operand::Quantized(&qw), &offs, &o)?
                        .to_f32()?;
                    let exact = reference::forward(&deq(&qx)?, &deq(&qw)?, &offs, r, n, k);
                    table.push(Row {
                        pass: "forward",
                        format: fname,
                        mode: mname,
                        block: bname,
                        in_call: reference::snr_db(&ref_y, &y_in),
                        pre_unq: reference::snr_db(&ref_y, &y),
                        pre_deq: reference::snr_db(&exact, &y),
                    });
                    // dgrad: dy along N, w along N (or tiles).
                    let dx_in =
                        dgrad(Operand::Dense(&dy), Operand::Dense(&w), &offs, &o)?.to_f32()?;
                    let (qdy, qw_n) = (
                        quantize(&dy, spec(BlockLayout::Along(1)))?,
                        quantize(&w, wspec(1))?,
                    );
                    let dx = dgrad(
                        Operand::Quantized(&qdy),
                        Operand::Quantized(&qw_n),
                        &offs,
                        &o,
                    )?
                    .to_f32()?;
                    let exact = reference::dgrad(&deq(&qdy)?, &deq(&qw_n)?, &offs, r, n, k);
                    table.push(Row {
                        pass: "dgrad",
                        format: fname,
                        mode: mname,
                        block: bname,
                        in_call: reference::snr_db(&ref_dx, &dx_in),
                        pre_unq: reference::snr_db(&ref_dx, &dx),
                        pre_deq: reference::snr_db(&exact, &dx),
                    });
                    table.push(Row {
                        pass: "wgrad",
                        format: fname,
                        mode: mname,
                        block: bname,
                        in_call: reference::snr_db(&ref_dw, &dw_in),
                        pre_unq: reference::snr_db(&ref_dw, &dw),
                        pre_deq: reference::snr_db(&exact_dw, &dw),
                    });
                    done += 1;
                    progress(done, total, "snr configurations");
                }
            }
        }

        println!(
            "snr: plugin {}, E = {e} experts, rows per expert {GROUPS:?} + {PADDING_ROWS} padding, K = {K}, N = {N}, seed {seed}",
            plugin::active()
        );
        println!(
            "{:<8} {:<5} {:<6} {:<6} {:>16} {:>16} {:>16}",
            "pass", "fmt", "mode", "W blk", "in-call vs unq.", "pre-q. vs unq.", "pre-q. vs deq."
        );
        let mut failures = Vec::new();
        for row in &table {
            println!(
                "{:<8} {:<5} {:<6} {:<6} {:>13.1} dB {:>13.1} dB {:>13.1} dB",
                row.pass, row.format, row.mode, row.block, row.in_call, row.pre_unq, row.pre_deq
            );
            let name = format!("{}/{}/{}/{}", row.pass, row.format, row.mode, row.block);
            metric(&format!("snr_in_call_db/{name}"), 0, row.in_call);
            metric(&format!("snr_vs_dequantized_db/{name}"), 0, row.pre_deq);
            let gate = GATE_UNQ.iter().find(|g| g.0 == row.pass).unwrap().1;
            for (what, v) in [("in-call", row.in_call), ("pre-quantized", row.pre_unq)] {
                if !(v >= gate) {
                    failures.push(format!(
                        "{name} {what} vs unquantized {v:.1} dB < {gate} dB"
                    ));
                }
            }
            if row.pass == "forward" && !(row.pre_deq >= GATE_FWD_DEQ) {
                failures.push(format!(
                    "{name} vs dequantized {:.1} dB < {GATE_FWD_DEQ} dB",
                    row.pre_deq
                ));
            }
        }
        if failures.is_empty() {
            Ok(format!(
                "snr: all {} rows pass the gates (forward vs dequantized ≥ {GATE_FWD_DEQ} dB; vs unquantized forward/dgrad/wgrad ≥ 20/15/15 dB)",
                table.len()
            ))
        } else {
            Err(format!("SNR gates failed: {}", failures.join("; ")))
        }
    }
}

mxhost_guest::export_experiment!(Snr);

fn main() {}
