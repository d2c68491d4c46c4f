//! Shared helpers for mxhost's fuzz targets.
//!
//! The validation and routing code under test lives in `host/src/validate.rs` and
//! `host/src/routing.rs`. Both files are pure (they depend only on
//! `mxhost-plugin-abi` and `thiserror`), so by default this crate compiles those exact
//! source files as its own `validate` and `routing` modules: the fuzz build then does
//! not instrument and build wasmtime (minutes on 2 cores). With `--features real-host`
//! the same modules are re-exported from the real `mxhost` crate instead.

#[cfg(not(feature = "real-host"))]
#[path = "../../host/src/validate.rs"]
pub mod validate;

#[cfg(not(feature = "real-host"))]
#[path = "../../host/src/routing.rs"]
pub mod routing;

#[cfg(feature = "real-host")]
pub use mxhost::{routing, validate};

use arbitrary::{Arbitrary, Unstructured};

/// `true` when the finding `name` (reproducers `fuzz/artifacts-found/<name>*`) should
/// be stepped over: `MXHOST_FUZZ_SKIP_KNOWN` is `all` or a comma-separated list holding
/// `name`. Targets then return early on inputs that hit that finding, so a run can look
/// past a known, unfixed bug. Unset (the default), every check is live.
pub fn skip_known(name: &str) -> bool {
    static SKIP: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    let list = SKIP.get_or_init(|| {
        std::env::var("MXHOST_FUZZ_SKIP_KNOWN")
            .unwrap_or_default()
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect()
    });
    list.iter().any(|s| s == "all" || s == name)
}

/// A dimension biased towards the interesting values: small, around 32-multiples,
/// powers of two, near u32/u64 limits, or anything.
#[derive(Debug, Clone, Copy)]
pub struct Dim(pub u64);

impl<'a> Arbitrary<'a> for Dim {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        let tag: u8 = u.arbitrary()?;
        Ok(Dim(match tag % 8 {
            0 | 1 => u.int_in_range(0..=8)?,
            2 => u.int_in_range(0..=300)?,
            3 => (32 * u.int_in_range(0..=8u64)? + u.int_in_range(0..=2u64)?).saturating_sub(1),
            4 => 1u64 << u.int_in_range(0..=63)?,
            5 => u64::MAX - u.int_in_range(0..=3u64)?,
            6 => (u32::MAX as u64 - 1) + u.int_in_range(0..=2u64)?,
            _ => u.arbitrary()?,
        }))
    }
}

/// For each element of a row-major tensor of `shape`, the index of its scale in the
/// row-major scale tensor, when blocks run along `axis` (1×32 vectors) or over the last
/// two axes (`tile`, 32×32). Plain coordinate arithmetic, independent of the plugin.
pub fn block_table(shape: &[u64], tile: bool, axis: usize) -> Vec<usize> {
    let dims: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
    let rank = dims.len();
    let n: usize = dims.iter().product();
    let blocked = |ax: usize| if tile { ax + 2 >= rank } else { ax == axis };
    let sdims: Vec<usize> = (0..rank)
        .map(|ax| {
            if blocked(ax) {
                dims[ax].div_ceil(32)
            } else {
                dims[ax]
            }
        })
        .collect();
    let mut coord = vec![0usize; rank];
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let mut s = 0;
        for ax in 0..rank {
            let c = if blocked(ax) {
                coord[ax] / 32
            } else {
                coord[ax]
            };
            s = s * sdims[ax] + c;
        }
        out.push(s);
        for ax in (0..rank).rev() {
            coord[ax] += 1;
            if coord[ax] < dims[ax] {
                break;
            }
            coord[ax] = 0;
        }
    }
    out
}
