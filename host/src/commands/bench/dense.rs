//! The rows for a plugin that does not quantize (the bf16 baseline): dense bf16 GEMMs.

use super::peers::Peers;
use super::timing::{time, Timing};
use super::{Row, Shape};
use crate::device::Device;
use crate::ops::{self, GemmConfig, GemmOperand};
use crate::plugin::LoadedPlugin;
use crate::tensor::Tensor;
use mxhost_plugin_abi::{DType, GemmPass};

/// The rows for a plugin that does not quantize (the bf16 baseline): the three passes
/// and a step on the dense bf16 operands, so its × BF16 column compares it with torch.
pub(super) fn bench_dense(
    plugin: &LoadedPlugin,
    device: Device,
    s: Shape,
    timing: Timing,
    peers: &Peers,
    offs: &[i32],
    (x, w, dy): (&Tensor, &Tensor, &Tensor),
) -> anyhow::Result<Vec<Row>> {
    let rows = s.e * s.m;
    let flops = 2.0 * (rows * s.n * s.k) as f64;
    let label = format!("{} E{} M{} K{} N{}", s.key, s.e, s.m, s.k, s.n);
    let cfg = GemmConfig {
        out_dtype: DType::Bf16,
        ..GemmConfig::default()
    };
    let passes = [
        (GemmPass::Forward, x, w, "forward"),
        (GemmPass::Dgrad, dy, w, "dgrad"),
        (GemmPass::Wgrad, dy, x, "wgrad"),
    ];
    let gemm = |(pass, a, b, _): (GemmPass, &Tensor, &Tensor, &str)| {
        ops::grouped_gemm(
            plugin,
            pass,
            GemmOperand::Dense(a),
            GemmOperand::Dense(b),
            offs,
            &cfg,
        )
        .map(drop)
    };
    let mut out = Vec::new();
    let mut push = |op: String, pass: &str, secs: f64, f: f64| {
        let ratio = peers.ms(s.key, pass).map(|ms| ms / 1e3 / secs);
        out.push(Row {
            shape: label.clone(),
            op,
            us: secs * 1e6,
            tflops: Some(f / secs / 1e12),
            gbps: 0.0,
            pct_copy: None,
            x_bf16: ratio,
        });
    };
    for p in passes {
        let op = format!("{} dense bf16 ({})", p.3, plugin.name);
        if timing.wants(&op) {
            let t = time(device, timing, || gemm(p))?;
            push(op, p.3, t, flops);
        }
    }
    let op = format!("training step: 3 dense GEMMs ({})", plugin.name);
    if timing.wants(&op) {
        let t = time(device, timing, || passes.iter().try_for_each(|&p| gemm(p)))?;
        push(op, "step", t, 3.0 * flops);
    }
    Ok(out)
}
