//! alto-guard: a dispatch guard (world `guard`) enforcing the reference project's V1
//! rules for MXFP8 grouped GEMM (see `rules.rs`). This build (alto-guard-e5m2) also allows E5M2;
//! `alto-guard.wasm` (src/main.rs) is the E4M3-only build.
//!
//! `mxhost run exp.wasm --guard alto-guard.wasm`: the host calls `check` before every
//! quantize and grouped GEMM; a rejection reaches the experiment as error kind
//! `rejected-by-guard` with the message naming the rule.

#[macro_use]
#[path = "rules.rs"]
mod rules;

alto_guard!(true);
