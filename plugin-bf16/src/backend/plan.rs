//! The grouped GEMM of one request as a list of column-major GEMM calls (what
//! `cublasGemmEx` takes) plus the output ranges to zero. Pure Rust, no CUDA: the CUDA
//! backend executes a [`Plan`], and the unit tests execute the same plan with a plain
//! column-major reference GEMM and compare with the CPU driver of `plugin-common`.
//!
//! The calls are also grouped into [`Batch`]es of one [`Shape`] (all arguments but the
//! offsets; in practice: the non-empty experts with one row count), which is how the
//! CUDA backend issues them: one group of `cublasGemmGroupedBatchedEx` per batch
//! (pointer arrays in [`Plan::batched_offsets`] order), or one
//! `cublasGemmStridedBatchedEx` per batch whose offsets are arithmetic progressions
//! ([`Batch::strides`]; equal-sized experts), or one `cublasGemmBatchedEx` per batch.
//! The tests execute those forms too and compare with the CPU driver.
//!
//! # Row-major to column-major
//!
//! Every tensor of the ABI is row-major. A row-major `r × c` matrix with leading
//! dimension `ld` is, read column-major with the same `ld`, its transpose `c × r`. So a
//! row-major product `C = L · R` (`C` is `m × n`, `L` `m × kk`, `R` `kk × n`) is the
//! column-major product `Cᵀ = Rᵀ · Lᵀ`: cuBLAS gets `m' = n`, `n' = m`, `k' = kk`, its
//! `A` is `R` and its `B` is `L`. An operand stored row-major as itself (`R` stored
//! `kk × n`) is already `Rᵀ` to cuBLAS (`op = N`, `ld = n`); one stored as its transpose
//! (`R = Sᵀ`, `S` stored `n × kk`) needs `op = T` with `ld = kk`.
//!
//! Per pass and weight layout (expert `e` owns rows `s..t`, `r = t − s`; offsets are in
//! elements of each tensor, `ldc` = the row length of the output):
//!
//! | pass    | layout | m' | n' | k' | cuBLAS A (op, ld, offset) | cuBLAS B (op, ld, offset) | C offset |
//! |---------|--------|----|----|----|---------------------------|---------------------------|----------|
//! | forward | Nk     | N  | r  | K  | W `T`, K, e·N·K           | X `N`, K, s·K             | s·N      |
//! | forward | Kn     | N  | r  | K  | W `N`, N, e·N·K           | X `N`, K, s·K             | s·N      |
//! | dgrad   | Nk     | K  | r  | N  | W `N`, K, e·N·K           | dY `N`, N, s·N            | s·K      |
//! | dgrad   | Kn     | K  | r  | N  | W `T`, N, e·N·K           | dY `N`, N, s·N            | s·K      |
//! | wgrad   | Nk     | K  | N  | r  | X `N`, K, s·K             | dY `T`, N, s·N            | e·N·K    |
//! | wgrad   | Kn     | N  | K  | r  | dY `N`, N, s·N            | X `T`, K, s·K             | e·N·K    |
//!
//! (forward/dgrad: X or dY is the request's `a`, W its `b`; wgrad: dY is `a`, X is `b`.)
//! Zeroed: forward/dgrad rows from the last offset to `rows` (padding), or the whole
//! output when the reduction length is 0; wgrad: the `[N,K]`/`[K,N]` block of every
//! empty expert. No GEMM is planned with a zero dimension.

use mxhost_plugin_abi::{GemmPass, WeightLayout};
use std::ops::Range;

/// Which operand of the request a GEMM argument reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Src {
    /// The request's `a` (X forward, dY dgrad and wgrad).
    A,
    /// The request's `b` (W forward and dgrad, X wgrad).
    B,
}

