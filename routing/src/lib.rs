//! Top-k routing in plain Rust, shared by the host's built-in router (`mxhost::routing`)
//! and the router guest (`mxhost_guest::topk`), so both give the same plan bit for bit:
//! the algorithm, a checker for routing plans, and the backward pass of the router's
//! softmax over the selected experts. No dependencies; unit-tested natively.
//!
//! Semantics: softmax
//! over each token's logits; the k largest probabilities, ties to the lower expert
//! index; gate weights renormalised over the k chosen experts when asked (the
//! denominator counts all k choices, also a choice later dropped by the capacity
//! limit); tokens visited in order, each token's choices in descending probability,
//! an expert full at `ceil(capacity_factor · tokens · k / experts)` drops the choice;
//! rows sorted by expert, tokens in order inside an expert, each expert's group padded
//! with `-1` rows (gate 0) to a multiple of `align`.

/// The inputs of one routing call (mirrors the WIT `route-request`).
#[derive(Debug, Clone, PartialEq)]
pub struct Request<'a> {
    pub tokens: u32,
    pub experts: u32,
    pub top_k: u32,
    /// `[tokens, experts]`, row-major.
    pub logits: &'a [f32],
    pub renormalize: bool,
    pub align: u32,
    pub capacity_factor: Option<f32>,
}

/// A routing plan (mirrors the WIT `route-plan`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Plan {
    /// Source token of each padded row, `-1` for padding.
    pub source_token: Vec<i32>,
    /// Gate weight of each row (0 for padding).
    pub gate_weight: Vec<f32>,
    /// Padded cumulative end offsets, one per expert.
    pub offs: Vec<i32>,
    /// Tokens kept per expert (before padding, after drops).
    pub load: Vec<u32>,
    /// (token, choice) pairs dropped by the capacity limit.
    pub dropped: u32,
}

/// The default group alignment (one MX block of rows).
pub const DEFAULT_ALIGN: u32 = 32;

/// The expert capacity for a capacity factor, or `None` without a limit.
pub fn capacity(tokens: u32, experts: u32, top_k: u32, cf: Option<f32>) -> Option<usize> {
    cf.map(|cf| {
        ((cf as f64) * (tokens as usize * top_k as usize) as f64 / experts as f64).ceil() as usize
    })
}

/// The k chosen experts of one token, in descending probability (ties: lower index first),
/// with the row's softmax probabilities.
pub fn select(row: &[f32], k: usize) -> (Vec<usize>, Vec<f32>) {
    let max = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
    let exp: Vec<f32> = row.iter().map(|&v| (v - max).exp()).collect();
    let mut order: Vec<usize> = (0..row.len()).collect();
    order.sort_by(|&a, &b| exp[b].partial_cmp(&exp[a]).unwrap().then(a.cmp(&b)));
    order.truncate(k);
    (order, exp)
}

/// Largest group alignment accepted (padding rows are memory a caller controls).
pub const MAX_ALIGN: u32 = 1024;
/// Largest expert count accepted.
pub const MAX_EXPERTS: usize = 4096;

