//! The weight's pair kernel `mx_reencode_pair` (`cuda/include/mx_reencode_pair.cuh`), run on the
//! host through `tests/host/simt.hpp` and compared with the CPU reference
//! (`numerics::reencode::reencode_rows`) on fresh random weights.
//!
//! From one read of a weight W `[E][R][C]` in 32×32 tiles the kernel writes both chain forms
//! the chained GEMM reads: W re-encoded along C (forward) and Wᵀ re-encoded along R (dgrad),
//! their stage scale bytes, per row and stage the count of residuals, and, in the `COPIES`
//! build, W transposed and W's own bytes. Every byte of every output is compared (the outputs
//! are poisoned first), for both builds, on shapes whose R and C are not multiples of 128 (nor C
//! of 32); a weight with a NaN/Inf tile must set both copies' non-finite flag.

use mxhost_plugin_abi::MxFormat;
use mxhost_plugin_mxfp8::numerics::reencode::{reencode_rows, StageUniform, STAGE};
use std::process::Command;

mod host;
use host::{group_scales, row_bytes, Bytes, Rng, Scales};

const NONFINITE: i32 = 2;

/// W `[e][r][c]` and its tile scales `[e][ceil(r / 32)][ceil(c / 32)]`.
struct Weight {
    e: usize,
    r: usize,
    c: usize,
    q: Vec<u8>,
    s: Vec<u8>,
}

impl Weight {
    fn nb(&self) -> usize {
        self.r.div_ceil(32)
    }
    fn kb(&self) -> usize {
        self.c.div_ceil(32)
    }
    /// W's rows with their 1×32 scales (each tile's, repeated), for the reference.
    fn row_scales(&self) -> Vec<u8> {
        let (nb, kb) = (self.nb(), self.kb());
        (0..self.e * self.r)
            .flat_map(|row| {
                let t = (row / self.r) * nb + (row % self.r) / 32;
                self.s[t * kb..(t + 1) * kb].to_vec()
            })
            .collect()
    }
    /// Wᵀ `[e][c][r]` and its rows' 1×32 scales (the same tiles, transposed).
    fn transposed(&self) -> (Vec<u8>, Vec<u8>) {
        let (e, r, c, nb, kb) = (self.e, self.r, self.c, self.nb(), self.kb());
        let mut qt = vec![0u8; e * c * r];
        let mut st = vec![0u8; e * c * nb];
        for x in 0..e {
            for n in 0..r {
                for k in 0..c {
                    qt[(x * c + k) * r + n] = self.q[(x * r + n) * c + k];
                }
            }
            for k in 0..c {
                for t in 0..nb {
                    st[(x * c + k) * nb + t] = self.s[(x * nb + t) * kb + k / 32];
                }
            }
        }
        (qt, st)
    }
}

fn weight(rng: &mut Rng, (e, r, c): (usize, usize, usize)) -> Weight {
    let (nb, kb) = (r.div_ceil(32), c.div_ceil(32));
    let mut s = Vec::new();
    for _ in 0..e * nb {
        let kind = if rng.below(4) == 0 {
            Scales::Uniform
        } else {
            Scales::Spread
        };
        s.extend(group_scales(rng, kind, kb));
    }
    let mut q = Vec::new();
    for _ in 0..e * r {
        let kind = match rng.below(8) {
            0 => Bytes::Zeros,
            1 => Bytes::Any,
            _ => Bytes::Few,
        };
        q.extend(row_bytes(rng, MxFormat::E4m3, kind, c));
    }
    Weight { e, r, c, q, s }
}

/// The kernel's outputs, as the driver wrote them.
struct Pair {
    q2: Vec<u8>,
    s2: Vec<u8>,
    qt2: Vec<u8>,
    st2: Vec<u8>,
    bt: Vec<u8>,
    btt: Vec<u8>,
    mc: Vec<u8>,
    mct: Vec<u8>,
    status: i32,
    status_t: i32,
}

