//! moe-checks: experiment guest for the integration tests. The first argument picks a mode.
//!
//! - `route [--tokens T] [--experts E] [--k K] [--align A] [--cf F] [--no-renorm] [--seed S]`:
//!   routes random logits through `routing.route` (the `--router` guest, or the host's
//!   built-in router), checks the plan's invariants (`topk::check_plan`), that it equals
//!   the SDK's reference top-k exactly, and that dispatch (gather-rows) puts each kept
//!   token in its rows and zeros in padding rows, and combine (scatter-add-rows) brings
//!   each token back once per kept choice. Prints one summary line with a checksum.
//! - `guard [e5m2]`: runs accepted and rejected requests under `--guard alto-guard.wasm`
//!   (or `alto-guard-e5m2.wasm` with `e5m2`) and checks each outcome; prints
//!   `case | accepted` or `case | rejected-by-guard | message` lines.
//! - `unguarded-e5m2`: one E5M2 forward pass (accepted when no guard rejects it).
//! - `grad [--act swiglu|silu|gelu] [--no-renorm]`: checks `MoeLayer::backward` against
//!   central differences of the loss along each parameter's gradient direction (router,
//!   up, down, and the input), on plugin `bf16`; prints `grad <param> analytic numeric ratio`.

use mxhost_guest::args::flag;
use mxhost_guest::prelude::*;
use mxhost_guest::{gemm::*, kind_name, Error, ErrorKind, RouteRequest};

struct MoeChecks;

fn route_mode(args: &[String]) -> Result<String, String> {
    let tokens: u32 = flag(args, "--tokens", 1000)?;
    let experts: u32 = flag(args, "--experts", 8)?;
    let k: u32 = flag(args, "--k", 2)?;
    let align: u32 = flag(args, "--align", topk::DEFAULT_ALIGN)?;
    let seed: u64 = flag(args, "--seed", 1)?;
    let cf: Option<f32> = match flag(args, "--cf", 0.0f32)? {
        v if v > 0.0 => Some(v),
        _ => None,
    };
    let renormalize = !args.iter().any(|a| a == "--no-renorm");
    let hidden = 64u32;

    let logits = Tensor::randn(&[tokens, experts], Dtype::F32, seed, 0.0, 1.5)?.to_f32()?;
    let req = RouteRequest {
        tokens,
        experts,
        top_k: k,
        logits: logits.clone(),
        renormalize,
        align,
        capacity_factor: cf,
    };
    let plan = mxhost_guest::route(&req)?;
    let treq = topk::Request {
        tokens,
        experts,
        top_k: k,
        logits: &logits,
        renormalize,
        align,
        capacity_factor: cf,
    };
    let got = topk::Plan {
        source_token: plan.source_token.clone(),
        gate_weight: plan.gate_weight.clone(),
        offs: plan.offs.clone(),
        load: plan.load.clone(),
        dropped: plan.dropped,
    };
    topk::check_plan(&treq, &got).map_err(|m| format!("routing invariant broken: {m}"))?;
    if topk::route(&treq)? != got {
        return Err("the plan differs from the SDK's reference top-k router".into());
    }

    // Dispatch and combine through the host.
    let x = Tensor::randn(&[tokens, hidden], Dtype::F32, seed + 1, 0.0, 1.0)?;
    let xv = x.to_f32()?;
    let xd = ops::gather_rows(&x, &plan.source_token)?;
    let xdv = xd.to_f32()?;
    let h = hidden as usize;
    for (r, &s) in plan.source_token.iter().enumerate() {
        let row = &xdv[r * h..(r + 1) * h];
        if s < 0 {
            if row.iter().any(|&v| v != 0.0) {
                return Err(format!("padding row {r} is not zero after dispatch"));
            }
        } else if row != &xv[s as usize * h..(s as usize + 1) * h] {
            return Err(format!("row {r} does not hold token {s} after dispatch"));
        }
    }
    let back = ops::scatter_add_rows(&xd, &plan.source_token, None, tokens)?.to_f32()?;
    let mut count = vec![0f32; tokens as usize];
    for &s in plan.source_token.iter().filter(|&&s| s >= 0) {
        count[s as usize] += 1.0;
    }
    for t in 0..tokens as usize {
        for c in 0..h {
            let want = count[t] * xv[t * h + c];
            if (back[t * h + c] - want).abs() > 1e-5 * want.abs().max(1.0) {
                return Err(format!(
                    "combine: token {t} is not its {} kept copies",
                    count[t]
                ));
            }
        }
    }

    let mut hash: u64 = 0xcbf29ce484222325;
    for v in plan
        .source_token
        .iter()
        .map(|&s| s as u32)
        .chain(plan.gate_weight.iter().map(|g| g.to_bits()))
        .chain(plan.offs.iter().map(|&o| o as u32))
    {
        hash = (hash ^ v as u64).wrapping_mul(0x100000001b3);
    }
    let line = format!(
        "route: tokens {tokens} experts {experts} k {k} align {align} cf {cf:?} renorm {renormalize} | rows {} | offs {:?} | load {:?} | dropped {} | checksum {hash:016x}",
        plan.source_token.len(),
        plan.offs,
        plan.load,
        plan.dropped
    );
    println!("{line}");
    Ok("routing invariants hold: each kept token once per choice, offs consistent and aligned, padding rows zero, drops counted".into())
}