/// Route one batch. Sizes are checked before anything is allocated, so a hostile
/// request (huge `align` or `experts`) is refused instead of exhausting memory.
pub fn route(r: &Request<'_>) -> Result<Plan, String> {
    let (t, e, k) = (r.tokens as usize, r.experts as usize, r.top_k as usize);
    if e == 0 || k == 0 || k > e {
        return Err(format!(
            "need 1 ≤ top-k ≤ experts, got top-k {k} with {e} experts"
        ));
    }
    if r.align == 0 || r.align > MAX_ALIGN {
        return Err(format!("align must be in 1..={MAX_ALIGN}, got {}", r.align));
    }
    if e > MAX_EXPERTS {
        return Err(format!("at most {MAX_EXPERTS} experts, got {e}"));
    }
    // The padded buffer holds at most tokens·k rows plus align−1 padding per expert.
    let worst_rows = (t as u64) * (k as u64) + (e as u64) * (r.align as u64 - 1);
    if worst_rows > i32::MAX as u64 {
        return Err(format!(
            "a routed buffer of up to {worst_rows} rows exceeds i32 offsets"
        ));
    }
    if Some(r.logits.len()) != t.checked_mul(e) {
        return Err(format!(
            "logits has {} values, expected tokens × experts = {t} × {e}",
            r.logits.len()
        ));
    }
    if let Some(cf) = r.capacity_factor {
        if !(cf.is_finite() && cf > 0.0) {
            return Err(format!("capacity factor must be positive, got {cf}"));
        }
    }
    let cap = capacity(r.tokens, r.experts, r.top_k, r.capacity_factor);
    let mut per_expert: Vec<Vec<(i32, f32)>> = vec![Vec::new(); e];
    let mut dropped = 0u32;
    for tok in 0..t {
        let row = &r.logits[tok * e..(tok + 1) * e];
        if row.iter().any(|v| !v.is_finite()) {
            return Err(format!("token {tok} has non-finite logits"));
        }
        let (chosen, exp) = select(row, k);
        let denom: f32 = if r.renormalize {
            chosen.iter().map(|&x| exp[x]).sum()
        } else {
            exp.iter().sum()
        };
        for &x in &chosen {
            if cap.is_some_and(|c| per_expert[x].len() >= c) {
                dropped += 1;
                continue;
            }
            per_expert[x].push((tok as i32, exp[x] / denom));
        }
    }
    let align = r.align as usize;
    let mut plan = Plan {
        dropped,
        ..Plan::default()
    };
    for rows in &per_expert {
        for &(tok, w) in rows {
            plan.source_token.push(tok);
            plan.gate_weight.push(w);
        }
        let padded = rows.len().div_ceil(align) * align;
        plan.source_token
            .resize(plan.source_token.len() + padded - rows.len(), -1);
        plan.gate_weight.resize(plan.source_token.len(), 0.0);
        // Cannot overflow: the total was bounded above.
        plan.offs.push(plan.source_token.len() as i32);
        plan.load.push(rows.len() as u32);
    }
    Ok(plan)
}

/// The expert of each row of a plan (from its offsets).
pub fn row_experts(offs: &[i32]) -> Vec<u32> {
    let mut out = Vec::new();
    let mut start = 0i32;
    for (e, &end) in offs.iter().enumerate() {
        out.extend(std::iter::repeat_n(e as u32, (end - start).max(0) as usize));
        start = end;
    }
    out
}

/// Check a plan against its request: offsets consistent and aligned, rows of each
/// expert (kept tokens first, in token order, then padding), every kept token at most
/// once per expert and at most k times in all, kept + dropped = tokens · k, the load per
/// expert, gate weights in (0, 1] (summing to at most 1 per token, to 1 when
/// renormalised without drops), and padding rows with gate 0.
pub fn check_plan(r: &Request<'_>, p: &Plan) -> Result<(), String> {
    let (t, e, k) = (r.tokens as usize, r.experts as usize, r.top_k as usize);
    let align = r.align.max(1) as i32;
    if p.offs.len() != e || p.load.len() != e {
        return Err(format!(
            "offs has {} and load {} entries for {e} experts",
            p.offs.len(),
            p.load.len()
        ));
    }
    if p.source_token.len() != p.gate_weight.len() {
        return Err("source-token and gate-weight lengths differ".into());
    }
    if p.offs.last().map_or(0, |&o| o as usize) != p.source_token.len() {
        return Err(format!(
            "last offset {:?} is not the row count {}",
            p.offs.last(),
            p.source_token.len()
        ));
    }
    let mut per_token = vec![0usize; t];
    let mut gate_sum = vec![0f64; t];
    let mut start = 0i32;
    let mut kept = 0usize;
    for (x, &end) in p.offs.iter().enumerate() {
        if end < start {
            return Err(format!("offs decrease at expert {x}: {start} → {end}"));
        }
        if end % align != 0 {
            return Err(format!(
                "offs[{x}] = {end} is not a multiple of align {align}"
            ));
        }
        let rows = &p.source_token[start as usize..end as usize];
        let gates = &p.gate_weight[start as usize..end as usize];
        let load = rows.iter().take_while(|&&s| s >= 0).count();
        if load != p.load[x] as usize {
            return Err(format!(
                "expert {x}: {load} kept rows but load {}",
                p.load[x]
            ));
        }
        if rows[load..].iter().any(|&s| s != -1) {
            return Err(format!(
                "expert {x}: a token row after padding, or an index < -1"
            ));
        }
        if gates[load..].iter().any(|&g| g != 0.0) {
            return Err(format!("expert {x}: a padding row with a nonzero gate"));
        }
        if (end - start) as usize != load.div_ceil(align as usize) * align as usize {
            return Err(format!(
                "expert {x}: {} rows for load {load} (align {align}) is not the minimal padding",
                end - start
            ));
        }
        for w in rows[..load].windows(2) {
            if w[0] >= w[1] {
                return Err(format!(
                    "expert {x}: tokens not strictly increasing ({} then {}): a token twice or out of order",
                    w[0], w[1]
                ));
            }
        }
        for (&s, &g) in rows[..load].iter().zip(&gates[..load]) {
            if s as usize >= t {
                return Err(format!("expert {x}: source token {s} ≥ tokens {t}"));
            }
            if !(g > 0.0 && g <= 1.0 + 1e-6) {
                return Err(format!("expert {x}, token {s}: gate {g} outside (0, 1]"));
            }
            per_token[s as usize] += 1;
            gate_sum[s as usize] += g as f64;
        }
        kept += load;
        start = end;
    }
    if kept + p.dropped as usize != t * k {
        return Err(format!(
            "{kept} kept + {} dropped ≠ tokens × k = {}",
            p.dropped,
            t * k
        ));
    }
    if r.capacity_factor.is_none() && p.dropped != 0 {
        return Err(format!("{} drops without a capacity limit", p.dropped));
    }
    if let Some(c) = capacity(r.tokens, r.experts, r.top_k, r.capacity_factor) {
        if let Some(x) = p.load.iter().position(|&l| l as usize > c) {
            return Err(format!("expert {x} holds {} > capacity {c}", p.load[x]));
        }
    }
    for (tok, (&n, &s)) in per_token.iter().zip(&gate_sum).enumerate() {
        if n > k {
            return Err(format!("token {tok} appears {n} > k = {k} times"));
        }
        if p.dropped == 0 && n != k {
            return Err(format!("token {tok} appears {n} times, not k = {k}"));
        }
        if s > 1.0 + 1e-4 || (r.renormalize && p.dropped == 0 && (s - 1.0).abs() > 1e-4) {
            return Err(format!("token {tok}: gate weights sum to {s}"));
        }
    }
    Ok(())
}

