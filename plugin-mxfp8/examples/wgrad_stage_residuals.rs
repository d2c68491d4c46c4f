//! How many residuals a chained wgrad's B operand would carry, on the CPU (docs/perf.md,
//! "twenty-third part"). wgrad reduces over M, and with the default recipe X is quantized
//! 1×32 along M: each column k has its own scale per 32 rows. The chained GEMM promotes once
//! per 128-deep stage, so B must be re-encoded to scales that are uniform over each stage's
//! scale group, and every element that does not survive the shift becomes a residual
//! (`numerics::reencode`). Two groupings are possible:
//! - per column (4 scales: the column's 4 blocks of the stage), as the A side of forward is
//!   re-encoded: the kernel then needs a B scale per output column;
//! - per 32 columns (128 scales), the B layout the chained kernel has today (one scale per 32
//!   columns and stage): no kernel change for the scales, but one large column in the group
//!   shifts the other 31.
//! - per column over G consecutive stages (4 G scales; G = 8 is c's whole 1024-row expert
//!   segment): the column's scale is then constant across G stages, so a kernel could apply it
//!   once per G stages (or in the epilogue) and promote each stage with the A row scale alone,
//!   one FFMA per output as forward's 32×32 weights allow, instead of an FMUL and an FFMA.
//!
//! The last three columns are the same X as forward's A operand (1×32 along K, per row and
//! stage): with a stage's four blocks adjacent (today), taken in an order of K blocks sorted
//! by their mean scale (an idea, docs/perf.md), and two adjacent blocks per 64-deep stage. A
//! second table does the same for a weight in 32×32 tiles (forward's B, 128- and 64-deep
//! stages) with structured input channels.
//!
//! Run: `cargo run --release -p mxhost-plugin-mxfp8 --example wgrad_stage_residuals`.
//! Prints residuals per element for five kinds of activations (i.i.d. Gaussian, channels with
//! log-normal magnitudes, 1 % outlier channels at 30×, tokens with log-normal magnitudes, 1 %
//! outlier tokens at 10×) and five kinds of weights; the chained gate closes above 1e-4 per
//! element (both operands together).

use mxhost_plugin_abi::{BlockLayout, MxFormat, ScaleMode};
use mxhost_plugin_common::testing::Rng;
use mxhost_plugin_mxfp8::numerics::reencode::{reencode_rows, shift_exact};
use mxhost_plugin_mxfp8::quantize_mx;

const M: usize = 4096;
const K: usize = 1024;

/// Xᵀ `[K][M]` (column k of X is row k here) with per-channel magnitudes `chan` and
/// per-token magnitudes `tok`.
fn activations(rng: &mut Rng, chan: &[f64], tok: &[f64]) -> Vec<f32> {
    let mut xt = vec![0f32; K * M];
    for (k, row) in xt.chunks_mut(M).enumerate() {
        for (m, v) in row.iter_mut().enumerate() {
            *v = (rng.normal() * chan[k] * tok[m]) as f32;
        }
    }
    xt
}

/// `x` `[rows][cols]` quantized E4M3 (rceil) in `layout`: (bytes, scales).
fn quantize(x: &[f32], rows: usize, cols: usize, layout: BlockLayout) -> (Vec<u8>, Vec<u8>) {
    let blocks = if layout == BlockLayout::tile() {
        1024
    } else {
        32
    };
    let (mut bytes, mut scales) = (vec![0u8; rows * cols], vec![0u8; rows * cols / blocks]);
    quantize_mx(
        x,
        &[rows as u64, cols as u64],
        layout,
        MxFormat::E4m3,
        ScaleMode::Rceil,
        &mut bytes,
        &mut scales,
    )
    .expect("quantize");
    (bytes, scales)
}