/// One column-major GEMM `C[m×n] = op(A)[m×k] · op(B)[k×n]`, arguments as
/// `cublasGemmEx` takes them; offsets and leading dimensions in elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ColGemm {
    pub trans_a: bool,
    pub trans_b: bool,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub a: Src,
    pub a_off: usize,
    pub lda: usize,
    pub b: Src,
    pub b_off: usize,
    pub ldb: usize,
    pub c_off: usize,
    pub ldc: usize,
}

impl ColGemm {
    /// One past the last element of `A` this call reads.
    pub fn a_end(&self) -> usize {
        let (r, c) = if self.trans_a {
            (self.k, self.m)
        } else {
            (self.m, self.k)
        };
        self.a_off + (c - 1) * self.lda + r
    }
    /// One past the last element of `B` this call reads.
    pub fn b_end(&self) -> usize {
        let (r, c) = if self.trans_b {
            (self.n, self.k)
        } else {
            (self.k, self.n)
        };
        self.b_off + (c - 1) * self.ldb + r
    }
    /// One past the last element of `C` this call writes.
    pub fn c_end(&self) -> usize {
        self.c_off + (self.n - 1) * self.ldc + self.m
    }
}

/// The calls and zero fills that compute one request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub gemms: Vec<ColGemm>,
    /// Output element ranges to set to zero.
    pub zero: Vec<Range<usize>>,
}

impl Plan {
    /// How many leading elements of operand `src` the GEMMs read (0 if none): what an
    /// f32 operand must have converted to bf16. Rows after the last offset are never
    /// read.
    pub fn extent(&self, src: Src) -> usize {
        self.gemms
            .iter()
            .flat_map(|g| {
                let a = (g.a == src).then(|| g.a_end());
                let b = (g.b == src).then(|| g.b_end());
                a.into_iter().chain(b)
            })
            .max()
            .unwrap_or(0)
    }

    /// The largest `m`, `n`, `k` or leading dimension of any call (for the 32-bit
    /// limits of `cublasGemmEx`).
    pub fn max_dim(&self) -> usize {
        self.gemms
            .iter()
            .flat_map(|g| [g.m, g.n, g.k, g.lda, g.ldb, g.ldc])
            .max()
            .unwrap_or(0)
    }
}

/// Everything a call passes to cuBLAS except its three offsets: calls with the same
/// `Shape` can share one group of `cublasGemmGroupedBatchedEx`, one
/// `cublasGemmBatchedEx` or (offsets in arithmetic progression) one
/// `cublasGemmStridedBatchedEx`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub trans_a: bool,
    pub trans_b: bool,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub a: Src,
    pub lda: usize,
    pub b: Src,
    pub ldb: usize,
    pub ldc: usize,
}

impl ColGemm {
    /// The call without its offsets.
    pub fn shape(&self) -> Shape {
        Shape {
            trans_a: self.trans_a,
            trans_b: self.trans_b,
            m: self.m,
            n: self.n,
            k: self.k,
            a: self.a,
            lda: self.lda,
            b: self.b,
            ldb: self.ldb,
            ldc: self.ldc,
        }
    }

    /// The element offsets `[A, B, C]`.
    pub fn offsets(&self) -> [usize; 3] {
        [self.a_off, self.b_off, self.c_off]
    }
}

/// The calls of a plan that share one [`Shape`] (in a grouped GEMM: the non-empty
/// experts with the same row count).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    pub shape: Shape,
    /// Indices into [`Plan::gemms`], ascending (expert order).
    pub members: Vec<usize>,
}

impl Batch {
    /// The `[A, B, C]` element strides when the members' offsets are arithmetic
    /// progressions (member `i` at `first + i · stride`), so that the batch is one
    /// `cublasGemmStridedBatchedEx`; `None` for fewer than two members or irregular
    /// offsets (e.g. an empty expert between two equal ones: W's offset skips it).
    pub fn strides(&self, gemms: &[ColGemm]) -> Option<[usize; 3]> {
        if self.members.len() < 2 {
            return None;
        }
        let offs = |i: usize| gemms[self.members[i]].offsets();
        let (o0, o1) = (offs(0), offs(1));
        let mut stride = [0usize; 3];
        for t in 0..3 {
            stride[t] = o1[t].checked_sub(o0[t])?;
        }
        for i in 1..self.members.len() {
            let o = offs(i);
            for t in 0..3 {
                if o[t] != o0[t] + i * stride[t] {
                    return None;
                }
            }
        }
        Some(stride)
    }
}

