//! topk-router: the top-k router as a guest (world `router`), for `mxhost run --router`.
//!
//! One call per batch: softmax over each token's logits, the `top-k` largest (ties to
//! the lower expert index), gate weights renormalised over the chosen experts when the
//! request asks, tokens sorted by expert into the contiguous layout, each expert's group
//! padded to a multiple of `align` (32 = one MX block of rows; 128 for large tiles) with
//! `-1` rows of gate 0, and the capacity limit's drops counted. k, renormalisation,
//! alignment and capacity factor all come with the request. The algorithm is
//! `mxhost_guest::topk::route` (unit-tested natively) and matches the host's built-in
//! router exactly.

use mxhost_guest::router_bindings::mxhost::runtime::routing_types::{RoutePlan, RouteRequest};
use mxhost_guest::router_bindings::Guest;
use mxhost_guest::topk;

struct TopK;

impl Guest for TopK {
    fn route(r: RouteRequest) -> Result<RoutePlan, String> {
        let p = topk::route(&topk::Request {
            tokens: r.tokens,
            experts: r.experts,
            top_k: r.top_k,
            logits: &r.logits,
            renormalize: r.renormalize,
            align: r.align,
            capacity_factor: r.capacity_factor,
        })?;
        Ok(RoutePlan {
            source_token: p.source_token,
            gate_weight: p.gate_weight,
            offs: p.offs,
            load: p.load,
            dropped: p.dropped,
        })
    }
}

mxhost_guest::router_bindings::export_router!(TopK);

fn main() {}