enum Want {
    Accept,
    Reject(&'static str),
}

fn outcome(
    case: &str,
    want: Want,
    r: Result<(), Error>,
    lines: &mut Vec<String>,
    bad: &mut Vec<String>,
) {
    match (&want, r) {
        (Want::Accept, Ok(())) => lines.push(format!("{case} | accepted")),
        (Want::Reject(rule), Err(e))
            if e.kind == ErrorKind::RejectedByGuard && e.message.contains(&format!("`{rule}`")) =>
        {
            lines.push(format!("{case} | {} | {}", kind_name(e.kind), e.message))
        }
        (_, Ok(())) => bad.push(format!("{case}: accepted, expected a rejection")),
        (_, Err(e)) => bad.push(format!("{case}: got {}: {}", kind_name(e.kind), e.message)),
    }
}

fn guard_mode(e5m2_allowed: bool) -> Result<String, String> {
    let (mut lines, mut bad) = (Vec::new(), Vec::new());
    plugin::select("mxfp8")?;
    let x = Tensor::randn_f32(&[64, 64], 1)?;
    let w = Tensor::randn(&[2, 32, 64], Dtype::F32, 2, 0.0, 0.1)?;
    let dy = Tensor::randn_f32(&[64, 32], 3)?;
    let o = options();
    let aligned = [32, 64];
    let fwd = |offs: &[i32], o: &GemmOptions| {
        forward(Operand::Dense(&x), Operand::Dense(&w), offs, o).map(|_| ())
    };
    let e5: fn() -> Want = if e5m2_allowed {
        || Want::Accept
    } else {
        || Want::Reject("element-format")
    };
    let e5m2_opts = GemmOptions {
        format: ElementFormat::E5m2,
        ..o
    };

    outcome(
        "forward e4m3 aligned",
        Want::Accept,
        fwd(&aligned, &o),
        &mut lines,
        &mut bad,
    );
    outcome(
        "dgrad e4m3 aligned",
        Want::Accept,
        dgrad(Operand::Dense(&dy), Operand::Dense(&w), &aligned, &o).map(|_| ()),
        &mut lines,
        &mut bad,
    );
    outcome(
        "wgrad e4m3 aligned",
        Want::Accept,
        wgrad(Operand::Dense(&dy), Operand::Dense(&x), &aligned, &o).map(|_| ()),
        &mut lines,
        &mut bad,
    );
    outcome(
        "forward 32x32 weights",
        Want::Accept,
        fwd(
            &aligned,
            &GemmOptions {
                weight_blocks_2d: true,
                ..o
            },
        ),
        &mut lines,
        &mut bad,
    );
    outcome(
        "forward empty expert",
        Want::Accept,
        fwd(&[0, 64], &o),
        &mut lines,
        &mut bad,
    );
    let q4 = quantize(&x, mx_spec(ElementFormat::E4m3, BlockLayout::Along(1)));
    outcome(
        "quantize e4m3",
        Want::Accept,
        q4.as_ref().map(|_| ()).map_err(|e| e.clone()),
        &mut lines,
        &mut bad,
    );
    if let Ok(qx) = &q4 {
        outcome(
            "forward pre-quantized e4m3",
            Want::Accept,
            forward(Operand::Quantized(qx), Operand::Dense(&w), &aligned, &o).map(|_| ()),
            &mut lines,
            &mut bad,
        );
    }
    let q5 = quantize(&x, mx_spec(ElementFormat::E5m2, BlockLayout::Along(1)));
    outcome(
        "quantize e5m2",
        e5(),
        q5.as_ref().map(|_| ()).map_err(|e| e.clone()),
        &mut lines,
        &mut bad,
    );
    if let Ok(qx) = &q5 {
        outcome(
            "forward pre-quantized e5m2",
            e5(),
            forward(Operand::Quantized(qx), Operand::Dense(&w), &aligned, &o).map(|_| ()),
            &mut lines,
            &mut bad,
        );
    }
    outcome(
        "forward e5m2 in-call",
        e5(),
        fwd(&aligned, &e5m2_opts),
        &mut lines,
        &mut bad,
    );
    outcome(
        "wgrad e5m2 in-call",
        e5(),
        wgrad(
            Operand::Dense(&dy),
            Operand::Dense(&x),
            &aligned,
            &e5m2_opts,
        )
        .map(|_| ()),
        &mut lines,
        &mut bad,
    );
    outcome(
        "forward hadamard",
        Want::Reject("no-hadamard"),
        fwd(
            &aligned,
            &GemmOptions {
                hadamard: true,
                ..o
            },
        ),
        &mut lines,
        &mut bad,
    );
    outcome(
        "forward dge",
        Want::Reject("no-dge"),
        fwd(&aligned, &GemmOptions { dge: true, ..o }),
        &mut lines,
        &mut bad,
    );
    outcome(
        "dgrad bias",
        Want::Reject("no-bias"),
        dgrad(
            Operand::Dense(&dy),
            Operand::Dense(&w),
            &aligned,
            &GemmOptions { bias: true, ..o },
        )
        .map(|_| ()),
        &mut lines,
        &mut bad,
    );
    outcome(
        "forward unaligned offs",
        Want::Reject("group-alignment"),
        fwd(&[30, 64], &o),
        &mut lines,
        &mut bad,
    );
    outcome(
        "wgrad unaligned offs",
        Want::Reject("group-alignment"),
        wgrad(Operand::Dense(&dy), Operand::Dense(&x), &[40, 60], &o).map(|_| ()),
        &mut lines,
        &mut bad,
    );
    let x48 = Tensor::randn_f32(&[64, 48], 4)?;
    let w48 = Tensor::randn_f32(&[2, 32, 48], 5)?;
    outcome(
        "forward K=48",
        Want::Reject("k-multiple-of-32"),
        forward(Operand::Dense(&x48), Operand::Dense(&w48), &aligned, &o).map(|_| ()),
        &mut lines,
        &mut bad,
    );
    let dy48 = Tensor::randn_f32(&[64, 48], 6)?;
    let w_n48 = Tensor::randn_f32(&[2, 48, 64], 7)?;
    outcome(
        "dgrad N=48",
        Want::Reject("k-multiple-of-32"),
        dgrad(Operand::Dense(&dy48), Operand::Dense(&w_n48), &aligned, &o).map(|_| ()),
        &mut lines,
        &mut bad,
    );
    // BF16 has no MX blocks: alignment and K rules do not apply, the knobs still do.
    plugin::select("bf16")?;
    outcome(
        "bf16 forward unaligned offs",
        Want::Accept,
        fwd(&[30, 64], &o),
        &mut lines,
        &mut bad,
    );
    outcome(
        "bf16 forward K=48",
        Want::Accept,
        forward(Operand::Dense(&x48), Operand::Dense(&w48), &[7, 64], &o).map(|_| ()),
        &mut lines,
        &mut bad,
    );
    outcome(
        "bf16 forward bias",
        Want::Reject("no-bias"),
        fwd(&aligned, &GemmOptions { bias: true, ..o }),
        &mut lines,
        &mut bad,
    );
    plugin::select("mxfp8")?;
    for l in &lines {
        println!("{l}");
    }
    if bad.is_empty() {
        Ok(format!("guard: {} cases as expected", lines.len()))
    } else {
        Err(format!("guard cases failed: {}", bad.join("; ")))
    }
}

fn loss_of(moe: &mut MoeLayer, x: &Tensor, target: &Tensor) -> Result<f64, String> {
    let y = moe.forward(x)?;
    Ok(ops::mse_loss(&y, target)?.0)
}

/// `(analytic, numeric)` directional derivative along `-g / |g|` of parameter `which`.
fn directional(
    moe: &mut MoeLayer,
    which: usize,
    g: &Tensor,
    x: &Tensor,
    target: &Tensor,
    eps: f32,
) -> Result<(f64, f64), String> {
    let norm = ops::sum(&ops::mul(g, g)?)?.sqrt();
    fn param_mut(m: &mut MoeLayer, which: usize) -> &mut Tensor {
        match which {
            0 => &mut m.router,
            1 => &mut m.up.weight,
            _ => &mut m.down.weight,
        }
    }
    let mut values = Vec::new();
    for sign in [1.0f32, -1.0] {
        // p ± eps · (−g/|g|)
        let moved = ops::axpby(1.0, param_mut(moe, which), -sign * eps / norm as f32, g)?;
        let orig = std::mem::replace(param_mut(moe, which), moved);
        let l = loss_of(moe, x, target);
        *param_mut(moe, which) = orig;
        values.push(l?);
    }
    Ok((-norm, (values[0] - values[1]) / (2.0 * eps as f64)))
}

fn grad_mode(args: &[String]) -> Result<String, String> {
    let act = match flag(args, "--act", "swiglu".to_string())?.as_str() {
        "silu" => ExpertActivation::Silu,
        "gelu" => ExpertActivation::Gelu,
        _ => ExpertActivation::SwiGlu,
    };
    plugin::select("bf16")?;
    let cfg = MoeConfig {
        experts: 4,
        hidden: 64,
        ffn: 64,
        top_k: 2,
        activation: act,
        renormalize: !args.iter().any(|a| a == "--no-renorm"),
        ..MoeConfig::default()
    };
    let tokens = 256;
    let mut moe = MoeLayer::new(cfg, 5)?;
    // Sharper router logits so that the gates carry a real gradient.
    moe.router = ops::scale(3.0, &moe.router)?;
    let x = Tensor::randn_f32(&[tokens, cfg.hidden], 6)?;
    let target = Tensor::randn(&[tokens, cfg.hidden], Dtype::F32, 7, 0.0, 0.5)?;
    let y = moe.forward(&x)?;
    let (_, dy) = ops::mse_loss(&y, &target)?;
    let dx = moe.backward(&dy)?.ok_or("no input gradient")?;
    let grads = [
        ("router", ops::copy(moe.router_grad.as_ref().unwrap())?),
        ("up", ops::scale(1.0, moe.up.grad.as_ref().unwrap())?),
        ("down", ops::scale(1.0, moe.down.grad.as_ref().unwrap())?),
    ];
    let mut bad = Vec::new();
    let mut lines = Vec::new();
    for (i, (name, g)) in grads.iter().enumerate() {
        // A step of 2% of the parameter's norm: well above bf16 rounding of the operands.
        let p = [&moe.router, &moe.up.weight, &moe.down.weight][i];
        let eps = 0.02 * ops::sum(&ops::mul(p, p)?)?.sqrt() as f32;
        let (a, n) = directional(&mut moe, i, g, &x, &target, eps)?;
        lines.push(format!("grad {name} {a:.6} {n:.6} {:.4}", n / a));
        if !(0.95..=1.05).contains(&(n / a)) {
            bad.push(format!("{name}: analytic {a:.6} vs numeric {n:.6}"));
        }
    }
    // The input gradient: move x itself.
    let norm = ops::sum(&ops::mul(&dx, &dx)?)?.sqrt();
    let eps = flag(args, "--x-eps", 0.003f32)? * ops::sum(&ops::mul(&x, &x)?)?.sqrt() as f32;
    let xp = ops::axpby(1.0, &x, -eps / norm as f32, &dx)?;
    let xm = ops::axpby(1.0, &x, eps / norm as f32, &dx)?;
    let n =
        (loss_of(&mut moe, &xp, &target)? - loss_of(&mut moe, &xm, &target)?) / (2.0 * eps as f64);
    lines.push(format!("grad input {:.6} {n:.6} {:.4}", -norm, n / -norm));
    if !(0.95..=1.05).contains(&(n / -norm)) {
        bad.push(format!("input: analytic {:.6} vs numeric {n:.6}", -norm));
    }
    plugin::select("mxfp8")?;
    for l in &lines {
        println!("{l}");
    }
    if bad.is_empty() {
        Ok("gradients match central differences within 5%".into())
    } else {
        Err(format!("gradient check failed: {}", bad.join("; ")))
    }
}

impl Experiment for MoeChecks {
    fn run(args: Vec<String>) -> Result<String, String> {
        match args.first().map(String::as_str) {
            Some("route") => route_mode(&args[1..]),
            Some("guard") => guard_mode(args.get(1).is_some_and(|a| a == "e5m2")),
            Some("grad") => grad_mode(&args[1..]),
            Some("unguarded-e5m2") => {
                let x = Tensor::randn_f32(&[64, 64], 1)?;
                let w = Tensor::randn_f32(&[2, 32, 64], 2)?;
                let o = GemmOptions {
                    format: ElementFormat::E5m2,
                    ..options()
                };
                forward(Operand::Dense(&x), Operand::Dense(&w), &[30, 64], &o)?;
                Ok("e5m2 forward ok".into())
            }
            other => Err(format!(
                "unknown mode {other:?}; use route|guard [e5m2]|unguarded-e5m2"
            )),
        }
    }
}

mxhost_guest::export_experiment!(MoeChecks);

fn main() {}
