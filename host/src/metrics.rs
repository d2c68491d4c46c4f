//! What guests report through the `metrics` interface: scalar series (kept in memory,
//! written to `metrics.csv`), progress bars on the terminal, and log lines.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub name: String,
    pub step: u64,
    pub value: f64,
}

/// Collects one guest run's metrics.
pub struct MetricsSink {
    pub points: Vec<Point>,
    bars: HashMap<String, ProgressBar>,
    /// Draw progress bars (off when stderr is not a terminal, e.g. in tests).
    show_progress: bool,
    /// Cap on stored points, so a guest cannot exhaust host memory through metrics.
    max_points: usize,
    pub dropped_points: u64,
}

impl MetricsSink {
    pub fn new(show_progress: bool) -> Self {
        MetricsSink {
            points: Vec::new(),
            bars: HashMap::new(),
            show_progress,
            max_points: 10_000_000,
            dropped_points: 0,
        }
    }

    pub fn record(&mut self, name: String, step: u64, value: f64) {
        if self.points.len() >= self.max_points {
            self.dropped_points += 1;
            return;
        }
        self.points.push(Point { name, step, value });
    }

    pub fn progress(&mut self, done: u64, total: u64, label: String) {
        if !self.show_progress {
            return;
        }
        let bar = self.bars.entry(label.clone()).or_insert_with(|| {
            let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
            bar.set_style(
                ProgressStyle::with_template(
                    "{msg:>14} [{bar:40.cyan/blue}] {pos}/{len} {elapsed_precise} eta {eta}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
            );
            bar.set_message(label);
            bar
        });
        bar.set_length(total);
        bar.set_position(done.min(total));
        if done >= total {
            bar.finish();
        }
    }

    pub fn log(&mut self, level: &str, message: &str) {
        let line = format!("[guest {level}] {message}");
        match self.bars.values().find(|b| !b.is_finished()) {
            Some(bar) => bar.println(line),
            None => eprintln!("{line}"),
        }
    }

    /// Finish any open bars (a guest that stops early must not leave the terminal odd).
    pub fn finish(&mut self) {
        for bar in self.bars.values() {
            if !bar.is_finished() {
                bar.abandon();
            }
        }
    }

    /// Write `name,step,value` rows.
    pub fn write_csv(&self, path: &Path) -> anyhow::Result<()> {
        let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
        writeln!(f, "name,step,value")?;
        for p in &self.points {
            let name = if p.name.contains([',', '"', '\n']) {
                format!("\"{}\"", p.name.replace('"', "\"\""))
            } else {
                p.name.clone()
            };
            writeln!(f, "{name},{},{}", p.step, p.value)?;
        }
        f.flush()?;
        Ok(())
    }
}
