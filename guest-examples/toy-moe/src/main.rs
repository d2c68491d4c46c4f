//! toy-moe: train one MoE layer on a synthetic regression task, twice from one seed —
//! with plugin `mxfp8` and with plugin `bf16`, switched at run time — and compare.
//!
//! The target is a fixed random *teacher* MoE (same shape, other weights, its own
//! router), so the student has to learn a routed nonlinear map, not the identity. The
//! inputs lie on a random 16-dimensional subspace of the hidden space (`--latent`;
//! 0 for full-rank inputs, which a student cannot learn from a few hundred steps of
//! fresh data), and every step draws a fresh batch. Both runs see the same batches and
//! start from the same weights; targets are computed with plugin `bf16`, so they are
//! identical for both runs.
//!
//! Records `loss/mxfp8` and `loss/bf16` per step, and checks: each run's mean loss over
//! the last 20% of steps ≤ half its mean over the first 20%; MXFP8's tail mean ≤ 1.10 ×
//! BF16's. Returns Err when a criterion fails.
//!
//! Args (all optional): `--steps S --tokens T --experts E --k K --hidden H --ffn F
//! --lr LR --seed S --pool P --act swiglu|silu|gelu --opt adamw|sgd --blocks-2d
//! --latent D --target-scale A`. `--pool P` cycles P fixed batches (0, the default: a
//! fresh batch every step). Defaults: 2048 tokens × 200 steps, AdamW lr 2e-3: both runs
//! together take about 75 s of CPU time (86 s wall on a busy 2-core machine).

// `!(v >= gate)` on purpose: a NaN must fail a gate.
#![allow(clippy::neg_cmp_op_on_partial_ord)]

use mxhost_guest::args::flag;
use mxhost_guest::nn::Param;
use mxhost_guest::prelude::*;
use std::time::Instant;

struct ToyMoe;

struct Cfg {
    steps: usize,
    tokens: u32,
    moe: MoeConfig,
    lr: f32,
    seed: u64,
    pool: usize,
    sgd: bool,
    target_scale: f32,
    latent: u32,
}

fn parse(args: &[String]) -> Result<Cfg, String> {
    let act = match flag(args, "--act", "swiglu".to_string())?.as_str() {
        "swiglu" => ExpertActivation::SwiGlu,
        "silu" => ExpertActivation::Silu,
        "gelu" => ExpertActivation::Gelu,
        other => return Err(format!("--act {other}: use swiglu|silu|gelu")),
    };
    let opt = flag(args, "--opt", "adamw".to_string())?;
    let sgd = match opt.as_str() {
        "adamw" => false,
        "sgd" => true,
        other => return Err(format!("--opt {other}: use adamw|sgd")),
    };
    let steps: usize = flag(args, "--steps", 200)?;
    if steps < 5 {
        return Err("--steps must be at least 5 (the criteria compare 20% windows)".into());
    }
    Ok(Cfg {
        steps,
        tokens: flag(args, "--tokens", 2048)?,
        moe: MoeConfig {
            experts: flag(args, "--experts", 8)?,
            hidden: flag(args, "--hidden", 256)?,
            ffn: flag(args, "--ffn", 512)?,
            top_k: flag(args, "--k", 2)?,
            activation: act,
            weight_blocks_2d: args.iter().any(|a| a == "--blocks-2d"),
            ..MoeConfig::default()
        },
        lr: flag(args, "--lr", if sgd { 0.5 } else { 2e-3 })?,
        seed: flag(args, "--seed", 1)?,
        pool: flag(args, "--pool", 0)?,
        sgd,
        target_scale: flag(args, "--target-scale", 1.0)?,
        latent: flag(args, "--latent", 16)?,
    })
}

