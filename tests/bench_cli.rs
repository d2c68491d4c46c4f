//! `mxhost bench` on the CPU (tiny custom shape): `--only` times exactly the rows it names,
//! and says so when it names none.

use mxhost_integration_tests::*;

/// The op labels of the rows `mxhost bench` printed for the custom shape `2:64:64:64`.
fn bench_ops(only: &str) -> (Vec<String>, String) {
    let r = run(mxhost().args([
        "bench",
        "--device",
        "cpu",
        "--shapes",
        "",
        "--shape",
        "2:64:64:64",
        "--reps",
        "1",
        "--only",
        only,
    ]));
    assert_eq!(r.code, Some(0), "{}", r.both());
    let prefix = "custom E2 M64 K64 N64";
    let ops = r
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix(prefix))
        // The label ends where the µs column starts: two or more spaces, then a number.
        .map(|rest| rest.trim().split("  ").next().unwrap().trim().to_string())
        .collect();
    (ops, r.stderr)
}

#[test]
fn only_times_the_rows_it_names() {
    let (ops, _) = bench_ops("QUANTIZE X 1x32 (,step:,step as GroupedLinear with 32x32");
    assert_eq!(
        ops,
        [
            "quantize X 1x32 (bf16→e4m3)",
            "training step: 3 GEMMs + all quantization (bf16 in)",
            "training step: 3 GEMMs + all quantization, X with 1 % outlier channels at 30x",
            "training step: 3 GEMMs + all quantization, X and dY with wgrad values",
            "training step as GroupedLinear with 32x32 weights (X and dY with wgrad values)"
        ],
        "rows timed"
    );
}

#[test]
fn only_without_a_match_says_so() {
    let (ops, stderr) = bench_ops("no such row");
    assert!(ops.is_empty(), "{ops:?}");
    assert!(
        stderr.contains("no row matched --only no such row"),
        "{stderr}"
    );
}