/// Residuals when every group of `cols` columns × `nb` 32-row blocks (4 per 128-row stage)
/// shares the group's largest scale byte (bytes `[K][M]`, scales `[K][M / 32]`).
fn residuals_grouped(bytes: &[u8], scales: &[u8], cols: usize, nb: usize) -> usize {
    let kb = M / 32;
    let mut n = 0;
    for k0 in (0..K).step_by(cols) {
        for group in 0..M / (32 * nb) {
            let blocks = |k: usize| &scales[k * kb + nb * group..k * kb + nb * group + nb];
            let top = (k0..k0 + cols)
                .flat_map(|k| blocks(k).iter().copied())
                .max()
                .unwrap();
            for k in k0..k0 + cols {
                for (i, &t) in blocks(k).iter().enumerate() {
                    let m0 = 32 * nb * group + 32 * i;
                    n += bytes[k * M + m0..k * M + m0 + 32]
                        .iter()
                        .filter(|&&b| shift_exact(b, (top - t) as u32, MxFormat::E4m3).is_none())
                        .count();
                }
            }
        }
    }
    n
}

/// For comparison, the same X as forward's A operand: `[M][K]`, 1×32 along K, re-encoded per
/// row and 128-deep stage along K (what the chained forward carries for X).
/// Returns the residuals with four adjacent blocks per stage (today), four blocks in sorted
/// order, and two adjacent blocks per 64-deep stage.
fn forward_a_residuals(xt: &[f32]) -> [usize; 3] {
    let mut x = vec![0f32; M * K];
    for (k, col) in xt.chunks(M).enumerate() {
        for (m, &v) in col.iter().enumerate() {
            x[m * K + k] = v;
        }
    }
    let (bytes, scales) = quantize(&x, M, K, BlockLayout::vector(1));
    let adjacent = reencode_rows(&bytes, &scales, M, K, MxFormat::E4m3)
        .expect("finite")
        .residuals
        .len();
    let kb = K / 32;
    let in_order: Vec<usize> = (0..kb).collect();
    // the same count through this file's grouping: a check of residuals_block_groups
    assert_eq!(
        adjacent,
        residuals_block_groups(&bytes, &scales, &in_order, 4)
    );
    let mut sorted = in_order.clone();
    sorted.sort_by_key(|&b| (0..M).map(|m| scales[m * kb + b] as u64).sum::<u64>());
    [
        adjacent,
        residuals_block_groups(&bytes, &scales, &sorted, 4),
        residuals_block_groups(&bytes, &scales, &in_order, 2),
    ]
}

/// Residuals of forward's A `[M][K]` when each stage groups `per_stage` 32-column blocks taken
/// in `order` (adjacent ones today; one order for the whole tensor, as a per-layer order
/// shared with W's annex would be).
fn residuals_block_groups(bytes: &[u8], scales: &[u8], order: &[usize], per_stage: usize) -> usize {
    let kb = K / 32;
    let mut n = 0;
    for m in 0..M {
        for stage in order.chunks(per_stage) {
            let top = stage.iter().map(|&b| scales[m * kb + b]).max().unwrap();
            for &b in stage {
                let t = scales[m * kb + b];
                n += bytes[m * K + 32 * b..m * K + 32 * b + 32]
                    .iter()
                    .filter(|&&x| shift_exact(x, (top - t) as u32, MxFormat::E4m3).is_none())
                    .count();
            }
        }
    }
    n
}

/// Forward's B: a weight `[K rows = outputs][M columns = inputs]` (this file's sizes) with
/// per-input magnitudes `inp`, in 32×32 tiles, re-encoded per 32 outputs and 128-deep stage
/// (what the chained forward carries for W), and per 64-deep stage: residuals.
fn weight_residuals(rng: &mut Rng, inp: &[f64]) -> [usize; 2] {
    let w = activations(rng, &vec![1.0; K], inp);
    let (bytes, tiles) = quantize(&w, K, M, BlockLayout::tile());
    // a tile's scale on each of its 32 rows: the 1×32 layout residuals_grouped reads
    let per_row: Vec<u8> = (0..K)
        .flat_map(|r| tiles[(r / 32) * (M / 32)..(r / 32 + 1) * (M / 32)].to_vec())
        .collect();
    [
        residuals_grouped(&bytes, &per_row, 32, 4),
        residuals_grouped(&bytes, &per_row, 32, 2),
    ]
}

