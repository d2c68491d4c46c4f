//! The A-side re-encoding kernel `mx_reencode_block_*` (`cuda/include/mx_reencode_block.cuh`:
//! the chain form of X or dY from its FP8 bytes, when the quantizer's one-pass form kernel does
//! not take the call), run on the host through `tests/host/simt.hpp` and compared with the CPU
//! reference (`numerics::reencode::reencode_rows`) on fresh random operands: the stage-uniform
//! copy and its scales, both transposed, and the residual counts per row and stage, every output
//! poisoned first; both formats; C = 2880 (a short last stage) and C = 100 (one partial stage,
//! a partial last block).

use mxhost_plugin_abi::MxFormat;
use mxhost_plugin_mxfp8::numerics::reencode::{reencode_rows, STAGE};

mod host;
use host::{group_scales, row_bytes, Bytes, Rng};

/// `rows` rows of `c` bytes with their 1×32 scales: stages that mix binades, rows of every kind.
fn operand(rng: &mut Rng, format: MxFormat, rows: usize, c: usize) -> (Vec<u8>, Vec<u8>) {
    let (mut q, mut s) = (Vec::new(), Vec::new());
    for _ in 0..rows {
        s.extend(group_scales(rng, 3, c.div_ceil(32)));
        let bytes = match rng.below(8) {
            0 => Bytes::Zeros,
            1 => Bytes::Any,
            _ => Bytes::Few,
        };
        q.extend(row_bytes(rng, format, bytes, c));
    }
    (q, s)
}

#[test]
fn the_block_form_equals_the_cpu_reference() {
    let Some((exe, mut rng, seed)) = host::setup("reencode_block_host", "block_driver.cpp") else {
        return;
    };
    let mut residuals = 0;
    for (r, c) in [(144, 2880), (48, 100)] {
        for (fmt, format) in [MxFormat::E4m3, MxFormat::E5m2].into_iter().enumerate() {
            let ctx = format!("{r} x {c} {format:?}, seed {seed}");
            let (q, s) = operand(&mut rng, format, r, c);
            let kb = c.div_ceil(32);
            let want = reencode_rows(&q, &s, r, c, format).unwrap();
            residuals += want.residuals.len();
            let o = host::run_driver(&exe, &[r, c, fmt], &[&q, &s]);
            let (n, ns) = (r * c, c.div_ceil(STAGE));
            let mut at = 0;
            let mut part = |len: usize| {
                at += len;
                o[at - len..at].to_vec()
            };
            let (q2, s2, qt, sat, mc) =
                (part(n), part(r * kb), part(n), part(r * kb), part(ns * r));
            let status = i32::from_le_bytes(o[at..at + 4].try_into().unwrap());
            host::first_difference(&format!("{ctx}: q2"), &q2, &want.bytes, c);
            host::first_difference(&format!("{ctx}: s2"), &s2, &want.scales, kb);
            host::first_difference(
                &format!("{ctx}: at"),
                &qt,
                &host::transpose(&want.bytes, r, c),
                r,
            );
            let sat_want = host::transpose(&want.scales, r, kb);
            host::first_difference(&format!("{ctx}: sat"), &sat, &sat_want, r);
            let mut counts = vec![0u8; ns * r];
            for x in &want.residuals {
                counts[(x.k / STAGE) * r + x.row] += 1;
            }
            host::first_difference(&format!("{ctx}: mc"), &mc, &counts, r);
            assert_eq!(status, 0, "{ctx}: status");
        }
    }
    assert!(
        residuals > 50,
        "seed {seed}: only {residuals} residuals, too few to test"
    );
}