fn run_kernel(exe: &std::path::Path, w: &Weight, copies: bool) -> Pair {
    let dir = exe.parent().unwrap();
    let (inp, out) = (dir.join("in.bin"), dir.join("out.bin"));
    let mut bytes: Vec<u8> = [w.e, w.r, w.c, copies as usize]
        .iter()
        .flat_map(|&v| (v as i64).to_le_bytes())
        .collect();
    bytes.extend_from_slice(&w.q);
    bytes.extend_from_slice(&w.s);
    std::fs::write(&inp, bytes).unwrap();
    let run = Command::new(exe).arg(&inp).arg(&out).output().unwrap();
    assert!(
        run.status.success(),
        "the driver failed: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    let o = std::fs::read(&out).unwrap();
    let (n, tiles) = (w.e * w.r * w.c, w.e * w.nb() * w.kb());
    let copy = if copies { n } else { 0 };
    let sizes = [
        n,
        tiles,
        n,
        tiles,
        copy,
        copy,
        w.c.div_ceil(STAGE) * w.e * w.r,
        w.r.div_ceil(STAGE) * w.e * w.c,
    ];
    let mut at = 0;
    let mut parts = sizes.iter().map(|&len| {
        at += len;
        o[at - len..at].to_vec()
    });
    let mut next = || parts.next().unwrap();
    let (q2, s2, qt2, st2, bt, btt, mc, mct) = (
        next(),
        next(),
        next(),
        next(),
        next(),
        next(),
        next(),
        next(),
    );
    let word = |i: usize| i32::from_le_bytes(o[at + 4 * i..at + 4 * i + 4].try_into().unwrap());
    assert_eq!(o.len(), at + 16, "output size");
    Pair {
        q2,
        s2,
        qt2,
        st2,
        bt,
        btt,
        mc,
        mct,
        status: word(0),
        status_t: word(2),
    }
}

/// One form against its reference: bytes, stage scale bytes per tile
/// `[e][ceil(rows / 32)][kb]`, and residual counts `mc[stage * e rows + row]`.
fn check_form(
    what: &str,
    (q2, s2, mc): (&[u8], &[u8], &[u8]),
    want: &StageUniform,
    (e, rows, k): (usize, usize, usize),
) {
    let kb = k.div_ceil(32);
    let tiles = rows.div_ceil(32);
    if let Some(i) = (0..q2.len()).find(|&i| q2[i] != want.bytes[i]) {
        panic!(
            "{what}: byte {i} (row {}, k {}): kernel {:#04x}, reference {:#04x}",
            i / k,
            i % k,
            q2[i],
            want.bytes[i]
        );
    }
    for x in 0..e {
        for t in 0..tiles {
            let row = x * rows + 32 * t; // the tile's first row
            for b in 0..kb {
                let (got, w) = (s2[(x * tiles + t) * kb + b], want.scales[row * kb + b]);
                assert_eq!(got, w, "{what}: stage scale of tile ({x}, {t}, {b})");
            }
        }
    }
    let rows = e * rows;
    let mut counts = vec![0u8; k.div_ceil(STAGE) * rows];
    for r in &want.residuals {
        counts[(r.k / STAGE) * rows + r.row] += 1;
    }
    if let Some(i) = (0..counts.len()).find(|&i| mc[i] != counts[i]) {
        panic!(
            "{what}: residuals of row {} in stage {}: kernel {}, reference {}",
            i % rows,
            i / rows,
            mc[i],
            counts[i]
        );
    }
}

#[test]
fn both_chain_forms_equal_the_cpu_reference() {
    let Some(cxx) = host::compiler_or_skip("reencode_pair_host") else {
        return;
    };
    let exe = host::build_driver(
        &cxx,
        "reencode_pair_host",
        &host::here("pair_driver.cpp"),
        "-std=c++20",
    );
    let seed = host::seed("reencode_pair_host");
    let mut rng = Rng::new(seed);
    let mut residuals = 0;
    for dims in [(2, 160, 2880), (3, 96, 208)] {
        let w = weight(&mut rng, dims);
        let (e, r, c) = dims;
        let fwd = reencode_rows(&w.q, &w.row_scales(), e * r, c, MxFormat::E4m3).unwrap();
        let (qt, st_rows) = w.transposed();
        let bwd = reencode_rows(&qt, &st_rows, e * c, r, MxFormat::E4m3).unwrap();
        residuals += fwd.residuals.len() + bwd.residuals.len();
        for copies in [false, true] {
            let got = run_kernel(&exe, &w, copies);
            let ctx = format!("W {dims:?}, copies {copies}, seed {seed}");
            check_form(
                &format!("{ctx}: W's form"),
                (&got.q2, &got.s2, &got.mc),
                &fwd,
                (e, r, c),
            );
            check_form(
                &format!("{ctx}: Wᵀ's form"),
                (&got.qt2, &got.st2, &got.mct),
                &bwd,
                (e, c, r),
            );
            assert_eq!((got.status, got.status_t), (0, 0), "{ctx}: status words");
            if copies {
                assert!(got.bt == qt, "{ctx}: W transposed");
                assert!(got.btt == w.q, "{ctx}: W's own bytes");
            }
        }
    }
    assert!(
        residuals > 100,
        "seed {seed}: only {residuals} residuals, too few to test"
    );
    // a NaN/Inf tile (scale byte 0xFF, bytes 0x7F): no stage-uniform form for either copy
    let mut w = weight(&mut rng, (1, 64, 256));
    let kb = w.kb();
    w.s[kb + 5] = 0xFF;
    for n in 32..64 {
        w.q[n * 256 + 160..n * 256 + 192].fill(0x7F);
    }
    let got = run_kernel(&exe, &w, false);
    assert!(
        got.status & NONFINITE != 0 && got.status_t & NONFINITE != 0,
        "a NaN tile: status {} / {}",
        got.status,
        got.status_t
    );
}
