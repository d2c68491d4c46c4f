//! The reference project's V1 dispatch rules for MXFP8 grouped GEMM (ALTO PR #31), as a
//! pure function of the request. Each rejection names its rule and says why.
//!
//! | rule | applies to | accepts |
//! |---|---|---|
//! | `no-hadamard`, `no-dge`, `no-bias` | every GEMM | the knob off (V1 implements none of them) |
//! | `operand-ranks` | forward, dgrad | a 2-D activation `[rows, K]` and 3-D weights `[E, N, K]` |
//! |                 | wgrad | two 2-D operands `[rows, N]`, `[rows, K]` with offsets |
//! | `offsets` | every GEMM | at least one expert |
//! | `element-format` | quantize, and GEMMs on a MX plugin | E4M3 (also E5M2 in the `alto-guard-e5m2` build), for the in-call format and every pre-quantized operand |
//! | `k-multiple-of-32` | GEMMs on a MX plugin | the contracted feature dim (forward: K, dgrad: N) and wgrad's K a multiple of 32 |
//! | `group-alignment` | GEMMs on a MX plugin | every cumulative offset a multiple of 32: each expert's rows start and end on a 32-row MX block (route with `align` 32 or 128) |
//!
//! "MX plugin" is any plugin but `bf16`: BF16 has no blocks, so block rules do not apply.

use mxhost_guest::guard_bindings::mxhost::runtime::dispatch::{DispatchRequest, Op, OperandInfo};
use mxhost_guest::guard_bindings::mxhost::runtime::types::ElementFormat;

pub const BLOCK: u64 = 32;

/// The guard component of one build: `alto_guard!(allow_e5m2)` at the crate root of
/// each binary (`src/main.rs`: E4M3 only, `src/e5m2.rs`: E5M2 allowed too). The format
/// choice is compile-time configuration: a guard sees only the request.
macro_rules! alto_guard {
    ($allow_e5m2:expr) => {
        struct AltoGuard;

        impl mxhost_guest::guard_bindings::Guest for AltoGuard {
            fn check(
                request: mxhost_guest::guard_bindings::mxhost::runtime::dispatch::DispatchRequest,
            ) -> Result<(), String> {
                rules::check(&request, $allow_e5m2)
            }
        }

        mxhost_guest::guard_bindings::export_guard!(AltoGuard);

        fn main() {}
    };
}

fn reject(rule: &str, why: String) -> Result<(), String> {
    Err(format!("rule `{rule}`: {why}"))
}

fn op_name(op: Op) -> &'static str {
    match op {
        Op::Quantize => "quantize",
        Op::Forward => "forward",
        Op::Dgrad => "dgrad",
        Op::Wgrad => "wgrad",
    }
}

fn format_name(f: ElementFormat) -> &'static str {
    match f {
        ElementFormat::E4m3 => "e4m3",
        ElementFormat::E5m2 => "e5m2",
    }
}

fn check_format(what: &str, f: ElementFormat, allow_e5m2: bool) -> Result<(), String> {
    if f == ElementFormat::E5m2 && !allow_e5m2 {
        return reject(
            "element-format",
            format!(
                "{what} is {}, but V1 MXFP8 is E4M3 only (use the alto-guard-e5m2 build to allow E5M2)",
                format_name(f)
            ),
        );
    }
    Ok(())
}

fn rank(o: &OperandInfo) -> usize {
    o.shape.len()
}

pub fn check(r: &DispatchRequest, allow_e5m2: bool) -> Result<(), String> {
    let op = op_name(r.op);
    if r.op == Op::Quantize {
        return check_format("the quantize format", r.format, allow_e5m2);
    }
    for (on, rule, what) in [
        (r.hadamard, "no-hadamard", "a Hadamard transform"),
        (r.dge, "no-dge", "DGE"),
        (r.bias, "no-bias", "a fused bias"),
    ] {
        if on {
            return reject(
                rule,
                format!("{op} asks for {what}, which V1 MXFP8 grouped GEMM does not support"),
            );
        }
    }
    if r.operands.len() != 2 {
        return reject(
            "operand-ranks",
            format!("{op} has {} operands, expected 2", r.operands.len()),
        );
    }
    let (a, b) = (&r.operands[0], &r.operands[1]);
    let want = if r.op == Op::Wgrad { (2, 2) } else { (2, 3) };
    if (rank(a), rank(b)) != want {
        let expect = if r.op == Op::Wgrad {
            "2-D dy [rows, N] and 2-D x [rows, K] with offsets"
        } else {
            "2-D activations [rows, K] and 3-D weights [E, N, K] with offsets"
        };
        return reject(
            "operand-ranks",
            format!(
                "{op} got shapes {:?} and {:?}; V1 takes {expect}",
                a.shape, b.shape
            ),
        );
    }
    if r.offs.is_empty() {
        return reject("offsets", format!("{op} has no expert offsets"));
    }
    if r.plugin == "bf16" {
        return Ok(());
    }
    check_format("the in-call element format", r.format, allow_e5m2)?;
    for (i, o) in r.operands.iter().enumerate() {
        if let Some(spec) = &o.mx {
            check_format(
                &format!("pre-quantized operand {i}"),
                spec.format,
                allow_e5m2,
            )?;
        }
    }
    let (dim, name) = match r.op {
        Op::Forward => (a.shape[1], "K (x's columns, the contracted dimension)"),
        Op::Dgrad => (a.shape[1], "N (dy's columns, the contracted dimension)"),
        _ => (b.shape[1], "K (x's columns)"),
    };
    if dim % BLOCK != 0 {
        return reject(
            "k-multiple-of-32",
            format!("{op}: {name} = {dim} is not a multiple of the 32-element MX block"),
        );
    }
    if let Some((e, &o)) = r
        .offs
        .iter()
        .enumerate()
        .find(|(_, &o)| o as i64 % BLOCK as i64 != 0)
    {
        return reject(
            "group-alignment",
            format!(
                "{op}: offs[{e}] = {o} is not a multiple of 32, so expert {e}'s rows do not end on a 32-row MX block (pad groups with align 32 or 128; the bf16 plugin has no such rule)"
            ),
        );
    }
    Ok(())
}