fn main() {
    let mut rng = Rng::new(20261204);
    let ones = |n: usize| vec![1.0; n];
    let kinds: [(&str, Vec<f64>, Vec<f64>); 5] = [
        ("i.i.d. N(0, 1)", ones(K), ones(M)),
        (
            "channels ~ lognormal(0, 1)",
            (0..K).map(|_| rng.normal().exp()).collect(),
            ones(M),
        ),
        (
            "1 % outlier channels at 30x",
            (0..K)
                .map(|_| if rng.below(100) == 0 { 30.0 } else { 1.0 })
                .collect(),
            ones(M),
        ),
        (
            "tokens ~ lognormal(0, 0.5)",
            ones(K),
            (0..M).map(|_| (0.5 * rng.normal()).exp()).collect(),
        ),
        (
            "1 % outlier tokens at 10x",
            ones(K),
            (0..M)
                .map(|_| if rng.below(100) == 0 { 10.0 } else { 1.0 })
                .collect(),
        ),
    ];
    const GROUPS: [usize; 4] = [2, 4, 8, 32];
    println!("X [{M} rows][{K} channels], 1x32 along M, E4M3, rceil; residuals per element");
    print!(
        "{:<30} {:>11} {:>11}",
        "activations", "per column", "per 32 cols"
    );
    for g in GROUPS {
        print!(" {:>11}", format!("col×{g} st"));
    }
    println!(
        " {:>11} {:>11} {:>11}",
        "fwd A rows", "fwd A sorted", "fwd A 64"
    );
    for (name, chan, tok) in kinds {
        let xt = activations(&mut rng, &chan, &tok);
        let (bytes, scales) = quantize(&xt, K, M, BlockLayout::vector(1));
        let per_col = reencode_rows(&bytes, &scales, K, M, MxFormat::E4m3)
            .expect("finite")
            .residuals
            .len();
        let n = (K * M) as f64;
        let per_32 = residuals_grouped(&bytes, &scales, 32, 4) as f64 / n;
        print!("{name:<30} {:>11.2e} {per_32:>11.2e}", per_col as f64 / n);
        for g in GROUPS {
            print!(
                " {:>11.2e}",
                residuals_grouped(&bytes, &scales, 1, 4 * g) as f64 / n
            );
        }
        let [adjacent, sorted, half] = forward_a_residuals(&xt);
        println!(
            " {:>11.2e} {:>11.2e} {:>11.2e}",
            adjacent as f64 / n,
            sorted as f64 / n,
            half as f64 / n
        );
    }
    println!("\nW [{K} outputs][{M} inputs] in 32x32 tiles, E4M3, rceil, per-input magnitudes");
    println!("{:<30} {:>11} {:>11}", "weight", "128 stage", "64 stage");
    let inputs: [(&str, Vec<f64>); 5] = [
        ("i.i.d. N(0, 1)", ones(M)),
        (
            "inputs ~ lognormal(0, 0.5)",
            (0..M).map(|_| (0.5 * rng.normal()).exp()).collect(),
        ),
        (
            "inputs ~ lognormal(0, 1)",
            (0..M).map(|_| rng.normal().exp()).collect(),
        ),
        (
            "1 % inputs at 1/10",
            (0..M)
                .map(|_| if rng.below(100) == 0 { 0.1 } else { 1.0 })
                .collect(),
        ),
        (
            "1 % inputs at 10x",
            (0..M)
                .map(|_| if rng.below(100) == 0 { 10.0 } else { 1.0 })
                .collect(),
        ),
    ];
    for (name, inp) in inputs {
        let [r, half] = weight_residuals(&mut rng, &inp).map(|r| r as f64 / (K * M) as f64);
        println!("{name:<30} {r:>11.2e} {half:>11.2e}");
    }
}
