//! The peer run's figures: bench_peers.py's CSV, read for the × BF16 (torch `_grouped_mm`
//! BF16 times) and % copy (`copy_` bandwidth) columns.

use anyhow::Context;
use std::path::PathBuf;

/// What `mxhost bench` takes from bench_peers.py's CSV.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Peers {
    /// torch `_grouped_mm` BF16 milliseconds per (shape key, pass).
    grouped_mm: Vec<(String, String, f64)>,
    /// The device's `copy_` bandwidth (read + write bytes), GB/s.
    pub(super) copy_gbps: Option<f64>,
}

impl Peers {
    pub(super) fn ms(&self, key: &str, pass: &str) -> Option<f64> {
        self.grouped_mm
            .iter()
            .find(|(k, p, _)| k == key && p == pass)
            .map(|(_, _, ms)| *ms)
    }
}

pub(super) fn peer_times(path: &PathBuf) -> anyhow::Result<Peers> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(parse_peers(&text))
}

/// bench_peers.py's CSV (`shape,method,ms,tflops,note`): the `_grouped_mm` BF16 rows and
/// the `copy_ N GiB (read+write bytes)` row (N GiB copied: 2·N GiB moved in `ms`).
fn parse_peers(text: &str) -> Peers {
    let mut out = Peers::default();
    for line in text.lines().skip(1) {
        let fields = split_csv(line);
        let (Some(shape), Some(method), Some(ms)) = (fields.first(), fields.get(1), fields.get(2))
        else {
            continue;
        };
        // A row bench_peers.py skipped (its time budget ran out) reads `nan`, which parses:
        // no baseline is better than a NaN ratio.
        let Some(ms) = ms
            .parse::<f64>()
            .ok()
            .filter(|ms| ms.is_finite() && *ms > 0.0)
        else {
            continue;
        };
        if let Some(rest) = method.strip_prefix("copy_ ") {
            let gib = rest
                .split_whitespace()
                .next()
                .and_then(|n| n.parse::<f64>().ok());
            if let (Some(gib), true) = (gib, rest.contains("GiB") && ms > 0.0) {
                out.copy_gbps = Some(2.0 * gib * (1u64 << 30) as f64 / (ms / 1e3) / 1e9);
            }
            continue;
        }
        let pass = if method.starts_with("bf16 _grouped_mm fwd+dgrad+wgrad") {
            "step"
        } else if method.starts_with("bf16 _grouped_mm fwd ") {
            "forward"
        } else if method.starts_with("bf16 _grouped_mm dgrad") {
            "dgrad"
        } else if method.starts_with("bf16 _grouped_mm wgrad") {
            "wgrad"
        } else {
            continue;
        };
        let key = shape.split_whitespace().next().unwrap_or("").to_string();
        out.grouped_mm.push((key, pass.to_string(), ms));
    }
    out
}

fn split_csv(line: &str) -> Vec<String> {
    let (mut fields, mut cur, mut quoted) = (Vec::new(), String::new(), false);
    for ch in line.chars() {
        match ch {
            '"' => quoted = !quoted,
            ',' if !quoted => fields.push(std::mem::take(&mut cur)),
            c => cur.push(c),
        }
    }
    fields.push(cur);
    fields
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_csv_gives_grouped_mm_times_and_copy_bandwidth() {
        // as bench_peers.py writes it: fields with commas quoted
        let csv = "shape,method,ms,tflops,note\n\
device,copy_ 2 GiB (read+write bytes),1.0106879472732544,nan,4.25 TB/s\n\
device,dense bf16 matmul 8192^3 (random),1.56,701.3,\n\
a E8 M4096 K4096 N4096,\"bf16 _grouped_mm fwd  (M,K)x(E,K,N)\",1.646,668.1,\n\
a E8 M4096 K4096 N4096,\"bf16 _grouped_mm wgrad 2d-2d -> (E,N,K)\",1.646,668.0,\n\
a E8 M4096 K4096 N4096,bf16 _grouped_mm fwd+dgrad+wgrad (3 GEMMs),5.100,646.8,\n\
b E8 M4096 K2048 N8192,\"bf16 _grouped_mm dgrad (M,N)x(E,N,K)\",1.638,671.3,\n\
b E8 M4096 K2048 N8192,fp8 rowwise _scaled_grouped_mm fwd,1.197,918.9,\n\
c E32 M1024 K2880 N2880,bf16 _grouped_mm fwd+dgrad+wgrad (3 GEMMs),nan,nan,SKIP (time budget)\n";
        let p = parse_peers(csv);
        let copy = p.copy_gbps.expect("copy row");
        // 4 GiB moved in 1.0107 ms
        assert!((copy - 4249.6).abs() < 1.0, "{copy}");
        assert_eq!(p.ms("a", "forward"), Some(1.646));
        assert_eq!(p.ms("a", "wgrad"), Some(1.646));
        assert_eq!(p.ms("a", "step"), Some(5.1));
        assert_eq!(p.ms("b", "dgrad"), Some(1.638));
        assert_eq!(
            p.ms("b", "forward"),
            None,
            "fp8 rows are not the BF16 baseline"
        );
        assert_eq!(p.ms("c", "step"), None, "a skipped row is no baseline");
        assert_eq!(p.grouped_mm.len(), 4);
        // no copy row, no bandwidth
        assert_eq!(parse_peers("shape,method,ms\n").copy_gbps, None);
    }
}
