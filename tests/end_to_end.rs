//! The Foundation's happy path: hello-gemm through the real host and both plugins.

use mxhost_integration_tests::*;

/// (plugin, pass, SNR vs unquantized, SNR vs dequantized) rows of hello-gemm's table.
fn snr_rows(stdout: &str) -> Vec<(String, String, f64, Option<f64>)> {
    stdout
        .lines()
        .filter(|l| l.starts_with("mxfp8 ") || l.starts_with("bf16 "))
        .map(|l| {
            let t: Vec<&str> = l.split_whitespace().collect();
            let db: Vec<f64> = t
                .windows(2)
                .filter(|w| w[1] == "dB")
                .map(|w| w[0].parse().unwrap())
                .collect();
            (
                t[0].to_string(),
                t[1].to_string(),
                db[0],
                db.get(1).copied(),
            )
        })
        .collect()
}

#[test]
fn hello_gemm_meets_the_snr_gates_on_both_plugins() {
    let r = run_guest("hello-gemm", &[], &[]);
    assert_eq!(r.code, Some(0), "{}", r.both());
    let rows = snr_rows(&r.stdout);
    for pass in ["forward", "dgrad", "wgrad"] {
        let mx: Vec<_> = rows
            .iter()
            .filter(|r| r.0 == "mxfp8" && r.1 == pass)
            .collect();
        assert!(!mx.is_empty(), "no mxfp8 {pass} row in:\n{}", r.stdout);
        for row in &mx {
            assert!(
                row.2 >= 25.0 && row.2 < 45.0,
                "mxfp8 {pass} vs unquantized {} dB is not E4M3-like",
                row.2
            );
            if let Some(d) = row.3 {
                assert!(d >= 90.0, "mxfp8 {pass} vs dequantized {d} dB < 90");
            }
        }
        assert!(
            mx.iter().any(|row| row.3.is_some()),
            "no dequantized-reference row for {pass}"
        );
        let bf: Vec<_> = rows
            .iter()
            .filter(|r| r.0 == "bf16" && r.1 == pass)
            .collect();
        assert_eq!(bf.len(), 1, "one bf16 {pass} row expected");
        // BF16 operands carry 8 mantissa bits against E4M3's 4: clearly more accurate.
        assert!(
            bf[0].2 > mx[0].2 + 10.0,
            "bf16 {pass} {} dB vs mxfp8 {} dB",
            bf[0].2,
            mx[0].2
        );
    }
}

#[test]
fn different_seeds_give_different_data_but_pass() {
    let a = run_guest("hello-gemm", &[], &["1"]);
    let b = run_guest("hello-gemm", &[], &["2"]);
    assert_eq!(a.code, Some(0), "{}", a.both());
    assert_eq!(b.code, Some(0), "{}", b.both());
    assert_ne!(
        snr_rows(&a.stdout),
        snr_rows(&b.stdout),
        "fresh inputs per seed"
    );
}

#[test]
fn metrics_csv_is_written_to_out() {
    let dir = std::env::temp_dir().join(format!("mxhost-e2e-{}", std::process::id()));
    let r = run_guest("hello-gemm", &["--out", dir.to_str().unwrap()], &[]);
    assert_eq!(r.code, Some(0), "{}", r.both());
    let csv = std::fs::read_to_string(dir.join("metrics.csv")).unwrap();
    assert!(csv.starts_with("name,step,value\n"));
    assert!(
        csv.lines().filter(|l| l.starts_with("snr_db/")).count() >= 9,
        "{csv}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn starting_on_bf16_and_listing_plugins() {
    let r = run_guest("hello-gemm", &["--plugin", "bf16"], &[]);
    assert_eq!(r.code, Some(0), "{}", r.both());
    assert!(r.stderr.contains("plugin `bf16`"), "{}", r.stderr);
    let list = run(mxhost().arg("plugins"));
    assert_eq!(list.code, Some(0));
    for name in ["mxfp8", "bf16"] {
        assert!(
            list.stdout.lines().any(|l| l.starts_with(name)),
            "{}",
            list.stdout
        );
    }
}

/// `chained-gemm` (plugin ABI capability bit 4) tells guests such as guest-sdk's
/// `GroupedLinear` to quantize a 32×32 weight with its transposed copy instead of its values:
/// mxfp8 reports it exactly when `MXHOST_MX_CHAIN` asks for the chained GEMM.
#[test]
fn mxfp8_reports_a_chained_gemm_only_under_mxhost_mx_chain() {
    for (value, want) in [
        (None, false),
        (Some("off"), false),
        (Some("on"), true),
        (Some("always"), true),
        (Some("sometimes"), false),
    ] {
        let mut cmd = mxhost();
        cmd.arg("plugins").env_remove("MXHOST_MX_CHAIN");
        if let Some(v) = value {
            cmd.env("MXHOST_MX_CHAIN", v);
        }
        let list = run(&mut cmd);
        assert_eq!(list.code, Some(0), "{}", list.both());
        let caps_of = |name: &str| {
            let line = list.stdout.lines().find(|l| l.starts_with(name));
            line.unwrap_or_else(|| panic!("{name} not listed: {}", list.stdout))
                .split_whitespace()
                .find(|w| w.contains("grouped-gemm"))
                .map(|w| w.split(',').map(str::to_string).collect::<Vec<_>>())
                .unwrap_or_else(|| panic!("no capabilities for {name}: {}", list.stdout))
        };
        let mx = caps_of("mxfp8");
        assert_eq!(
            mx.iter().any(|c| c == "chained-gemm"),
            want,
            "MXHOST_MX_CHAIN={value:?}: {mx:?}"
        );
        assert!(mx.iter().any(|c| c == "quantize"), "{mx:?}");
        assert!(
            !caps_of("bf16").iter().any(|c| c == "chained-gemm"),
            "{}",
            list.stdout
        );
    }
}

#[test]
fn unknown_plugin_and_missing_guest_are_clear_errors() {
    let r = run_guest("hello-gemm", &["--plugin", "fp4"], &[]);
    assert_eq!(r.code, Some(1));
    assert!(r.stderr.contains("no plugin named `fp4`"), "{}", r.stderr);
    let r = run(mxhost().args(["run", "/nonexistent/guest.wasm"]));
    assert_eq!(r.code, Some(1));
    assert!(
        r.stderr
            .contains("reading experiment /nonexistent/guest.wasm"),
        "{}",
        r.stderr
    );
}

#[test]
fn device_cuda_without_a_cuda_build_is_explained() {
    let r = run_guest("fixtures", &["--device", "cuda"], &["ok"]);
    if r.code == Some(0) {
        // A host with a usable CUDA device: nothing to explain.
        return;
    }
    assert_eq!(r.code, Some(1), "{}", r.both());
    assert!(
        r.stderr
            .contains("--device cuda was requested but CUDA is not available"),
        "{}",
        r.stderr
    );
}
