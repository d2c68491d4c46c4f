//! The kernels' parameter blocks: `#[repr(C)]` mirrors of the structs of the quantizer
//! (`cuda/include/mx_quant_*.cuh`, `mx_fakequant.cuh`) and of `mx_grouped_gemm.cu`, passed
//! by value as a launch's single parameter, with compile-time checks of their size and
//! field offsets against the CUDA side.

use super::{TILE, TILE_T};

/// `MxQuantParams` of cuda/include/mx_quant_blocks.cuh (natural C layout).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(super) struct QuantParams {
    pub(super) inp: u64,
    pub(super) in_bs: i64,
    pub(super) r: i32,
    pub(super) c: i32,
    pub(super) flags: i32,
    pub(super) mode: i32,
    pub(super) qa: u64,
    pub(super) sa: u64,
    pub(super) qa_bs: i64,
    pub(super) sa_bs: i64,
    pub(super) qt: u64,
    pub(super) st: u64,
    pub(super) qt_bs: i64,
    pub(super) st_bs: i64,
    pub(super) ldt: i32,
    pub(super) ldst: i32,
    pub(super) offs: u64,
    pub(super) e: i32,
    pub(super) grouped_tiles: i32,
    /// TILE, bf16 input, C % 8 == 0: the MX values in bf16 `[R][C]` beside `qa`, or 0.
    pub(super) vals: u64,
}

/// Whether `mx_quantize_t32_*` can take this quantization (cuda/include/mx_quant_tile.cuh,
/// `mx_quant_tile32`): bf16 input, only 32×32 outputs (TILE, TILE_T), rows of whole
/// 16-byte chunks (TMA global stride) and contiguous batches (one map over B·R rows).
/// The input address is checked when the map is encoded.
pub(super) fn t32_takes(in_bf16: bool, p: &QuantParams) -> bool {
    in_bf16
        && p.flags & (TILE | TILE_T) != 0
        && p.flags & !(TILE | TILE_T) == 0
        && p.c % 8 == 0
        && p.in_bs == p.r as i64 * p.c as i64
}

/// `MxQuantTmaParams` of cuda/include/mx_quant_tile.cuh (the parameter of `mx_quantize_t32_*`): the
/// input's tensor map (bf16 [B·R][C], box 128 × 32, no swizzle) and `MxQuantParams`,
/// 64-byte aligned, 256 B.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
pub(super) struct QuantTmaParams {
    pub(super) tm: [u64; 16],
    pub(super) p: QuantParams,
}

const _: () = {
    assert!(std::mem::size_of::<QuantParams>() == 128);
    assert!(std::mem::size_of::<QuantTmaParams>() == 256);
};

/// `MxQuantFlatParams` of cuda/include/mx_quant_flat.cuh (natural C layout, 40 bytes: the CUDA side
/// static_asserts the size).
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct QuantFlatParams {
    pub(super) inp: u64,
    pub(super) q: u64,
    pub(super) s: u64,
    pub(super) nblocks: i64,
    pub(super) mode: i32,
}
const _: () = assert!(std::mem::size_of::<QuantFlatParams>() == 40);

/// `MxQuantFlatValsParams` of cuda/include/mx_quant_flat.cuh: the flat parameters plus where the MX
/// values go in bf16 (`mx_quantize_rows_vals_*`).
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct QuantFlatValsParams {
    pub(super) p: QuantFlatParams,
    pub(super) vals: u64,
}
const _: () = assert!(std::mem::size_of::<QuantFlatValsParams>() == 48);

/// `MxGemmParams` of mx_grouped_gemm.cu (natural C layout).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(super) struct GemmParams {
    pub(super) a: u64,
    pub(super) lda: i64,
    pub(super) b: u64,
    pub(super) ldb: i64,
    pub(super) b_es: i64,
    pub(super) sa: u64,
    pub(super) ldsa: i64,
    pub(super) sb: u64,
    pub(super) ldsb: i64,
    pub(super) sb_es: i64,
    pub(super) out: u64,
    pub(super) ldo: i64,
    pub(super) o_es: i64,
    pub(super) offs: u64,
    pub(super) e: i32,
    pub(super) m: i32,
    pub(super) n: i32,
    pub(super) k: i32,
    pub(super) batched: i32,
    pub(super) out_t: i32,
}

