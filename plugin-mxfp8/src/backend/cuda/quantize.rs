//! Quantization on the GPU: the `mx_quantize*` launches (tiled, TMA-fed 32×32 and flat
//! 1×32 kernels), byte transposes, E8M0 → FP32 scale tables for the GEMMs, and the
//! quantize request itself: which kernel writes which layout
//! ([`CudaBackend::quantize_bytes`]).

use super::chain::Gate;
use super::device::Call;
use super::gemm::gemm_trace;
use super::params::{t32_takes, QuantFlatParams, QuantFlatValsParams, QuantParams, QuantTmaParams};
use super::tma::{encode_2d_box, tensor_map_available};
use super::{
    arg, cdiv, fmt_code, i32_of, leading, mode_code, ptr, CudaBackend, COLS, GRID_YZ_MAX, ROWS,
    TILE, TILE_T,
};
use crate::kernels::Unit;
use mxhost_plugin_abi::plugin_support::{PluginError, PluginResult};
use mxhost_plugin_abi::DType;
use mxhost_plugin_common::args::{Blocking, QuantizeArgs};

/// What the flat 1×32 kernel writes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum FlatOut {
    /// FP8 bytes and scales (`mx_quantize_rows_*`).
    Quantized,
    /// The MX values in bf16 only, at the bytes' address (`mx_fakequant_rows_*`).
    Values,
    /// Both, the values at this 16-byte aligned address (`mx_quantize_rows_vals_*`).
    QuantizedAndValues(u64),
}

/// The flat 1×32 quantizer's round: 16-byte loads per thread (`MXQF_U`) and its CTA cap
/// per SM (`MXQF_CTAS_PER_SM`), as in cuda/mx_quantize.cu.
const QUANT_FLAT_U: usize = 4;
const QUANT_FLAT_CTAS_PER_SM: usize = 4;

/// Grid of the flat 1×32 quantizer for `chunks` 16-byte chunks and at most `cap` CTAs:
/// the fewest grid-stride rounds the cap allows, then the fewest CTAs that do them, so
/// every CTA does the same number of rounds (a half-full last round idled half the SMs
/// at the end). Same rule as `mx_quant_flat_grid` in bench/launch.cu.
fn quant_flat_grid(chunks: usize, cap: usize) -> usize {
    let per_round = 256 * QUANT_FLAT_U;
    let rounds = cdiv(chunks, per_round * cap.max(1)).max(1);
    cdiv(chunks, per_round * rounds).max(1)
}

/// `MXHOST_MX_T32_ROW_GROUPS=0`: ungrouped 32×32 quantizations with a transposed copy take
/// the tile-loop kernel `mx_quantize_t32_*` instead of the row-group one (`mx_quantize_t32l_*`,
/// the default since docs/perf.md run 87), for A/B runs of `mxhost bench`.
fn t32_row_groups() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| super::env_flag("MXHOST_MX_T32_ROW_GROUPS", true))
}