/// Batches: inputs drawn by the host, targets from the teacher under plugin `bf16`.
struct Data {
    teacher: MoeLayer,
    tokens: u32,
    hidden: u32,
    seed: u64,
    target_scale: f32,
    /// `[latent, hidden]`: inputs lie on a random `latent`-dimensional subspace.
    projection: Option<Tensor>,
    latent: u32,
    pool: Vec<(Tensor, Tensor)>,
}

impl Data {
    fn new(cfg: &Cfg) -> Result<Data, String> {
        let mut d = Data {
            teacher: MoeLayer::new(cfg.moe, cfg.seed.wrapping_add(1000))?,
            tokens: cfg.tokens,
            hidden: cfg.moe.hidden,
            seed: cfg.seed.wrapping_mul(7919).wrapping_add(17),
            target_scale: cfg.target_scale,
            projection: None,
            latent: cfg.latent,
            pool: Vec::new(),
        };
        if cfg.latent > 0 {
            let std = 1.0 / (cfg.latent as f32).sqrt();
            d.projection = Some(Tensor::randn(
                &[cfg.latent, cfg.moe.hidden],
                Dtype::F32,
                cfg.seed.wrapping_add(2000),
                0.0,
                std,
            )?);
        }
        for i in 0..cfg.pool {
            let b = d.make(i)?;
            d.pool.push(b);
        }
        Ok(d)
    }
    fn make(&mut self, i: usize) -> Result<(Tensor, Tensor), String> {
        let seed = self.seed.wrapping_add(i as u64);
        let x = match &self.projection {
            Some(p) => ops::matmul(&Tensor::randn_f32(&[self.tokens, self.latent], seed)?, p)?,
            None => Tensor::randn_f32(&[self.tokens, self.hidden], seed)?,
        };
        let active = plugin::active();
        plugin::select("bf16")?;
        let t = self.teacher.forward(&x);
        plugin::select(&active)?;
        let t = ops::scale(self.target_scale, &t?)?;
        Ok((x, t))
    }
    fn with_batch<T>(
        &mut self,
        step: usize,
        f: impl FnOnce(&Tensor, &Tensor) -> Result<T, String>,
    ) -> Result<T, String> {
        if self.pool.is_empty() {
            let (x, t) = self.make(step)?;
            f(&x, &t)
        } else {
            let (x, t) = &self.pool[step % self.pool.len()];
            f(x, t)
        }
    }
}

enum Opt {
    AdamW(AdamW),
    Sgd(Sgd),
}

impl Opt {
    fn step(&mut self, p: Vec<Param<'_>>) -> Result<(), String> {
        match self {
            Opt::AdamW(o) => o.step(p)?,
            Opt::Sgd(o) => o.step(p)?,
        }
        Ok(())
    }
}

struct RunResult {
    plugin: String,
    losses: Vec<f64>,
    seconds: f64,
    max_drop: u32,
}