/// `MxGemmTmaParams` of mx_grouped_gemm.cu (the single parameter of `mx_tgemm_*`):
/// two opaque `CUtensorMap`s (128 B each) and `MxGemmParams`, 64-byte aligned, 448 B.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
pub(super) struct TGemmParams {
    pub(super) tm_a: [u64; 16],
    pub(super) tm_b: [u64; 16],
    pub(super) g: GemmParams,
    /// The chained forward's gate (`MxGemmTmaParams::gate`): the re-encoding's two status
    /// words, or 0 (no gate). With one, a per-k32 kernel returns at once when the chained
    /// kernel takes the GEMM ([`super::chain`]).
    pub(super) gate: u64,
    /// The most residuals the chained kernel takes (the gate's limit).
    pub(super) limit: i32,
    /// The fewest (0 for a per-k32 kernel): the 4- and 3-stage chained builds split the
    /// counts between them.
    pub(super) limit_lo: i32,
    pub(super) _pad: [u8; 40],
}

impl TGemmParams {
    pub(super) fn new(tm_a: [u64; 16], tm_b: [u64; 16], g: GemmParams) -> Self {
        TGemmParams {
            tm_a,
            tm_b,
            g,
            gate: 0,
            limit: 0,
            limit_lo: 0,
            _pad: [0; 40],
        }
    }
}

/// `MxReencodeParams` of mx_reencode.cuh (`mx_reencode_*`): row r of the operand (bytes
/// `q[r * k ..]`, scale byte `s[e * ise + (n / rdv) * isc + kb * isr]`, e = r / rpe) to
/// the stage-uniform copy `q2`/`s2` (same layouts), its residuals `res[r * slots ..]`
/// (`cnt[r]` of them) and the status words.
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct ReencodeParams {
    pub(super) q: u64,
    pub(super) s: u64,
    pub(super) q2: u64,
    pub(super) s2: u64,
    pub(super) res: u64,
    pub(super) cnt: u64,
    pub(super) status: u64,
    pub(super) r: i64,
    pub(super) ise: i64,
    pub(super) isr: i64,
    pub(super) isc: i64,
    pub(super) k: i32,
    pub(super) rpe: i32,
    pub(super) rdv: i32,
    pub(super) slots: i32,
}

/// `MxReencodePairParams` of mx_reencode_pair.cuh (`mx_reencode_pair_e4m3`): a weight `W`
/// `[E][r][c]` in 32×32 tiles to both chain forms (its own and its transposed copy's), from
/// one read of its bytes; `mc`/`mct` are the per-row, per-stage residual counts that
/// [`ChainListParams`] turns into lists.
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct ReencodePairParams {
    pub(super) q: u64,
    pub(super) s: u64,
    pub(super) q2: u64,
    pub(super) s2: u64,
    pub(super) qt2: u64,
    pub(super) st2: u64,
    pub(super) bt: u64,
    pub(super) btt: u64,
    pub(super) mc: u64,
    pub(super) mct: u64,
    pub(super) status: u64,
    pub(super) status_t: u64,
    pub(super) r: i32,
    pub(super) c: i32,
}

/// `MxQuantPairParams` of mx_reencode_pair.cuh (`mx_quantize_pair_bf16_e4m3`): the pair kernel
/// quantizing W itself from bf16 at `inp`; W's and Wᵀ's bytes go to `f.btt` and `f.bt`, their
/// tile scales to `s` and `st` (`f.q`, `f.s` unused).
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct QuantPairParams {
    pub(super) f: ReencodePairParams,
    pub(super) inp: u64,
    pub(super) s: u64,
    pub(super) st: u64,
    pub(super) mode: i32,
    pub(super) pad: i32,
}

