//! The scale-table kernels `mx_scales_to_f32` and `mx_scales_to_f32_stages`
//! (`cuda/include/mx_scale_tables.cuh`), run on the host through `tests/host/simt.hpp` and
//! compared with `numerics::e8m0::scale_value` applied by the documented layout formula.
//!
//! The per-k32 GEMM kernels read E8M0 scales as FP32 tables, zero-padded to `Rp × Cp`:
//! row-major, or "stage-major" (four columns of every row together) for the A operand.
//! Beside a chained GEMM the tables are gated: when the chained GEMM takes the output
//! (status words {flags, count} with no flag and count ≤ limit) they are not written at all.
//! Each case draws fresh scale bytes (every byte value, 0x00 and the NaN byte 0xFF included),
//! odd sizes, padding in both directions, scales stored row- or column-wise, 32×32 tiles
//! expanded per row (`rdv` 32), a batch of experts with room between them, and all four gate
//! states; the output is poisoned, so a missed or stray write fails. The seed is printed;
//! `MXHOST_TEST_SEED` replays one.

use mxhost_plugin_mxfp8::numerics::e8m0::scale_value;

mod host;
use host::Rng;

const POISON: u32 = 0xFFBA_DBAD;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kernel {
    /// `mx_scales_to_f32`: any output strides.
    General,
    /// `mx_scales_to_f32_stages`: the stage-major layout only.
    Stages,
}

#[derive(Clone, Copy, Debug)]
enum Gate {
    None,
    /// No flag, count within the limit: the chained GEMM computes, the table is not written.
    Taken,
    /// A flag set (a row overflowed, a block is not finite).
    Flagged,
    /// Count above the limit.
    OverLimit,
}

#[derive(Debug)]
struct Case {
    kernel: Kernel,
    batch: usize,
    r: usize,
    c: usize,
    rp: usize,
    cp: usize,
    rdv: usize,
    /// scale strides: expert, scale row, column
    ise: usize,
    isr: usize,
    isc: usize,
    /// output strides: expert, row, group of four columns
    ose: usize,
    osr: usize,
    ocg: usize,
    gate: Gate,
}

impl Case {
    fn draw(rng: &mut Rng, kernel: Kernel, rdv: usize, stage_major: bool, gate: Gate) -> Case {
        let batch = 1 + rng.below(3);
        let r = if rdv == 32 {
            32 * (1 + rng.below(5))
        } else {
            1 + rng.below(200)
        };
        let c = 1 + rng.below(300);
        let rp = r.next_multiple_of(32) + 32 * rng.below(2);
        let cp = c.next_multiple_of(4) + 4 * rng.below(3);
        let srows = r.div_ceil(rdv);
        // scales stored [srows][c] or, with rdv 1, column-wise [c][srows]
        let (isr, isc) = if rdv == 1 && rng.below(2) == 1 {
            (1, srows + rng.below(3))
        } else {
            (c + rng.below(3), 1)
        };
        let ise = (srows - 1) * isr + (c - 1) * isc + 1 + rng.below(5);
        let stage_major = stage_major || kernel == Kernel::Stages;
        let (osr, ocg) = if stage_major { (4, 4 * rp) } else { (cp, 4) };
        let ose = rp * cp + 4 * rng.below(3);
        Case {
            kernel,
            batch,
            r,
            c,
            rp,
            cp,
            rdv,
            ise,
            isr,
            isc,
            ose,
            osr,
            ocg,
            gate,
        }
    }

    /// The table the kernel must leave, poison where it must not write.
    fn expected(&self, s: &[u8]) -> Vec<u32> {
        let mut out = vec![POISON; self.batch * self.ose];
        if matches!(self.gate, Gate::Taken) {
            return out;
        }
        for e in 0..self.batch {
            for r in 0..self.rp {
                for c in 0..self.cp {
                    let v = if r < self.r && c < self.c {
                        scale_value(s[e * self.ise + (r / self.rdv) * self.isr + c * self.isc])
                    } else {
                        0.0
                    };
                    out[e * self.ose + (c / 4) * self.ocg + r * self.osr + c % 4] = v.to_bits();
                }
            }
        }
        out
    }
}

fn run(exe: &std::path::Path, k: &Case, s: &[u8]) -> Vec<u32> {
    const LIMIT: usize = 10;
    let (flags, count) = match k.gate {
        Gate::None => (0, 0),
        Gate::Taken => (0, LIMIT),
        Gate::Flagged => (1, 3),
        Gate::OverLimit => (0, LIMIT + 1),
    };
    let header = [
        (k.kernel == Kernel::Stages) as usize,
        k.batch,
        k.r,
        k.c,
        k.rp,
        k.cp,
        k.rdv,
        k.ise,
        k.isr,
        k.isc,
        k.ose,
        k.osr,
        k.ocg,
        if matches!(k.gate, Gate::None) {
            0
        } else {
            flags + 1
        },
        count,
        LIMIT,
    ];
    let o = host::run_driver(exe, &header, &[s]);
    o.chunks_exact(4)
        .map(|w| u32::from_le_bytes(w.try_into().unwrap()))
        .collect()
}

#[test]
fn scale_tables_equal_the_layout_formula_and_obey_the_gate() {
    let Some((exe, mut rng, seed)) = host::setup("scale_tables_host", "scale_tables_driver.cpp")
    else {
        return;
    };
    let gates = [Gate::None, Gate::Taken, Gate::Flagged, Gate::OverLimit];
    let mut written = 0;
    for kernel in [Kernel::General, Kernel::Stages] {
        for rdv in [1, 32] {
            for stage_major in [false, true] {
                for gate in gates {
                    let k = Case::draw(&mut rng, kernel, rdv, stage_major, gate);
                    let s: Vec<u8> = (0..k.batch * k.ise).map(|_| rng.below(256) as u8).collect();
                    let got = run(&exe, &k, &s);
                    let want = k.expected(&s);
                    if let Some(i) = (0..want.len()).find(|&i| got[i] != want[i]) {
                        panic!(
                            "seed {seed}, {k:?}: float {i} (expert {}, offset {}): kernel {:#010x}, expected {:#010x}",
                            i / k.ose,
                            i % k.ose,
                            got[i],
                            want[i]
                        );
                    }
                    written += want.iter().filter(|&&w| w != POISON).count();
                }
            }
        }
    }
    assert!(
        written > 10_000,
        "seed {seed}: only {written} floats written"
    );
}
