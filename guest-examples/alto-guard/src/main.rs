//! alto-guard: a dispatch guard (world `guard`) enforcing the reference project's V1
//! rules for MXFP8 grouped GEMM (see `rules.rs`). This build allows E4M3 only;
//! `alto-guard-e5m2.wasm` (src/e5m2.rs) is the same rule set with E5M2 allowed.
//!
//! `mxhost run exp.wasm --guard alto-guard.wasm`: the host calls `check` before every
//! quantize and grouped GEMM; a rejection reaches the experiment as error kind
//! `rejected-by-guard` with the message naming the rule.

#[path = "rules.rs"]
mod rules;

use mxhost_guest::guard_bindings::mxhost::runtime::dispatch::DispatchRequest;

/// Compile-time configuration: a guard sees only the request.
const ALLOW_E5M2: bool = false;

struct AltoGuard;

impl mxhost_guest::guard_bindings::Guest for AltoGuard {
    fn check(request: DispatchRequest) -> Result<(), String> {
        rules::check(&request, ALLOW_E5M2)
    }
}

mxhost_guest::guard_bindings::export_guard!(AltoGuard);

fn main() {}