impl Call {
    pub(super) fn quant(
        &self,
        in_bf16: bool,
        fmt: u8,
        p: &QuantParams,
        gy: usize,
        gz: usize,
    ) -> PluginResult<()> {
        let fmt_name = if fmt == 0 { "e4m3" } else { "e5m2" };
        // 32×32 tiles (and their transposed copy) from bf16 rows TMA can describe: the
        // kernel whose ring is filled by one 2D TMA load per tile (cuda/include/mx_quant_tile.cuh,
        // mx_quant_tile32); same launch contract and bytes. Its tensor map covers all
        // batches as gz·R rows, so the batches must be contiguous.
        let tma_map = (t32_takes(in_bf16, p) && tensor_map_available(self.dev))
            .then(|| {
                let rows = (gz as u64) * p.r as u64;
                encode_2d_box(
                    p.inp,
                    p.c as u64,
                    rows,
                    p.c as u64 * 2,
                    true,
                    [128, 32],
                    false,
                )
                .ok()
            })
            .flatten();
        // Ungrouped with a transposed copy: the row-group kernel (Wᵀ in whole lines, run 87).
        let row_groups =
            tma_map.is_some() && p.offs == 0 && p.flags & TILE_T != 0 && t32_row_groups();
        let name = if row_groups {
            format!("mx_quantize_t32l_bf16_{fmt_name}")
        } else if tma_map.is_some() {
            format!("mx_quantize_t32_bf16_{fmt_name}")
        } else {
            format!(
                "mx_quantize_{}_{fmt_name}",
                if in_bf16 { "bf16" } else { "f32" }
            )
        };
        let gx = cdiv(p.c as usize, 128);
        // `gy` = row tiles T; any grid y in 1..=T is valid (cuda/include/mx_quant_tile.cuh "Launch
        // contract"): ~4 tiles per CTA, but at least ~16 CTAs per SM when T allows. 32×32
        // tiles from f32 input take 2 (the register prefetch: 80–82 % of copy bandwidth at 2
        // vs 75–78 % at 4 on the H200, run 9); from bf16 the rings (cp.async in
        // mx_quantize_*, TMA in mx_quantize_t32_*) want tiles to prefetch (runs 36, 40).
        let per_cta = if p.flags & (TILE | TILE_T) != 0 && !in_bf16 {
            2
        } else {
            4
        };
        let mut gy =
            gy.min(cdiv(gy, per_cta).max(cdiv(16 * self.dev.sms as usize, (gx * gz).max(1))));
        // mx_quantize_t32l_* walks row groups of 4 tiles (mx_quant_tile32 LT): grid y counts
        // groups.
        if row_groups {
            gy = gy.min(cdiv(p.r as usize, 128)).max(1);
        }
        // The TMA kernel takes the tensor map in front of the same parameters.
        let tp = tma_map.map(|tm| QuantTmaParams { tm, p: *p });
        let param = match &tp {
            Some(tp) => arg(tp),
            None => arg(p),
        };
        self.launch(
            Unit::Quantize,
            &name,
            (gx, gy, gz),
            (256, 1, 1),
            0,
            &mut [param],
        )
    }

