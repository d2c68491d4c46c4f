//! alto-guard: a dispatch guard (world `guard`) enforcing the reference project's V1
//! rules for MXFP8 grouped GEMM (see `rules.rs`). This build allows E4M3 only;
//! `alto-guard-e5m2.wasm` (src/e5m2.rs) is the same rule set with E5M2 allowed.
//!
//! `mxhost run exp.wasm --guard alto-guard.wasm`: the host calls `check` before every
//! quantize and grouped GEMM; a rejection reaches the experiment as error kind
//! `rejected-by-guard` with the message naming the rule.

#[macro_use]
#[path = "rules.rs"]
mod rules;

alto_guard!(false);