impl Plan {
    /// The calls grouped by [`Shape`], batches in order of their first call, members in
    /// plan (expert) order. Equal-sized experts (the common case) give one batch.
    pub fn batches(&self) -> Vec<Batch> {
        let mut out: Vec<Batch> = Vec::new();
        for (i, g) in self.gemms.iter().enumerate() {
            let s = g.shape();
            match out.iter_mut().find(|b| b.shape == s) {
                Some(b) => b.members.push(i),
                None => out.push(Batch {
                    shape: s,
                    members: vec![i],
                }),
            }
        }
        out
    }

    /// The `[A, B, C]` element offsets of every call, batch after batch: the order of
    /// the pointer arrays of `cublasGemmGroupedBatchedEx` (group `j` = `batches[j]`);
    /// batch `j`'s slice (for `cublasGemmBatchedEx`) starts at the sum of the earlier
    /// batches' sizes.
    pub fn batched_offsets(&self, batches: &[Batch]) -> Vec<[usize; 3]> {
        batches
            .iter()
            .flat_map(|b| b.members.iter().map(|&i| self.gemms[i].offsets()))
            .collect()
    }
}

/// Plan a grouped GEMM (`groups` = each expert's row range, contiguous from 0).
pub fn plan(
    pass: GemmPass,
    layout: WeightLayout,
    rows: usize,
    n: usize,
    k: usize,
    groups: &[Range<usize>],
) -> Plan {
    let mut p = Plan::default();
    // Saturating: with no experts the weights may be [0, N, K] with N·K past usize; N·K
    // is only used when an expert exists (then it is a factor of a tensor size).
    let nk = n.saturating_mul(k);
    match pass {
        GemmPass::Forward | GemmPass::Dgrad => {
            let fwd = pass == GemmPass::Forward;
            // q = output row length, red = reduction length
            let (q, red) = if fwd { (n, k) } else { (k, n) };
            if rows * q == 0 {
                return p;
            }
            if red == 0 {
                p.zero.push(0..rows * q);
                return p;
            }
            // W as cuBLAS's A: forward Nk / dgrad Kn read the stored matrix transposed.
            let (trans_a, lda) = match (fwd, layout) {
                (true, WeightLayout::Nk) => (true, k),
                (true, WeightLayout::Kn) => (false, n),
                (false, WeightLayout::Nk) => (false, k),
                (false, WeightLayout::Kn) => (true, n),
            };
            for (e, g) in groups.iter().enumerate() {
                if g.is_empty() {
                    continue;
                }
                p.gemms.push(ColGemm {
                    trans_a,
                    trans_b: false,
                    m: q,
                    n: g.len(),
                    k: red,
                    a: Src::B,
                    a_off: e * nk,
                    lda,
                    b: Src::A,
                    b_off: g.start * red,
                    ldb: red,
                    c_off: g.start * q,
                    ldc: q,
                });
            }
            let used = groups.last().map_or(0, |g| g.end);
            if used < rows {
                p.zero.push(used * q..rows * q);
            }
        }
        GemmPass::Wgrad => {
            if nk == 0 {
                return p;
            }
            for (e, g) in groups.iter().enumerate() {
                if g.is_empty() {
                    p.zero.push(e * nk..(e + 1) * nk);
                    continue;
                }
                let (dy, x) = (g.start * n, g.start * k);
                p.gemms.push(match layout {
                    // dW_e [N,K] = dY_eᵀ·X_e: column-major [K×N] = X_eᵀ·dY_e.
                    WeightLayout::Nk => ColGemm {
                        trans_a: false,
                        trans_b: true,
                        m: k,
                        n,
                        k: g.len(),
                        a: Src::B,
                        a_off: x,
                        lda: k,
                        b: Src::A,
                        b_off: dy,
                        ldb: n,
                        c_off: e * nk,
                        ldc: k,
                    },
                    // dW_e stored [K,N] = X_eᵀ·dY_e: column-major [N×K] = dY_eᵀ·X_e.
                    WeightLayout::Kn => ColGemm {
                        trans_a: false,
                        trans_b: true,
                        m: n,
                        n: k,
                        k: g.len(),
                        a: Src::A,
                        a_off: dy,
                        lda: n,
                        b: Src::B,
                        b_off: x,
                        ldb: k,
                        c_off: e * nk,
                        ldc: n,
                    },
                });
            }
        }
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use mxhost_plugin_common::dense::DenseMut;
    use mxhost_plugin_common::gemm::{grouped_gemm_f32, GroupedGemm};

    /// cuBLAS semantics, column-major, f64 accumulation:
    /// `C[i + j·ldc] = Σ_l op(A)(i,l) · op(B)(l,j)`.
    fn col_gemm(g: &ColGemm, a: &[f32], b: &[f32], c: &mut [f32]) {
        for j in 0..g.n {
            for i in 0..g.m {
                let mut s = 0f64;
                for l in 0..g.k {
                    let av = if g.trans_a {
                        a[g.a_off + l + i * g.lda]
                    } else {
                        a[g.a_off + i + l * g.lda]
                    };
                    let bv = if g.trans_b {
                        b[g.b_off + j + l * g.ldb]
                    } else {
                        b[g.b_off + l + j * g.ldb]
                    };
                    s += av as f64 * bv as f64;
                }
                c[g.c_off + i + j * g.ldc] = s as f32;
            }
        }
    }

    fn values(len: usize, seed: u32) -> Vec<f32> {
        // Small integers: products and sums are exact in f32 and f64 alike.
        let mut x = seed.wrapping_mul(2654435761).wrapping_add(1);
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                (x % 7) as f32 - 3.0
            })
            .collect()
    }

    fn groups_of(offs: &[usize]) -> Vec<Range<usize>> {
        mxhost_plugin_common::args::groups_from_offs(offs)
    }

    /// Execute the plan with the reference GEMM and compare with the CPU driver; also
    /// check bounds and that every output element is written exactly once.
    fn check(
        pass: GemmPass,
        layout: WeightLayout,
        rows: usize,
        n: usize,
        k: usize,
        offs: &[usize],
    ) {
        let groups = groups_of(offs);
        let e = groups.len();
        let (la, lb, lo) = match pass {
            GemmPass::Forward => (rows * k, e * n * k, rows * n),
            GemmPass::Dgrad => (rows * n, e * n * k, rows * k),
            GemmPass::Wgrad => (rows * n, rows * k, e * n * k),
        };
        let (a, b) = (values(la, 1), values(lb, 2));
        let p = plan(pass, layout, rows, n, k, &groups);
        let what = format!("{pass:?} {layout:?} rows {rows} n {n} k {k} offs {offs:?}");

        let mut writes = vec![0u32; lo];
        for g in &p.gemms {
            assert!(
                g.m > 0 && g.n > 0 && g.k > 0,
                "{what}: zero dimension {g:?}"
            );
            // cuBLAS's leading-dimension rules.
            assert!(
                g.lda >= if g.trans_a { g.k } else { g.m },
                "{what}: lda {g:?}"
            );
            assert!(
                g.ldb >= if g.trans_b { g.n } else { g.k },
                "{what}: ldb {g:?}"
            );
            assert!(g.ldc >= g.m, "{what}: ldc {g:?}");
            let len = |s: Src| if s == Src::A { la } else { lb };
            assert!(g.a_end() <= len(g.a), "{what}: A out of bounds {g:?}");
            assert!(g.b_end() <= len(g.b), "{what}: B out of bounds {g:?}");
            assert!(g.c_end() <= lo, "{what}: C out of bounds {g:?}");
            for j in 0..g.n {
                for i in 0..g.m {
                    writes[g.c_off + i + j * g.ldc] += 1;
                }
            }
        }
        for z in &p.zero {
            assert!(z.end <= lo, "{what}: zero range out of bounds");
            for w in &mut writes[z.clone()] {
                *w += 1;
            }
        }
        assert!(
            writes.iter().all(|&w| w == 1),
            "{what}: not every output element written once: {writes:?}"
        );

        let mut got = vec![f32::NAN; lo];
        for g in &p.gemms {
            let (sa, sb) = (
                if g.a == Src::A { &a } else { &b },
                if g.b == Src::A { &a } else { &b },
            );
            col_gemm(g, sa, sb, &mut got);
        }
        for z in &p.zero {
            got[z.clone()].fill(0.0);
        }
        let mut want = vec![f32::NAN; lo];
        let problem = GroupedGemm {
            pass,
            weight_layout: layout,
            groups: &groups,
            rows,
            n,
            k,
        };
        grouped_gemm_f32(&problem, &a, &b, DenseMut::F32(&mut want)).unwrap();
        assert_eq!(got, want, "{what}");

        // The batched forms (what the CUDA backend issues) compute the same.
        check_batches(&p, &what);
        let exec = |g: &ColGemm, c: &mut [f32]| {
            let (sa, sb) = (
                if g.a == Src::A { &a } else { &b },
                if g.b == Src::A { &a } else { &b },
            );
            col_gemm(g, sa, sb, c);
        };
        let zeroed = |mut c: Vec<f32>| {
            for z in &p.zero {
                c[z.clone()].fill(0.0);
            }
            c
        };
        let batches = p.batches();
        // cublasGemmGroupedBatchedEx: one group per batch, pointer arrays flattened.
        let ptrs = p.batched_offsets(&batches);
        let mut got = vec![f32::NAN; lo];
        let mut idx = 0;
        for bt in &batches {
            for _ in &bt.members {
                exec(&with_offsets(bt.shape, ptrs[idx]), &mut got);
                idx += 1;
            }
        }
        assert_eq!(idx, p.gemms.len(), "{what}: pointer array length");
        assert_eq!(zeroed(got), want, "{what}: grouped-batched form");
        // cublasGemmStridedBatchedEx where a batch is strided, cublasGemmBatchedEx (its
        // slice of the pointer arrays) otherwise.
        let mut got = vec![f32::NAN; lo];
        let mut start = 0;
        for bt in &batches {
            let count = bt.members.len();
            match bt.strides(&p.gemms) {
                Some(st) => {
                    let first = p.gemms[bt.members[0]].offsets();
                    for i in 0..count {
                        let o = [0, 1, 2].map(|t| first[t] + i * st[t]);
                        exec(&with_offsets(bt.shape, o), &mut got);
                    }
                }
                None => {
                    for o in &ptrs[start..start + count] {
                        exec(&with_offsets(bt.shape, *o), &mut got);
                    }
                }
            }
            start += count;
        }
        assert_eq!(zeroed(got), want, "{what}: batched/strided form");

        // Operand extents: forward/dgrad read a only up to the last offset; wgrad both.
        let used = offs.last().copied().unwrap_or(0);
        if !p.gemms.is_empty() {
            let (ea, eb) = match pass {
                GemmPass::Forward => (used * k, e * n * k),
                GemmPass::Dgrad => (used * n, e * n * k),
                GemmPass::Wgrad => (used * n, used * k),
            };
            // Trailing empty experts' weights are not read.
            assert!(
                p.extent(Src::A) <= ea && p.extent(Src::B) <= eb,
                "{what}: extents"
            );
            assert_eq!(p.extent(Src::A), ea, "{what}: extent of a");
        }
    }

    fn with_offsets(s: Shape, o: [usize; 3]) -> ColGemm {
        ColGemm {
            trans_a: s.trans_a,
            trans_b: s.trans_b,
            m: s.m,
            n: s.n,
            k: s.k,
            a: s.a,
            a_off: o[0],
            lda: s.lda,
            b: s.b,
            b_off: o[1],
            ldb: s.ldb,
            c_off: o[2],
            ldc: s.ldc,
        }
    }

    /// Grouping invariants: every call in exactly one batch, members ascending and of
    /// the batch's shape, shapes distinct, strides reproduce the offsets.
    fn check_batches(p: &Plan, what: &str) {
        let batches = p.batches();
        let mut seen = vec![0u32; p.gemms.len()];
        for (j, bt) in batches.iter().enumerate() {
            assert!(!bt.members.is_empty(), "{what}: empty batch");
            assert!(
                bt.members.windows(2).all(|w| w[0] < w[1]),
                "{what}: members not ascending {bt:?}"
            );
            for &i in &bt.members {
                seen[i] += 1;
                assert_eq!(p.gemms[i].shape(), bt.shape, "{what}: member shape");
            }
            assert!(
                batches[..j].iter().all(|o| o.shape != bt.shape),
                "{what}: two batches of one shape"
            );
            if let Some(st) = bt.strides(&p.gemms) {
                let first = p.gemms[bt.members[0]].offsets();
                for (i, &m) in bt.members.iter().enumerate() {
                    let want = [0, 1, 2].map(|t| first[t] + i * st[t]);
                    assert_eq!(p.gemms[m].offsets(), want, "{what}: strides");
                }
            }
        }
        assert!(
            seen.iter().all(|&c| c == 1),
            "{what}: calls not batched once"
        );
        let offs = p.batched_offsets(&batches);
        let flat: Vec<usize> = batches.iter().flat_map(|b| b.members.clone()).collect();
        assert_eq!(
            offs,
            flat.iter()
                .map(|&i| p.gemms[i].offsets())
                .collect::<Vec<_>>(),
            "{what}: pointer array order"
        );
    }

    #[test]
    fn plans_match_the_cpu_driver_for_every_pass_and_layout() {
        let cases: &[(usize, usize, usize, &[usize])] = &[
            (7, 5, 3, &[2, 2, 6]), // an empty expert, a padding row
            (6, 4, 6, &[0, 6]),    // leading empty expert, no padding
            (9, 3, 8, &[4, 4, 4]), // trailing empty experts, padding
            (5, 1, 1, &[1, 3]),    // N = K = 1
            (4, 6, 2, &[0, 0]),    // only empty experts: padding/zeros everywhere
            (8, 16, 32, &[3, 8]),
            (3, 2, 5, &[]),                 // no experts at all
            (13, 3, 5, &[3, 6, 9, 12]),     // equal experts: one strided batch
            (13, 3, 5, &[3, 3, 6, 9, 12]),  // equal with an empty one: not strided
            (14, 4, 2, &[2, 5, 7, 10, 14]), // two sizes, interleaved
        ];
        for &(rows, n, k, offs) in cases {
            for pass in [GemmPass::Forward, GemmPass::Dgrad, GemmPass::Wgrad] {
                for layout in [WeightLayout::Nk, WeightLayout::Kn] {
                    check(pass, layout, rows, n, k, offs);
                }
            }
        }
    }

    #[test]
    fn degenerate_shapes_plan_no_gemm() {
        let groups = groups_of(&[2, 4]);
        // forward with K = 0: the whole output is zero, no GEMM.
        let p = plan(GemmPass::Forward, WeightLayout::Nk, 5, 3, 0, &groups);
        assert!(p.gemms.is_empty());
        assert_eq!(p.zero, vec![0..15]);
        // dgrad with N = 0: same.
        let p = plan(GemmPass::Dgrad, WeightLayout::Kn, 5, 0, 3, &groups);
        assert!(p.gemms.is_empty());
        assert_eq!(p.zero, vec![0..15]);
        // empty outputs: nothing at all.
        for pass in [GemmPass::Forward, GemmPass::Dgrad, GemmPass::Wgrad] {
            let p = plan(pass, WeightLayout::Nk, 0, 0, 0, &[]);
            assert_eq!(p, Plan::default());
        }
    }

    #[test]
    fn the_documented_table() {
        // Expert 1 owns rows 2..5 of 6; N = 3, K = 4.
        let groups = groups_of(&[2, 5]);
        let g = |pass, layout| plan(pass, layout, 6, 3, 4, &groups).gemms[1];
        let fnk = g(GemmPass::Forward, WeightLayout::Nk);
        assert_eq!(
            (fnk.trans_a, fnk.trans_b, fnk.m, fnk.n, fnk.k),
            (true, false, 3, 3, 4)
        );
        assert_eq!((fnk.a, fnk.a_off, fnk.lda), (Src::B, 12, 4));
        assert_eq!((fnk.b, fnk.b_off, fnk.ldb), (Src::A, 8, 4));
        assert_eq!((fnk.c_off, fnk.ldc), (6, 3));
        let fkn = g(GemmPass::Forward, WeightLayout::Kn);
        assert_eq!((fkn.trans_a, fkn.lda), (false, 3));
        let dnk = g(GemmPass::Dgrad, WeightLayout::Nk);
        assert_eq!(
            (
                dnk.trans_a,
                dnk.m,
                dnk.n,
                dnk.k,
                dnk.lda,
                dnk.b_off,
                dnk.ldb,
                dnk.c_off,
                dnk.ldc
            ),
            (false, 4, 3, 3, 4, 6, 3, 8, 4)
        );
        let dkn = g(GemmPass::Dgrad, WeightLayout::Kn);
        assert_eq!((dkn.trans_a, dkn.lda), (true, 3));
        let wnk = g(GemmPass::Wgrad, WeightLayout::Nk);
        assert_eq!(
            (
                wnk.trans_a,
                wnk.trans_b,
                wnk.m,
                wnk.n,
                wnk.k,
                wnk.a,
                wnk.a_off,
                wnk.lda
            ),
            (false, true, 4, 3, 3, Src::B, 8, 4)
        );
        assert_eq!(
            (wnk.b, wnk.b_off, wnk.ldb, wnk.c_off, wnk.ldc),
            (Src::A, 6, 3, 12, 4)
        );
        let wkn = g(GemmPass::Wgrad, WeightLayout::Kn);
        assert_eq!(
            (wkn.m, wkn.n, wkn.a, wkn.a_off, wkn.lda, wkn.b, wkn.b_off, wkn.ldb, wkn.ldc),
            (3, 4, Src::A, 6, 3, Src::B, 8, 4, 3)
        );
    }

    #[test]
    fn equal_experts_are_one_strided_batch() {
        // Shape d of the benchmark: 128 experts × 256 rows, K = 2048, N = 768.
        let (e, r, n, k) = (128usize, 256usize, 768usize, 2048usize);
        let offs: Vec<usize> = (1..=e).map(|i| i * r).collect();
        let groups = groups_of(&offs);
        let nk = n * k;
        // (pass, layout) -> (m, n, k, lda, ldb, ldc, strides [A, B, C])
        let cases = [
            (
                GemmPass::Forward,
                WeightLayout::Nk,
                (n, r, k, k, k, n),
                [nk, r * k, r * n],
            ),
            (
                GemmPass::Forward,
                WeightLayout::Kn,
                (n, r, k, n, k, n),
                [nk, r * k, r * n],
            ),
            (
                GemmPass::Dgrad,
                WeightLayout::Nk,
                (k, r, n, k, n, k),
                [nk, r * n, r * k],
            ),
            (
                GemmPass::Dgrad,
                WeightLayout::Kn,
                (k, r, n, n, n, k),
                [nk, r * n, r * k],
            ),
            (
                GemmPass::Wgrad,
                WeightLayout::Nk,
                (k, n, r, k, n, k),
                [r * k, r * n, nk],
            ),
            (
                GemmPass::Wgrad,
                WeightLayout::Kn,
                (n, k, r, n, k, n),
                [r * n, r * k, nk],
            ),
        ];
        for (pass, layout, dims, strides) in cases {
            let p = plan(pass, layout, e * r, n, k, &groups);
            let b = p.batches();
            assert_eq!(b.len(), 1, "{pass:?} {layout:?}");
            assert_eq!(b[0].members, (0..e).collect::<Vec<_>>());
            let s = b[0].shape;
            assert_eq!(
                (s.m, s.n, s.k, s.lda, s.ldb, s.ldc),
                dims,
                "{pass:?} {layout:?}"
            );
            assert_eq!(b[0].strides(&p.gemms), Some(strides), "{pass:?} {layout:?}");
            assert_eq!(p.gemms[0].offsets(), [0, 0, 0]);
            check_batches(&p, "shape d");
        }
    }

    #[test]
    fn experts_are_grouped_by_row_count() {
        // Experts: 2, 3, 0, 2, 3, 2 rows (rows 0..12), then 2 padding rows; N = 4, K = 6.
        let groups = groups_of(&[2, 5, 5, 7, 10, 12]);
        let (n, k) = (4, 6);
        let p = plan(GemmPass::Forward, WeightLayout::Nk, 14, n, k, &groups);
        let b = p.batches();
        // Calls are per non-empty expert: experts 0, 1, 3, 4, 5 = calls 0..5.
        assert_eq!(b.len(), 2);
        assert_eq!((b[0].shape.n, b[0].members.clone()), (2, vec![0, 2, 4]));
        assert_eq!((b[1].shape.n, b[1].members.clone()), (3, vec![1, 3]));
        // Expert 0 at W 0, rows 0; expert 3 at W 3·N·K, rows 5; expert 5 at 5·N·K, row 10.
        let nk = n * k;
        assert_eq!(
            p.batched_offsets(&b),
            vec![
                [0, 0, 0],
                [3 * nk, 5 * k, 5 * n],
                [5 * nk, 10 * k, 10 * n],
                [nk, 2 * k, 2 * n],
                [4 * nk, 7 * k, 7 * n],
            ]
        );
        // Rows 0, 5, 10 are equally spaced, W 0, 3, 5 are not.
        assert_eq!(b[0].strides(&p.gemms), None);
        // Experts 1 and 4: W 1 → 4, rows 2 → 7: a two-member progression.
        assert_eq!(b[1].strides(&p.gemms), Some([3 * nk, 5 * k, 5 * n]));
        assert_eq!((b[0].shape.lda, b[0].shape.ldb, b[0].shape.ldc), (k, k, n));
        assert_eq!(p.zero, vec![12 * n..14 * n]);

        // wgrad: the row counts are the reduction length; the empty expert is zeroed.
        let p = plan(GemmPass::Wgrad, WeightLayout::Kn, 14, n, k, &groups);
        let b = p.batches();
        assert_eq!(b.len(), 2);
        assert_eq!((b[0].shape.k, b[0].members.clone()), (2, vec![0, 2, 4]));
        assert_eq!((b[1].shape.k, b[1].members.clone()), (3, vec![1, 3]));
        assert_eq!(p.zero, vec![2 * nk..3 * nk]);
        // A single call or none: a batch of one, or no batch.
        let p = plan(
            GemmPass::Dgrad,
            WeightLayout::Nk,
            3,
            n,
            k,
            &groups_of(&[0, 3]),
        );
        let b = p.batches();
        assert_eq!((b.len(), b[0].members.clone()), (1, vec![0]));
        assert_eq!(b[0].strides(&p.gemms), None);
        let p = plan(
            GemmPass::Forward,
            WeightLayout::Nk,
            3,
            n,
            k,
            &groups_of(&[0, 0]),
        );
        assert!(p.batches().is_empty());
    }
}