/// One training run: the page of PyTorch.
fn train(name: &str, cfg: &Cfg, data: &mut Data) -> Result<RunResult, String> {
    plugin::select(name)?;
    let mut moe = MoeLayer::new(cfg.moe, cfg.seed)?;
    moe.input_grad = false; // a first layer: no ∂L/∂x
    let mut opt = if cfg.sgd {
        Opt::Sgd(Sgd::new(cfg.lr))
    } else {
        Opt::AdamW(AdamW::new(cfg.lr))
    };
    let start = Instant::now();
    let mut losses = Vec::with_capacity(cfg.steps);
    let mut max_drop = 0;
    for step in 0..cfg.steps {
        let loss = data.with_batch(step, |x, target| {
            let y = moe.forward(x)?;
            let (loss, dy) = ops::mse_loss(&y, target)?;
            moe.backward(&dy)?;
            Ok(loss)
        })?;
        opt.step(moe.parameters())?;
        if !loss.is_finite() {
            return Err(format!("{name}: loss is {loss} at step {step}"));
        }
        max_drop = max_drop.max(moe.last_dropped);
        metric(&format!("loss/{name}"), step as u64, loss);
        progress(step as u64 + 1, cfg.steps as u64, &format!("train {name}"));
        losses.push(loss);
    }
    Ok(RunResult {
        plugin: name.to_string(),
        losses,
        seconds: start.elapsed().as_secs_f64(),
        max_drop,
    })
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

/// Means of the first and last 20% of a series (at least one point each).
fn windows(v: &[f64]) -> (f64, f64) {
    let w = (v.len() / 5).max(1);
    (mean(&v[..w]), mean(&v[v.len() - w..]))
}

impl Experiment for ToyMoe {
    fn run(args: Vec<String>) -> Result<String, String> {
        let cfg = parse(&args)?;
        let m = cfg.moe;
        println!(
            "toy-moe: {} experts, top-{}, hidden {}, FFN {} ({:?}), {} tokens/step, {} steps, {} lr {}, seed {}, {}",
            m.experts,
            m.top_k,
            m.hidden,
            m.ffn,
            m.activation,
            cfg.tokens,
            cfg.steps,
            if cfg.sgd { "SGD" } else { "AdamW" },
            cfg.lr,
            cfg.seed,
            if cfg.pool == 0 {
                "a fresh batch per step".to_string()
            } else {
                format!("{} batches cycled", cfg.pool)
            }
        );
        let t0 = Instant::now();
        let mut data = Data::new(&cfg)?;
        let data_s = t0.elapsed().as_secs_f64();
        let runs = [
            train("mxfp8", &cfg, &mut data)?,
            train("bf16", &cfg, &mut data)?,
        ];
        plugin::select("mxfp8")?;

        println!(
            "{:<7} {:>10} {:>10} {:>10} {:>10} {:>9} {:>8}",
            "plugin", "first", "last", "first-20%", "last-20%", "tail/head", "time"
        );
        let mut failures = Vec::new();
        let mut tails = Vec::new();
        for r in &runs {
            let (head, tail) = windows(&r.losses);
            println!(
                "{:<7} {:>10.5} {:>10.5} {:>10.5} {:>10.5} {:>9.3} {:>7.1}s",
                r.plugin,
                r.losses[0],
                r.losses[r.losses.len() - 1],
                head,
                tail,
                tail / head,
                r.seconds
            );
            if r.max_drop > 0 {
                println!(
                    "  ({} dropped (token, choice) pairs at most per step)",
                    r.max_drop
                );
            }
            if !(tail <= 0.5 * head) {
                failures.push(format!(
                    "{}: last-20% mean {tail:.5} > half the first-20% mean {head:.5}",
                    r.plugin
                ));
            }
            tails.push(tail);
        }
        let ratio = tails[0] / tails[1];
        let ok = ratio <= 1.10;
        println!("tail-mean ratio MXFP8/BF16: {ratio:.4}");
        println!(
            "criteria: last-20% ≤ 0.5 × first-20% (mxfp8 {}, bf16 {}); MXFP8 tail ≤ 1.10 × BF16 tail ({})",
            pass(tails[0] <= 0.5 * windows(&runs[0].losses).0),
            pass(tails[1] <= 0.5 * windows(&runs[1].losses).0),
            pass(ok)
        );
        println!(
            "time: data {data_s:.1}s, mxfp8 {:.1}s, bf16 {:.1}s",
            runs[0].seconds, runs[1].seconds
        );
        if !ok {
            failures.push(format!("MXFP8/BF16 tail-mean ratio {ratio:.4} > 1.10"));
        }
        if failures.is_empty() {
            Ok(format!(
                "toy-moe: PASS (MXFP8/BF16 tail ratio {ratio:.4}, both losses fell below half)"
            ))
        } else {
            Err(format!("toy-moe criteria failed: {}", failures.join("; ")))
        }
    }
}

fn pass(ok: bool) -> &'static str {
    if ok {
        "pass"
    } else {
        "FAIL"
    }
}

mxhost_guest::export_experiment!(ToyMoe);

fn main() {}
