//! The built-in top-k router, used when no `--router` guest is given. The algorithm
//! lives in the `mxhost-routing` crate, shared with the router guest
//! (`guest-examples/topk-router`), so both give the same plan bit for bit: softmax over
//! each token's logits, the k largest (ties to the lower expert index), optional
//! renormalisation, an optional capacity limit, and the contiguous padded layout.
//! Hostile sizes (`align` > [`MAX_ALIGN`], `experts` > [`MAX_EXPERTS`], a padded buffer
//! past i32 offsets) are refused before anything is allocated.

pub use mxhost_routing::{
    route as route_top_k, Plan as RoutePlan, Request as RouteRequest, MAX_ALIGN, MAX_EXPERTS,
};

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
        let logits = [1.0, 0.0].repeat(10);
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
