//! The built-in top-k router on arbitrary requests (tokens, experts, top-k, align,
//! capacity factor, logits — NaN/Inf included): never panic; an `Ok` plan must be a
//! valid contiguous padded layout.
//!
//! Sizes are kept small (tokens ≤ 64, experts ≤ 64, align ≤ 4096) except through the
//! `Huge` variants, which pass raw u32 values where a zero-token request keeps the
//! logits empty: that is how a guest can ask for them.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use mxhost_fuzz::routing::{route_top_k, RouteRequest};

#[derive(Arbitrary, Debug)]
enum Size {
    Small(u8),
    Huge(u32),
}

#[derive(Arbitrary, Debug)]
enum Logit {
    Bits(u32),
    Small(i8),
}

#[derive(Arbitrary, Debug)]
struct Input {
    tokens: u8,
    experts: Size,
    top_k: u8,
    align: Size,
    renormalize: bool,
    capacity: Option<u32>,
    capacity_small: bool,
    /// Logits are cycled to tokens × experts values; `len_delta` makes the list
    /// (slightly) the wrong length.
    logits: Vec<Logit>,
    len_delta: i8,
}

/// Upper bound on the rows of the padded buffer the router materialises.
fn rows_bound(tokens: u64, experts: u64, top_k: u64, align: u64) -> u64 {
    let kept = tokens * top_k;
    // Each non-empty expert pads at most align − 1 rows; experts ≤ kept are non-empty.
    kept + experts.min(kept) * align.saturating_sub(1)
}

fuzz_target!(|input: Input| {
    let tokens = (input.tokens % 65) as u32;
    let experts = match input.experts {
        Size::Small(e) => (e % 65) as u32,
        Size::Huge(e) => e,
    };
    let align = match input.align {
        Size::Small(a) => (a as u32) * 16 % 4097,
        Size::Huge(a) => a,
    };
    let top_k = match input.top_k % 4 {
        0 => (input.top_k >> 2) as u32,
        1 => experts,
        2 => experts.saturating_add(1),
        _ => 1 + (input.top_k >> 2) as u32 % experts.max(1),
    };
    let capacity_factor = input.capacity.map(|c| {
        if input.capacity_small {
            (c % 64) as f32 / 16.0
        } else {
            f32::from_bits(c)
        }
    });
    // tokens × experts logits, cycled from the input (only when that is small).
    let want = (tokens as u64) * (experts as u64);
    if want > 64 * 64 {
        return;
    }
    let len = (want as i64 + input.len_delta as i64 % 3).max(0) as usize;
    let logits: Vec<f32> = (0..len)
        .map(|i| match input.logits.get(i % input.logits.len().max(1)) {
            None => 0.0,
            Some(Logit::Bits(b)) => f32::from_bits(*b),
            Some(Logit::Small(v)) => *v as f32 / 8.0,
        })
        .collect();

    // Findings recorded in fuzz/artifacts-found/: host memory grows with `experts` and
    // with `align` (padding rows are materialised before the i32 check), unbounded.
    let k = top_k.min(experts) as u64;
    if mxhost_fuzz::skip_known("routing-align-oom")
        && rows_bound(tokens as u64, experts as u64, k, align as u64) > 1 << 14
    {
        return;
    }
    if mxhost_fuzz::skip_known("routing-experts-oom") && experts > 1 << 16 {
        return;
    }

    let r = RouteRequest {
        tokens,
        experts,
        top_k,
        logits: &logits,
        renormalize: input.renormalize,
        align,
        capacity_factor,
    };
    let Ok(plan) = route_top_k(&r) else {
        return;
    };

    let (t, e, k, a) = (
        tokens as usize,
        experts as usize,
        top_k as usize,
        align as usize,
    );
    assert!(e >= 1 && k >= 1 && k <= e && a >= 1);
    assert_eq!(logits.len(), t * e);
    assert!(logits.iter().all(|v| v.is_finite()));
    assert_eq!(plan.offs.len(), e);
    assert_eq!(plan.load.len(), e);
    assert_eq!(plan.gate_weight.len(), plan.source_token.len());
    assert_eq!(*plan.offs.last().unwrap() as usize, plan.source_token.len());

    let mut count = vec![0usize; t];
    let mut gate_sum = vec![0f64; t];
    let mut prev = 0usize;
    for (x, (&end, &load)) in plan.offs.iter().zip(&plan.load).enumerate() {
        assert!(
            end >= 0 && end as usize >= prev,
            "offs not non-decreasing: {:?}",
            plan.offs
        );
        let end = end as usize;
        assert_eq!(end % a, 0, "offs[{x}] = {end} not aligned to {a}");
        let group = prev..end;
        let load = load as usize;
        assert!(load <= group.len());
        assert_eq!(
            group.len(),
            load.div_ceil(a) * a,
            "expert {x}: padding is not minimal"
        );
        let mut seen = std::collections::HashSet::new();
        for row in group {
            let (src, g) = (plan.source_token[row], plan.gate_weight[row]);
            if row - prev < load {
                assert!(
                    src >= 0 && (src as usize) < t,
                    "row {row}: bad source token {src}"
                );
                assert!(seen.insert(src), "token {src} twice in expert {x}");
                assert!(g.is_finite() && (0.0..=1.0).contains(&g), "gate {g}");
                count[src as usize] += 1;
                gate_sum[src as usize] += g as f64;
            } else {
                assert_eq!(src, -1, "row {row} after expert {x}'s load must be padding");
                assert_eq!(
                    g.to_bits(),
                    0f32.to_bits(),
                    "padding row {row} has gate {g}"
                );
            }
        }
        prev = end;
    }
    let kept: usize = plan.load.iter().map(|&l| l as usize).sum();
    assert_eq!(
        kept,
        count.iter().sum::<usize>(),
        "load sums != kept entries"
    );
    assert_eq!(
        kept + plan.dropped as usize,
        t * k,
        "kept + dropped != tokens × top_k"
    );
    assert!(
        count.iter().all(|&c| c <= k),
        "a token appears more than top_k times"
    );
    match capacity_factor {
        None => {
            assert_eq!(plan.dropped, 0);
            assert!(count.iter().all(|&c| c == k));
        }
        Some(cf) => {
            let cap = ((cf as f64) * (t * k) as f64 / e as f64).ceil();
            assert!(
                plan.load.iter().all(|&l| l as f64 <= cap),
                "load over capacity {cap}"
            );
        }
    }
    if input.renormalize && capacity_factor.is_none() {
        for (tok, &s) in gate_sum.iter().enumerate() {
            assert!(
                (s - 1.0).abs() < 1e-3,
                "token {tok}: renormalised gates sum to {s}"
            );
        }
    } else {
        assert!(gate_sum.iter().all(|&s| s <= 1.0 + 1e-3));
    }
});