    /// E8M0 bytes → FP32 table (see `mx_scales_to_f32`) in this call's scratch; returns
    /// the table.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn scales_f32(
        &mut self,
        s: u64,
        ise: i64,
        (isr, rdv): (i64, i32),
        isc: i64,
        r: usize,
        c: usize,
        rp: usize,
        cp: usize,
        batch: usize,
        stage_major: bool,
    ) -> PluginResult<u64> {
        let out = self.alloc(Self::scales_f32_bytes(rp, cp, batch))?;
        let dims = (r, c, rp, cp, batch);
        self.scales_f32_into(out, s, ise, (isr, rdv), isc, dims, stage_major, None)?;
        Ok(out)
    }

    /// Bytes of a [`Call::scales_f32`] table.
    pub(super) fn scales_f32_bytes(rp: usize, cp: usize, batch: usize) -> usize {
        batch * rp * cp * 4
    }

    /// [`Call::scales_f32`] into `out` ([`Call::scales_f32_bytes`] bytes). With `gate` (the
    /// tables of a per-k32 kernel enqueued beside a chained GEMM, which honours it) the
    /// kernel writes nothing when the chained GEMM takes the output.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn scales_f32_into(
        &self,
        out: u64,
        s: u64,
        ise: i64,
        (isr, rdv): (i64, i32),
        isc: i64,
        (r, c, rp, cp, batch): (usize, usize, usize, usize, usize),
        stage_major: bool,
        gate: Option<Gate>,
    ) -> PluginResult<()> {
        let ose = (rp * cp) as i64;
        let (r, c, rp32, cp32) = (
            i32_of("scale rows", r)?,
            i32_of("scale cols", c)?,
            i32_of("scale rows", rp)?,
            i32_of("scale cols", cp)?,
        );
        let (outv, inv) = (out, s);
        // The stage-major layout has its own kernel (32 × 128 tiles through shared memory):
        // the per-float kernel scatters its stores (run 121). It takes no (osr, ocg).
        let (name, grid, strides) = if stage_major {
            let grid = (cdiv(rp, 32), cdiv(cp, 128), batch);
            ("mx_scales_to_f32_stages", grid, None)
        } else {
            let grid = (cdiv(rp * cp, 256), batch, 1);
            ("mx_scales_to_f32", grid, Some((cp as i64, 4i64)))
        };
        let mut args = vec![
            arg(&inv),
            arg(&ise),
            arg(&isr),
            arg(&isc),
            arg(&outv),
            arg(&ose),
        ];
        if let Some((osr, ocg)) = &strides {
            args.extend([arg(osr), arg(ocg)]);
        }
        let (status, limit) = gate.map_or((0u64, 0i32), |g| (g.status, g.limit));
        args.extend([arg(&r), arg(&c), arg(&rp32), arg(&cp32), arg(&rdv)]);
        args.extend([arg(&status), arg(&limit)]);
        self.launch(Unit::Quantize, name, grid, (256, 1, 1), 0, &mut args)
    }

    /// out[b][c][r] = in[b][r][c] (bytes).
    pub(super) fn transpose(
        &self,
        src: u64,
        dst: u64,
        batch: usize,
        r: usize,
        c: usize,
    ) -> PluginResult<()> {
        let (r32, c32) = (i32_of("rows", r)?, i32_of("cols", c)?);
        self.launch(
            Unit::Aux,
            "mx_transpose_u8",
            (cdiv(c, 128), cdiv(r, 128), batch),
            (256, 1, 1),
            0,
            &mut [arg(&src), arg(&dst), arg(&r32), arg(&c32)],
        )
    }

    /// Ungrouped 1×32 quantization along the last axis of a `[rows, cols]` matrix,
    /// chunked along rows to respect the grid limit.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn quant_rows(
        &self,
        x: u64,
        in_bf16: bool,
        rows: usize,
        cols: usize,
        fmt: u8,
        mode: i32,
        q: u64,
        s: u64,
    ) -> PluginResult<()> {
        let esize = if in_bf16 { 2 } else { 4 };
        // C % 32 == 0: the tensor is one run of whole blocks; the flat kernel reads it in
        // 512-byte warp loads (docs/perf.md run 28). Otherwise the tiled kernel.
        if cols.is_multiple_of(32) && x.is_multiple_of(16) && q.is_multiple_of(8) {
            let nblocks = rows * (cols / 32);
            return self.flat_rows(x, in_bf16, nblocks, fmt, mode, (q, s), FlatOut::Quantized);
        }
        let chunk = GRID_YZ_MAX * 32;
        let cb = cdiv(cols, 32);
        let mut r0 = 0;
        while r0 < rows {
            let n = chunk.min(rows - r0);
            let p = QuantParams {
                inp: x + (r0 * cols * esize) as u64,
                r: i32_of("rows", n)?,
                c: i32_of("cols", cols)?,
                flags: ROWS,
                mode,
                qa: q + (r0 * cols) as u64,
                sa: s + (r0 * cb) as u64,
                ..Default::default()
            };
            self.quant(in_bf16, fmt, &p, cdiv(n, 32), 1)?;
            r0 += n;
        }
        Ok(())
    }

    /// The flat 1×32 kernel over `nblocks` 32-element blocks of a row-major tensor whose
    /// last axis is a multiple of 32: `mx_quantize_rows_*` into FP8 `q` and scales `s`,
    /// `mx_fakequant_rows_*` (the same blocks as their MX values in bf16 at `q`), or
    /// `mx_quantize_rows_vals_*` (both), as `what` says.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn flat_rows(
        &self,
        x: u64,
        in_bf16: bool,
        nblocks: usize,
        fmt: u8,
        mode: i32,
        (q, s): (u64, u64),
        what: FlatOut,
    ) -> PluginResult<()> {
        if nblocks == 0 {
            return Ok(());
        }
        let p = QuantFlatParams {
            inp: x,
            q,
            s,
            nblocks: nblocks as i64,
            mode,
        };
        let grid = quant_flat_grid(
            nblocks * if in_bf16 { 4 } else { 8 },
            QUANT_FLAT_CTAS_PER_SM * self.dev.sms as usize,
        );
        let kind = match what {
            FlatOut::Quantized => "quantize_rows",
            FlatOut::Values => "fakequant_rows",
            FlatOut::QuantizedAndValues(_) => "quantize_rows_vals",
        };
        let name = format!(
            "mx_{kind}_{}_{}",
            if in_bf16 { "bf16" } else { "f32" },
            if fmt == 0 { "e4m3" } else { "e5m2" }
        );
        let pv = QuantFlatValsParams {
            p,
            vals: match what {
                FlatOut::QuantizedAndValues(v) => v,
                _ => 0,
            },
        };
        let param = match what {
            FlatOut::QuantizedAndValues(_) => arg(&pv),
            _ => arg(&p),
        };
        self.launch(
            Unit::Quantize,
            &name,
            (grid, 1, 1),
            (256, 1, 1),
            0,
            &mut [param],
        )
    }

    /// `[rows][cols]` dense values → their MX values (1×32 blocks along the last axis) as
    /// bf16 in `out`, in one pass: bit-identical to `quant_rows` then `mx_dequantize`.
    /// Ok(false) when the flat kernel cannot take the tensor (cols % 32 != 0, or a base not
    /// 16-byte aligned); the caller then quantizes and expands in two passes.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn fakequant_rows(
        &self,
        x: u64,
        in_bf16: bool,
        rows: usize,
        cols: usize,
        fmt: u8,
        mode: i32,
        out: u64,
    ) -> PluginResult<bool> {
        if !(cols.is_multiple_of(32) && x.is_multiple_of(16) && out.is_multiple_of(16)) {
            return Ok(false);
        }
        if gemm_trace() {
            eprintln!("mxhost-mxfp8: fake-quantize {rows} x {cols} to bf16 with mx_fakequant_rows (one pass)");
        }
        let nblocks = rows * (cols / 32);
        self.flat_rows(x, in_bf16, nblocks, fmt, mode, (out, 0), FlatOut::Values)?;
        Ok(true)
    }
}