/// `MxChainListParams` of mx_reencode_pair.cuh (`mx_chain_lists_e4m3`): the residual lists
/// of one copy from its per-stage counts `mc[j * r + row]`, rows and scales as
/// [`ReencodeParams`] describes them.
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct ChainListParams {
    pub(super) q: u64,
    pub(super) s: u64,
    pub(super) mc: u64,
    pub(super) res: u64,
    pub(super) cnt: u64,
    pub(super) status: u64,
    pub(super) r: i64,
    pub(super) ise: i64,
    pub(super) isr: i64,
    pub(super) isc: i64,
    pub(super) k: i32,
    pub(super) rpe: i32,
    pub(super) rdv: i32,
    pub(super) slots: i32,
    /// Rows per warp: set by [`super::chain_form::launch_lists`].
    pub(super) rpw: i32,
    pub(super) pad: i32,
}

/// `MxReencodeBlockParams` of mx_reencode_block.cuh (`mx_reencode_block_*`): an A operand
/// `[r][c]` in 1×32 blocks to its stage-uniform copy `q2`/`s2` and their transposes `at`/`sat`,
/// from one read of its bytes; `mc` the per-row, per-stage residual counts that
/// [`ChainListParams`] turns into lists.
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct ReencodeBlockParams {
    pub(super) q: u64,
    pub(super) s: u64,
    pub(super) q2: u64,
    pub(super) s2: u64,
    pub(super) at: u64,
    pub(super) sat: u64,
    pub(super) mc: u64,
    pub(super) status: u64,
    pub(super) r: i32,
    pub(super) c: i32,
}

/// `MxQuantBlockFormParams` of mx_quant_block_form.cuh (`mx_quantize_rows_form_*`): bf16 rows
/// `[r][c]` to the MX tensor (`q`, `s`) and what [`ReencodeBlockParams`] writes from it, per
/// 128 × 128 block.
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct QuantBlockFormParams {
    pub(super) inp: u64,
    pub(super) q: u64,
    pub(super) s: u64,
    pub(super) q2: u64,
    pub(super) s2: u64,
    pub(super) at: u64,
    pub(super) sat: u64,
    pub(super) mc: u64,
    pub(super) status: u64,
    pub(super) sa: u64,
    pub(super) r: i32,
    pub(super) c: i32,
    pub(super) mode: i32,
    /// The wgrad values (`mx_quantize_rows_form_wv_*` only; 0 for the others).
    pub(super) wv: u64,
    /// The need map `[e][nw]` of the partner weight ([`NeedMapParams`], plugin ABI 1.9): the
    /// 16-row chunks of `at` stored are those the chained GEMM's B-residual corrections read;
    /// 0: all of `at`.
    pub(super) need: u64,
    /// The experts' cumulative end rows (`e` × i32) the need map's experts cover; 0 with `need`.
    pub(super) offs: u64,
    /// Experts of `offs`.
    pub(super) e: i32,
    /// Need words per expert (`ceil(c / 32)`).
    pub(super) nw: i32,
}

/// `MxNeedMapParams` of mx_chain_need.cuh (`mx_chain_need_map`): per expert, the reduction
/// indices where the weight has a B residual, as bits of `need` (`[rows / n][nw]` u32, zeroed
/// first), from its lists (row `e * n + j`: `res[row * slots + i]`, `i < min(cnt[row], slots)`).
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct NeedMapParams {
    pub(super) res: u64,
    pub(super) cnt: u64,
    pub(super) need: u64,
    /// Experts × rows per expert.
    pub(super) rows: i64,
    /// Rows per expert.
    pub(super) n: i32,
    pub(super) slots: i32,
    /// Words per expert of `need`.
    pub(super) nw: i32,
    /// (C's tail padding: the struct is 8-byte aligned)
    pub(super) _pad: i32,
}

