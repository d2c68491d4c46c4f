//! PNG line plots of the metrics a guest recorded: one chart per metric-name prefix
//! (the part before the first '/'), one line per full name, x = step. `loss/mxfp8` and
//! `loss/bf16` therefore share `loss.png`. The font is bundled (DejaVu Sans) so plots
//! render the same on machines without fontconfig.

use crate::metrics::Point;
use anyhow::Context;
use plotters::prelude::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

static FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");

fn register_font() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // The bundled font is valid; failure would only mean plots without text.
        let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, FONT);
    });
}

/// Series grouped by chart: prefix → (series name → points sorted by step).
fn group(points: &[Point]) -> BTreeMap<String, BTreeMap<String, Vec<(u64, f64)>>> {
    let mut charts: BTreeMap<String, BTreeMap<String, Vec<(u64, f64)>>> = BTreeMap::new();
    for p in points.iter().filter(|p| p.value.is_finite()) {
        let prefix = p.name.split('/').next().unwrap_or(&p.name).to_string();
        charts
            .entry(prefix)
            .or_default()
            .entry(p.name.clone())
            .or_default()
            .push((p.step, p.value));
    }
    for series in charts.values_mut() {
        for pts in series.values_mut() {
            pts.sort_by_key(|&(s, _)| s);
        }
    }
    charts
}

fn file_name(prefix: &str) -> String {
    let clean: String = prefix
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!(
        "{}.png",
        if clean.is_empty() {
            "metric".into()
        } else {
            clean
        }
    )
}

/// Write one PNG per chart with at least two points; returns the files written.
pub fn write_plots(points: &[Point], dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    register_font();
    let mut written = Vec::new();
    for (prefix, series) in group(points) {
        if series.values().map(Vec::len).sum::<usize>() < 2 {
            continue;
        }
        let path = dir.join(file_name(&prefix));
        draw(&prefix, &series, &path).with_context(|| format!("plotting {}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

fn draw(
    title: &str,
    series: &BTreeMap<String, Vec<(u64, f64)>>,
    path: &Path,
) -> anyhow::Result<()> {
    let all = series.values().flatten();
    let (x0, x1) = all
        .clone()
        .fold((u64::MAX, 0), |(a, b), &(s, _)| (a.min(s), b.max(s)));
    let (y0, y1) = all.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &(_, v)| {
        (a.min(v), b.max(v))
    });
    let x1 = x1.max(x0 + 1);
    // Log scale when the values span more than ~20×, as loss curves do: plot log10 of
    // the values on a linear axis and label the ticks with the values themselves.
    let log = y0 > 0.0 && y1 / y0 > 20.0;
    let map = |v: f64| if log { v.log10() } else { v };
    let (lo, hi) = (map(y0), map(y1));
    let pad = ((hi - lo) * 0.05).max(1e-12);
    let root = BitMapBackend::new(path, (960, 600)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 28))
        .margin(16)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d(x0..x1, (lo - pad)..(hi + pad))?;
    let y_label = |v: &f64| {
        if log {
            format!("{:.3e}", 10f64.powf(*v))
        } else {
            format!("{v:.4}")
        }
    };
    chart
        .configure_mesh()
        .x_desc("step")
        .y_desc(if log {
            format!("{title} (log scale)")
        } else {
            title.to_string()
        })
        .y_label_formatter(&y_label)
        .draw()?;
    let palette = [BLUE, RED, GREEN, MAGENTA, CYAN, BLACK];
    for (i, (name, pts)) in series.iter().enumerate() {
        let color = palette[i % palette.len()];
        chart
            .draw_series(LineSeries::new(
                pts.iter().map(|&(s, v)| (s, map(v))),
                color.stroke_width(2),
            ))?
            .label(name.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_png_per_prefix() {
        let dir = std::env::temp_dir().join(format!("mxhost-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut pts = Vec::new();
        for s in 0..50u64 {
            pts.push(Point {
                name: "loss/mxfp8".into(),
                step: s,
                value: 10.0 / (1.0 + s as f64),
            });
            pts.push(Point {
                name: "loss/bf16".into(),
                step: s,
                value: 9.0 / (1.0 + s as f64),
            });
        }
        pts.push(Point {
            name: "single".into(),
            step: 0,
            value: 1.0,
        });
        let files = write_plots(&pts, &dir).unwrap();
        assert_eq!(files, vec![dir.join("loss.png")]);
        if let Ok(keep) = std::env::var("MXHOST_KEEP_PLOT") {
            std::fs::copy(&files[0], keep).unwrap();
        }
        let bytes = std::fs::read(&files[0]).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        std::fs::remove_dir_all(&dir).ok();
    }
}