/// A quantize request with what every kernel choice reads from it.
#[derive(Clone, Copy)]
pub(super) struct QuantJob<'a> {
    args: &'a QuantizeArgs,
    pub(super) in_bf16: bool,
    pub(super) fmt: u8,
    pub(super) mode: i32,
    pub(super) rank: usize,
    /// Length of the last axis.
    pub(super) last: usize,
    pub(super) block: Blocking,
}

impl<'a> QuantJob<'a> {
    pub(super) fn new(args: &'a QuantizeArgs) -> PluginResult<Self> {
        let (x, o) = (&args.input, &args.output);
        let block = Blocking::from_abi(o.block)
            .ok_or_else(|| PluginError::invalid("quantize.output: unknown block layout"))?;
        Ok(QuantJob {
            args,
            in_bf16: x.dtype == DType::Bf16,
            fmt: fmt_code(o.format),
            mode: mode_code(o.mode),
            rank: x.shape.len(),
            last: x.shape[x.shape.len() - 1] as usize,
            block,
        })
    }
}

impl CudaBackend {
    /// The FP8 bytes and scales of `args.output` (and `args.transposed`), by layout.
    pub(super) fn quantize_bytes(
        &self,
        call: &mut Call,
        job: &QuantJob<'_>,
        tile_vals: Option<u64>,
    ) -> PluginResult<()> {
        let QuantJob {
            args,
            in_bf16,
            fmt,
            mode,
            rank,
            last,
            block,
        } = *job;
        let (x, o, shape) = (&args.input, &args.output, &args.input.shape);
        let tr = args.transposed.as_ref();
        match block {
            Blocking::Vector { axis } if axis + 1 == rank => {
                call.quant_rows(
                    ptr(x),
                    in_bf16,
                    x.numel / last,
                    last,
                    fmt,
                    mode,
                    ptr(&o.data),
                    ptr(&o.scales),
                )?;
                if let Some(t) = tr {
                    let (batch, r, c) = (leading(shape), shape[rank - 2] as usize, last);
                    call.transpose(ptr(&o.data), ptr(&t.data), batch, r, c)?;
                    call.transpose(ptr(&o.scales), ptr(&t.scales), batch, r, cdiv(c, 32))?;
                }
                Ok(())
            }
            Blocking::Vector { axis } if axis + 2 == rank => {
                // COLS writes data [C][R] and scales [C][RB] per batch; transpose both back.
                let (batch, r, c) = (leading(shape), shape[rank - 2] as usize, last);
                let rb = cdiv(r, 32);
                let (qt, st) = match tr {
                    Some(t) => (ptr(&t.data), ptr(&t.scales)),
                    None => (call.alloc(batch * r * c)?, call.alloc(batch * rb * c)?),
                };
                let p = QuantParams {
                    inp: ptr(x),
                    in_bs: (r * c) as i64,
                    r: i32_of("rows", r)?,
                    c: i32_of("cols", c)?,
                    flags: COLS,
                    mode,
                    qt,
                    st,
                    qt_bs: (c * r) as i64,
                    st_bs: (c * rb) as i64,
                    ldt: i32_of("rows", r)?,
                    ldst: rb as i32,
                    ..Default::default()
                };
                call.quant(in_bf16, fmt, &p, cdiv(r, 32), batch)?;
                call.transpose(qt, ptr(&o.data), batch, c, r)?;
                call.transpose(st, ptr(&o.scales), batch, c, rb)
            }
            Blocking::Tile if rank >= 2 => {
                let (batch, r, c) = (leading(shape), shape[rank - 2] as usize, last);
                let (rb, cb) = (cdiv(r, 32), cdiv(c, 32));
                let mut p = QuantParams {
                    inp: ptr(x),
                    in_bs: (r * c) as i64,
                    r: i32_of("rows", r)?,
                    c: i32_of("cols", c)?,
                    flags: TILE,
                    mode,
                    qa: ptr(&o.data),
                    sa: ptr(&o.scales),
                    qa_bs: (r * c) as i64,
                    sa_bs: (rb * cb) as i64,
                    vals: tile_vals.unwrap_or(0),
                    ..Default::default()
                };
                if let Some(t) = tr {
                    // TILE_T in the same pass: data [C][R], scales [CB][RB] per batch.
                    p.flags |= TILE_T;
                    p.qt = ptr(&t.data);
                    p.st = ptr(&t.scales);
                    p.qt_bs = (r * c) as i64;
                    p.st_bs = (rb * cb) as i64;
                    p.ldt = i32_of("rows", r)?;
                    p.ldst = rb as i32;
                }
                call.quant(in_bf16, fmt, &p, rb, batch)
            }
            other => Err(PluginError::invalid(format!(
                "quantize: block layout {other:?} is invalid for rank {rank}"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The flat quantizer's grid: within the cap, covers every chunk, and no CTA idles a
    /// whole round (all CTAs do the same number of rounds, the last one maybe partial).
    #[test]
    fn quant_flat_grid_is_balanced_and_capped() {
        let per_round = 256 * QUANT_FLAT_U;
        for cap in [1usize, 7, 528] {
            for chunks in [1usize, 1023, 1024, 8_388_608, 540_672 * 15 + 1, 10_000_019] {
                let g = quant_flat_grid(chunks, cap);
                assert!(
                    (1..=cap).contains(&g),
                    "chunks {chunks} cap {cap}: grid {g}"
                );
                let rounds = cdiv(chunks, g * per_round);
                assert!(g * per_round * rounds >= chunks);
                // one CTA fewer would need another round: the grid is the smallest
                assert!(g == 1 || (g - 1) * per_round * rounds < chunks);
                // and no full round is left idle
                assert!(g * per_round * (rounds - 1) < chunks);
            }
        }
        // shape b's X (32768 x 2048 bf16) on 132 SMs x 4: 16 rounds of 512 CTAs, not 15.5 of 528
        assert_eq!(quant_flat_grid(8_388_608, 528), 512);
    }
}