/// `MxPlainFromFormParams` of mx_plain_from_form.cuh (`mx_plain_from_form_*`): an A operand's
/// or a weight's MX bytes `q` written back from its chain form where a NOQ build left them out.
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct PlainFromFormParams {
    pub(super) q: u64,
    pub(super) s: u64,
    pub(super) q2: u64,
    /// The stage scales: `s`'s layout for a weight (`rpe` > 0), transposed for X or dY.
    pub(super) s2: u64,
    pub(super) mc: u64,
    /// The GEMM's gate (run only when the chained kernel did not take it), or 0: always.
    pub(super) gate: u64,
    pub(super) limit: i32,
    pub(super) r: i32,
    pub(super) c: i32,
    /// 0: 1×32 blocks along rows (X, dY); else the rows per expert of a weight in 32×32 tiles.
    pub(super) rpe: i32,
    /// `rpe` = 0: the scales transposed, when they were left out too (then written to `s`);
    /// else 0.
    pub(super) st: u64,
}

/// `MxQuantChainParams` of mx_quant_chain.cuh (`mx_quantize_rows_chain_*`): bf16 rows
/// `[r][c]` to the MX tensor (`q`, `s`) and the A-side chain form (`q2`, `s2`, `res`, `cnt`,
/// `status`, `at`, `sat`: the regions of `chain_form::a_layout`).
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct QuantChainParams {
    pub(super) inp: u64,
    pub(super) q: u64,
    pub(super) s: u64,
    pub(super) q2: u64,
    pub(super) s2: u64,
    pub(super) res: u64,
    pub(super) cnt: u64,
    pub(super) status: u64,
    pub(super) at: u64,
    pub(super) sat: u64,
    pub(super) r: i32,
    pub(super) c: i32,
    pub(super) slots: i32,
    pub(super) mode: i32,
}

/// `MxChainFix` of mx_tgemm_chain.cuh: what the chained GEMM's residual corrections read.
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct ChainFix {
    pub(super) res_a: u64,
    pub(super) cnt_a: u64,
    pub(super) res_b: u64,
    pub(super) cnt_b: u64,
    /// B's original bytes transposed, `[E][red][cols]`, and B's original scales.
    pub(super) bt: u64,
    pub(super) sbo: u64,
    /// A' transposed (`[red][ldt]`) and its scales transposed (`[red / 32][ldt]`).
    pub(super) at: u64,
    pub(super) sat: u64,
    pub(super) bt_es: i64,
    pub(super) ise: i64,
    pub(super) isr: i64,
    pub(super) isc: i64,
    pub(super) ldt: i64,
    pub(super) slots: i32,
    /// 3: both corrections (other values are harness diagnostics with wrong results), with
    /// `MXC_BT_REF` and `MXC_BT_FORM` (chain.rs).
    pub(super) terms: i32,
    /// `MXC_BT_FORM`: the partner's residual counts per row `k` and stage `j` at
    /// `mc[j * mc_ss + e * mc_es + k]`.
    pub(super) mc_ss: i64,
    pub(super) mc_es: i64,
}

/// `MxGemmChainParams` of mx_tgemm_chain.cuh (the parameter of `mx_cgemm_*`), 768 B: with
/// the bf16 output's tensor map (box 64 × 64, SWIZZLE_128B) and whether the 3-stage builds
/// store full tiles through it (`o_tma`, `MXHOST_MX_CHAIN_TMA_STORE`).
#[repr(C, align(64))]
#[derive(Clone, Copy)]
pub(super) struct ChainParams {
    pub(super) b: TGemmParams,
    pub(super) f: ChainFix,
    pub(super) tm_o: [u64; 16],
    pub(super) o_tma: i32,
    pub(super) _pad: [u8; 60],
}

/// `MxGemmTmaParamsO` of mx_grouped_gemm.cu (the parameter of the TMA-store `v2t`
/// kernels, [`Unit::tma_store`]): the parameters above, the output's tensor map (bf16,
/// box 64 × 64, SWIZZLE_128B) and whether to use it (`o_tma = 0`: every tile takes the
/// register epilogue), 640 B.
///
/// [`Unit::tma_store`]: crate::kernels::Unit::tma_store
#[repr(C, align(64))]
#[derive(Clone, Copy)]
pub(super) struct TGemmParamsO {
    pub(super) b: TGemmParams,
    pub(super) tm_o: [u64; 16],
    pub(super) o_tma: i32,
    pub(super) _pad: [u8; 60],
}

