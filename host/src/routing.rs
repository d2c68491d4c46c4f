//! The built-in top-k router, used when no `--router` guest is given: softmax over
//! each token's logits, the k largest (ties to the lower expert index), optional
//! renormalisation, an optional capacity limit, and the contiguous padded layout.

#[derive(Debug, Clone, PartialEq)]
pub struct RoutePlan {
    pub source_token: Vec<i32>,
    pub gate_weight: Vec<f32>,
    pub offs: Vec<i32>,
    pub load: Vec<u32>,
    pub dropped: u32,
}

pub struct RouteRequest<'a> {
    pub tokens: u32,
    pub experts: u32,
    pub top_k: u32,
    pub logits: &'a [f32],
    pub renormalize: bool,
    pub align: u32,
    pub capacity_factor: Option<f32>,
}

/// Largest group alignment accepted (padding rows are host memory the guest controls).
pub const MAX_ALIGN: u32 = 1024;
/// Largest expert count accepted.
pub const MAX_EXPERTS: usize = 4096;

pub fn route_top_k(r: &RouteRequest<'_>) -> Result<RoutePlan, String> {
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
    // The padded buffer holds at most tokens·k rows plus align−1 padding per expert;
    // check that it fits i32 offsets before allocating anything.
    let worst_rows = (t as u64) * (k as u64) + (e as u64) * (r.align as u64 - 1);
    if worst_rows > i32::MAX as u64 {
        return Err(format!(
            "a routed buffer of up to {worst_rows} rows exceeds i32 offsets"
        ));
    }
    if r.logits.len() != t.checked_mul(e).ok_or("tokens × experts overflows")? {
        return Err(format!(
            "logits has {} values, expected tokens × experts = {}",
            r.logits.len(),
            t * e
        ));
    }
    let capacity = match r.capacity_factor {
        Some(cf) if !(cf.is_finite() && cf > 0.0) => {
            return Err(format!("capacity factor must be positive, got {cf}"))
        }
        Some(cf) => Some(((cf as f64) * (t * k) as f64 / e as f64).ceil() as usize),
        None => None,
    };
    let mut per_expert: Vec<Vec<(u32, f32)>> = vec![Vec::new(); e];
    let mut dropped = 0u32;
    let mut order: Vec<usize> = (0..e).collect();
    for tok in 0..t {
        let row = &r.logits[tok * e..(tok + 1) * e];
        if row.iter().any(|v| !v.is_finite()) {
            return Err(format!("token {tok} has non-finite logits"));
        }
        let max = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
        let exp: Vec<f32> = row.iter().map(|&v| (v - max).exp()).collect();
        let sum: f32 = exp.iter().sum();
        order.sort_by(|&a, &b| exp[b].partial_cmp(&exp[a]).unwrap().then(a.cmp(&b)));
        let chosen = &order[..k];
        let denom = if r.renormalize {
            chosen.iter().map(|&x| exp[x]).sum::<f32>()
        } else {
            sum
        };
        for &x in chosen {
            if capacity.is_some_and(|c| per_expert[x].len() >= c) {
                dropped += 1;
                continue;
            }
            per_expert[x].push((tok as u32, exp[x] / denom));
        }
    }
    let align = r.align as usize;
    let mut plan = RoutePlan {
        source_token: vec![],
        gate_weight: vec![],
        offs: vec![],
        load: vec![],
        dropped,
    };
    for rows in &per_expert {
        for &(tok, w) in rows {
            plan.source_token.push(tok as i32);
            plan.gate_weight.push(w);
        }
        let padded = rows.len().div_ceil(align) * align;
        for _ in rows.len()..padded {
            plan.source_token.push(-1);
            plan.gate_weight.push(0.0);
        }
        // Cannot overflow: the total was bounded above.
        plan.offs.push(plan.source_token.len() as i32);
        plan.load.push(rows.len() as u32);
    }
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_token_appears_k_times_and_groups_are_padded() {
        let logits: Vec<f32> = (0..40).map(|i| ((i * 7919) % 13) as f32 * 0.1).collect();
        let r = RouteRequest {
            tokens: 10,
            experts: 4,
            top_k: 2,
            logits: &logits,
            renormalize: true,
            align: 8,
            capacity_factor: None,
        };
        let p = route_top_k(&r).unwrap();
        let mut count = [0; 10];
        for &s in &p.source_token {
            if s >= 0 {
                count[s as usize] += 1;
            }
        }
        assert!(count.iter().all(|&c| c == 2));
        assert!(p.offs.iter().all(|&o| o % 8 == 0));
        assert_eq!(p.load.iter().sum::<u32>(), 20);
        assert_eq!(*p.offs.last().unwrap() as usize, p.source_token.len());
    }

    #[test]
    fn hostile_sizes_are_refused_before_allocating() {
        // Reproducers from fuzz/artifacts-found/routing-{align,experts}-oom.
        let zeros = vec![0.0; 27 * 60];
        let r = RouteRequest {
            tokens: 27,
            experts: 60,
            top_k: 4,
            logits: &zeros,
            renormalize: false,
            align: 2809127749,
            capacity_factor: None,
        };
        assert!(route_top_k(&r).unwrap_err().contains("align"));
        let r = RouteRequest {
            tokens: 0,
            experts: 4280492807,
            top_k: 1,
            logits: &[],
            renormalize: false,
            align: 1,
            capacity_factor: None,
        };
        assert!(route_top_k(&r).unwrap_err().contains("experts"));
        let r = RouteRequest {
            tokens: 1,
            experts: 5000,
            top_k: 1,
            logits: &[0.0; 5000],
            renormalize: false,
            align: 1,
            capacity_factor: None,
        };
        assert!(route_top_k(&r)
            .unwrap_err()
            .contains("at most 4096 experts"));
    }

    #[test]
    fn capacity_drops_are_counted() {
        let logits = vec![1.0, 0.0].repeat(10);
        let r = RouteRequest {
            tokens: 10,
            experts: 2,
            top_k: 1,
            logits: &logits,
            renormalize: false,
            align: 1,
            capacity_factor: Some(1.0),
        };
        let p = route_top_k(&r).unwrap();
        assert_eq!(p.load, vec![5, 0]);
        assert_eq!(p.dropped, 5);
    }
}