/// Backward of the gate weights through the router softmax: `dgate` holds
/// `(token, expert, ∂L/∂gate)` for every kept row; returns `∂L/∂logits` `[tokens, experts]`.
///
/// Renormalised: g_e = softmax over the k selected logits, so for j selected
/// ∂L/∂l_j = g_j (d_j − Σ_e d_e g_e) and 0 otherwise. Not renormalised: g_e = p_e
/// (softmax over all experts), ∂L/∂l_j = p_j (d_j − Σ_e d_e p_e) for every j, with
/// d_j = 0 for experts not kept. A dropped choice has d = 0 but still counts in the
/// renormalisation denominator.
pub fn router_softmax_backward(
    logits: &[f32],
    experts: usize,
    top_k: usize,
    renormalize: bool,
    dgate: &[(usize, usize, f32)],
) -> Vec<f32> {
    let tokens = logits.len() / experts.max(1);
    let mut d = vec![0f64; tokens * experts];
    for &(t, e, g) in dgate {
        d[t * experts + e] += g as f64;
    }
    let mut out = vec![0f32; tokens * experts];
    for t in 0..tokens {
        let row = &logits[t * experts..(t + 1) * experts];
        let (chosen, exp) = select(row, top_k);
        let dt = &d[t * experts..(t + 1) * experts];
        let o = &mut out[t * experts..(t + 1) * experts];
        let set: Vec<usize> = if renormalize {
            chosen
        } else {
            (0..experts).collect()
        };
        let denom: f64 = set.iter().map(|&j| exp[j] as f64).sum();
        let g = |j: usize| exp[j] as f64 / denom;
        let dot: f64 = set.iter().map(|&j| dt[j] * g(j)).sum();
        for &j in &set {
            o[j] = (g(j) * (dt[j] - dot)) as f32;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn logits(t: usize, e: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..t * e)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 33) as f32 / (1u64 << 31) as f32) * 4.0 - 2.0
            })
            .collect()
    }

    fn req(l: &[f32], t: u32, e: u32, k: u32, align: u32, cf: Option<f32>) -> Request<'_> {
        Request {
            tokens: t,
            experts: e,
            top_k: k,
            logits: l,
            renormalize: true,
            align,
            capacity_factor: cf,
        }
    }

    #[test]
    fn plans_pass_their_own_checks() {
        for (t, e, k, align, cf) in [
            (100, 8, 2, 32, None),
            (37, 4, 1, 1, None),
            (256, 8, 2, 128, Some(1.0)),
            (64, 16, 4, 32, Some(0.5)),
            (0, 4, 2, 32, None),
        ] {
            let l = logits(t as usize, e as usize, 3);
            let r = req(&l, t, e, k, align, cf);
            let p = route(&r).unwrap();
            check_plan(&r, &p).unwrap_or_else(|m| panic!("{t} {e} {k} {align} {cf:?}: {m}"));
            if cf.is_none() {
                assert_eq!(p.dropped, 0);
            }
        }
    }

    #[test]
    fn ties_go_to_the_lower_expert_and_drops_are_counted() {
        let l = [1.0, 1.0, 0.0].repeat(6);
        let r = Request {
            renormalize: false,
            ..req(&l, 6, 3, 1, 1, Some(1.0))
        };
        let p = route(&r).unwrap();
        assert_eq!(p.load, vec![2, 0, 0]);
        assert_eq!(p.dropped, 4);
        assert_eq!(p.offs, vec![2, 2, 2]);
        check_plan(&r, &p).unwrap();
    }

    #[test]
    fn bad_requests_are_refused_and_bad_plans_caught() {
        let l = logits(4, 4, 1);
        assert!(route(&req(&l, 4, 4, 5, 32, None)).is_err());
        assert!(route(&req(&l, 4, 4, 2, 0, None)).is_err());
        assert!(route(&req(&l[..15], 4, 4, 2, 32, None)).is_err());
        assert!(route(&req(&l, 4, 4, 2, 32, Some(0.0))).is_err());
        let r = req(&l, 4, 4, 2, 8, None);
        let good = route(&r).unwrap();
        let mut p = good.clone();
        let i = p.source_token.iter().position(|&s| s == -1).unwrap();
        p.gate_weight[i] = 0.5;
        assert!(check_plan(&r, &p).unwrap_err().contains("padding"));
        let mut p = good.clone();
        p.offs[0] += 1;
        assert!(check_plan(&r, &p).is_err());
        let mut p = good.clone();
        p.dropped = 1;
        assert!(check_plan(&r, &p).is_err());
        let mut p = good;
        let first = p.source_token[0];
        p.source_token[1] = first;
        assert!(check_plan(&r, &p).is_err());
    }

    /// The gate weights of the kept choices as a function of the logits, and a loss
    /// L = Σ c · gate to differentiate numerically.
    fn loss(l: &[f32], e: usize, k: usize, renorm: bool, c: &[f64]) -> f64 {
        let r = Request {
            renormalize: renorm,
            ..req(l, (l.len() / e) as u32, e as u32, k as u32, 1, None)
        };
        let p = route(&r).unwrap();
        let ex = row_experts(&p.offs);
        p.source_token
            .iter()
            .zip(&p.gate_weight)
            .zip(&ex)
            .map(|((&s, &g), &x)| c[s as usize * e + x as usize] * g as f64)
            .sum()
    }

    #[test]
    fn router_backward_matches_finite_differences() {
        let (t, e, k) = (5, 6, 2);
        let l = logits(t, e, 9);
        let c: Vec<f64> = (0..t * e)
            .map(|i| ((i * 37) % 11) as f64 / 5.0 - 1.0)
            .collect();
        for renorm in [true, false] {
            let r = Request {
                renormalize: renorm,
                ..req(&l, t as u32, e as u32, k as u32, 1, None)
            };
            let p = route(&r).unwrap();
            let ex = row_experts(&p.offs);
            let dgate: Vec<(usize, usize, f32)> = p
                .source_token
                .iter()
                .zip(&ex)
                .map(|(&s, &x)| {
                    (
                        s as usize,
                        x as usize,
                        c[s as usize * e + x as usize] as f32,
                    )
                })
                .collect();
            let g = router_softmax_backward(&l, e, k, renorm, &dgate);
            let h = 1e-3f32;
            for i in 0..t * e {
                let (mut a, mut b) = (l.clone(), l.clone());
                a[i] += h;
                b[i] -= h;
                let fd =
                    (loss(&a, e, k, renorm, &c) - loss(&b, e, k, renorm, &c)) / (2.0 * h as f64);
                assert!(
                    (fd - g[i] as f64).abs() < 2e-3,
                    "renorm {renorm}, logit {i}: analytic {} vs numeric {fd}",
                    g[i]
                );
            }
        }
    }
}
