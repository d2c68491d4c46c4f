//! The verdicts: `compare` measures the GPU result against the CPU one (max rel, SNR,
//! NaN positions), `differing` counts bytes (or bf16 values) that differ; `Ctx::push` records
//! each check as a `Row` and prints its line.

use super::Ctx;
use crate::error::OpResult;
use std::time::Instant;

pub(super) struct Row {
    pub(super) check: String,
    pub(super) case: String,
    pub(super) ok: bool,
    pub(super) max_rel: Option<f64>,
    pub(super) snr: Option<f64>,
    pub(super) note: String,
    pub(super) ms: f64,
}

/// Elements whose bytes differ (bf16 pairs when `bf16`, NaN payloads aside).
pub(super) fn differing(a: &[u8], b: &[u8], bf16: bool) -> usize {
    let len = a.len().abs_diff(b.len());
    if !bf16 {
        return len + a.iter().zip(b).filter(|(x, y)| x != y).count();
    }
    let is_nan = |p: &[u8]| u16::from_le_bytes([p[0], p[1]]) & 0x7FFF > 0x7F80;
    len + a
        .chunks(2)
        .zip(b.chunks(2))
        .filter(|(x, y)| x != y && !(is_nan(x) && is_nan(y)))
        .count()
}

/// Compare two f32 vectors: (max rel, snr, nan positions equal).
pub(super) fn compare(gpu: &[f32], cpu: &[f32]) -> (f64, f64, bool) {
    let mut nan_ok = true;
    let (mut num, mut den, mut maxd, mut maxr) = (0f64, 0f64, 0f64, 0f64);
    for (&g, &c) in gpu.iter().zip(cpu) {
        if c.is_nan() || g.is_nan() {
            nan_ok &= c.is_nan() && g.is_nan();
            continue;
        }
        let (g, c) = (g as f64, c as f64);
        if !(g.is_finite() && c.is_finite()) {
            nan_ok &= g == c;
            continue;
        }
        num += c * c;
        den += (g - c) * (g - c);
        maxd = maxd.max((g - c).abs());
        maxr = maxr.max(c.abs());
    }
    let rel = if maxr > 0.0 { maxd / maxr } else { maxd };
    let snr = if den == 0.0 {
        f64::INFINITY
    } else {
        10.0 * (num.max(1e-300) / den).log10()
    };
    (rel, snr, nan_ok)
}

impl Ctx {
    pub(super) fn push(
        &mut self,
        check: &str,
        case: String,
        t0: Instant,
        r: OpResult<(bool, Option<f64>, Option<f64>, String)>,
    ) {
        let ms = t0.elapsed().as_secs_f64() * 1e3;
        let (ok, max_rel, snr, note) = match r {
            Ok(v) => v,
            Err(e) => (false, None, None, format!("{:?}: {}", e.kind, e.message)),
        };
        let row = Row {
            check: check.into(),
            case,
            ok,
            max_rel,
            snr,
            note,
            ms,
        };
        eprintln!(
            "  {} {:<20} {:<60} rel {:>9} snr {:>6} {:>7.0} ms  {}",
            if row.ok { "PASS" } else { "FAIL" },
            row.check,
            row.case,
            row.max_rel.map_or("-".into(), |v| format!("{v:.2e}")),
            row.snr.map_or("-".into(), |v| format!("{v:.1}")),
            row.ms,
            row.note
        );
        self.rows.push(row);
    }
}