const _: () = {
    assert!(std::mem::size_of::<TGemmParamsO>() == 640);
    assert!(std::mem::offset_of!(TGemmParamsO, tm_o) == 448);
    assert!(std::mem::offset_of!(TGemmParamsO, o_tma) == 576);
    assert!(std::mem::size_of::<GemmParams>() == 136);
    assert!(std::mem::size_of::<TGemmParams>() == 448);
    assert!(std::mem::align_of::<TGemmParams>() == 64);
    assert!(std::mem::offset_of!(TGemmParams, tm_a) == 0);
    assert!(std::mem::offset_of!(TGemmParams, tm_b) == 128);
    assert!(std::mem::offset_of!(TGemmParams, g) == 256);
    assert!(std::mem::offset_of!(TGemmParams, gate) == 392);
    assert!(std::mem::offset_of!(TGemmParams, limit) == 400);
    assert!(std::mem::offset_of!(TGemmParams, limit_lo) == 404);
    assert!(std::mem::size_of::<ReencodeParams>() == 104);
    assert!(std::mem::size_of::<QuantChainParams>() == 96);
    assert!(std::mem::size_of::<ReencodePairParams>() == 104);
    assert!(std::mem::size_of::<QuantPairParams>() == 136);
    assert!(std::mem::size_of::<ChainListParams>() == 104);
    assert!(std::mem::size_of::<ReencodeBlockParams>() == 72);
    assert!(std::mem::size_of::<QuantBlockFormParams>() == 128);
    assert!(std::mem::offset_of!(QuantBlockFormParams, need) == 104);
    assert!(std::mem::size_of::<NeedMapParams>() == 48);
    assert!(std::mem::size_of::<PlainFromFormParams>() == 72);
    assert!(std::mem::size_of::<ChainFix>() == 128);
    assert!(std::mem::size_of::<ChainParams>() == 768);
    assert!(std::mem::offset_of!(ChainParams, f) == 448);
    assert!(std::mem::offset_of!(ChainParams, tm_o) == 576);
    assert!(std::mem::offset_of!(ChainParams, o_tma) == 704);
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cuda::{COLS, ROWS};

    /// The TMA quantizer takes bf16 32×32 work with 16-byte rows and contiguous batches,
    /// nothing else (the rest goes to `mx_quantize_*`).
    #[test]
    fn t32_takes_only_what_its_tensor_map_describes() {
        let p = |flags, r: i32, c: i32, in_bs: i64| QuantParams {
            flags,
            r,
            c,
            in_bs,
            ..Default::default()
        };
        assert!(t32_takes(true, &p(TILE | TILE_T, 4096, 4096, 4096 * 4096)));
        assert!(t32_takes(true, &p(TILE, 70, 200, 70 * 200)));
        assert!(t32_takes(true, &p(TILE_T, 96, 8, 96 * 8)));
        assert!(
            !t32_takes(false, &p(TILE | TILE_T, 64, 64, 64 * 64)),
            "f32 input"
        );
        assert!(
            !t32_takes(true, &p(TILE | ROWS, 64, 64, 64 * 64)),
            "row-wise outputs"
        );
        assert!(!t32_takes(true, &p(COLS, 64, 64, 64 * 64)), "32x1 columns");
        assert!(!t32_takes(true, &p(0, 64, 64, 64 * 64)), "nothing to write");
        assert!(
            !t32_takes(true, &p(TILE, 64, 76, 64 * 76)),
            "rows not whole 16-byte chunks"
        );
        assert!(
            !t32_takes(true, &p(TILE, 64, 64, 64 * 64 + 8)),
            "batches not contiguous"
        );
    }
}
