//! Experiments in Wasm guests: the router guest, the alto-guard rules, toy-moe training
//! (MXFP8 vs BF16) and the SNR table, through the real `mxhost` and plugins.

use mxhost_integration_tests::*;
use std::path::PathBuf;

fn wasm(name: &str) -> String {
    guest(name).display().to_string()
}

fn route_line(stdout: &str) -> String {
    stdout
        .lines()
        .find(|l| l.starts_with("route:"))
        .unwrap_or_else(|| panic!("no route line in:\n{stdout}"))
        .to_string()
}

#[test]
fn built_in_router_plans_keep_the_invariants_through_dispatch_and_combine() {
    for case in [
        vec!["route"],
        vec!["route", "--align", "128", "--tokens", "777"],
        vec!["route", "--cf", "0.6", "--tokens", "512", "--no-renorm"],
    ] {
        let r = run_guest("moe-checks", &[], &case);
        assert_eq!(r.code, Some(0), "{case:?}: {}", r.both());
        assert!(r.stdout.contains("routing invariants hold"), "{}", r.stdout);
    }
}

#[test]
fn moe_layer_gradients_match_central_differences() {
    for case in [
        vec!["grad"],
        vec!["grad", "--no-renorm"],
        vec!["grad", "--act", "gelu"],
        vec!["grad", "--act", "silu"],
    ] {
        let r = run_guest("moe-checks", &[], &case);
        assert_eq!(r.code, Some(0), "{case:?}: {}", r.both());
        let params: Vec<&str> = r
            .stdout
            .lines()
            .filter_map(|l| l.strip_prefix("grad "))
            .map(|l| {
                let t: Vec<&str> = l.split_whitespace().collect();
                let ratio: f64 = t[3].parse().unwrap();
                assert!((0.95..=1.05).contains(&ratio), "{case:?}: {l}");
                t[0]
            })
            .collect();
        assert_eq!(params, ["router", "up", "down", "input"], "{}", r.stdout);
    }
}

#[test]

fn router_guest_plans_keep_the_invariants_and_match_the_built_in_router() {
    let router = wasm("topk-router");
    for case in [
        vec![],
        vec!["--align", "128", "--tokens", "777"],
        vec!["--k", "1", "--experts", "16", "--no-renorm"],
        vec!["--cf", "0.6", "--tokens", "512"],
        vec![
            "--k",
            "4",
            "--experts",
            "8",
            "--align",
            "1",
            "--tokens",
            "33",
        ],
    ] {
        let mut args = vec!["route"];
        args.extend(&case);
        let built_in = run_guest("moe-checks", &[], &args);
        assert_eq!(built_in.code, Some(0), "{case:?}: {}", built_in.both());
        let guest = run_guest("moe-checks", &["--router", &router], &args);
        assert_eq!(guest.code, Some(0), "{case:?}: {}", guest.both());
        assert!(
            guest.stdout.contains("routing invariants hold"),
            "{}",
            guest.stdout
        );
        // Same plan, bit for bit (the checksum covers rows, gates and offsets).
        assert_eq!(
            route_line(&built_in.stdout),
            route_line(&guest.stdout),
            "{case:?}"
        );
        let line = route_line(&guest.stdout);
        if case.contains(&"--cf") {
            let dropped: u32 = line
                .split("dropped ")
                .nth(1)
                .and_then(|s| s.split_whitespace().next())
                .and_then(|s| s.parse().ok())
                .unwrap();
            assert!(dropped > 0, "capacity 0.6 must drop some choices: {line}");
        } else {
            assert!(line.contains("dropped 0"), "{line}");
        }
    }
}

#[test]

fn a_failing_router_request_reaches_the_experiment_as_an_error() {
    let r = run_guest(
        "moe-checks",
        &["--router", &wasm("topk-router")],
        &["route", "--k", "9", "--experts", "8"],
    );
    assert_eq!(r.code, Some(1), "{}", r.both());
    assert!(r.both().contains("top-k"), "{}", r.both());
}

fn guard_lines(stdout: &str) -> Vec<(String, String)> {
    stdout
        .lines()
        .filter(|l| l.contains(" | "))
        .map(|l| {
            let (case, rest) = l.split_once(" | ").unwrap();
            (case.to_string(), rest.to_string())
        })
        .collect()
}

#[test]

fn alto_guard_accepts_and_rejects_each_rule() {
    let r = run_guest("moe-checks", &["--guard", &wasm("alto-guard")], &["guard"]);
    assert_eq!(r.code, Some(0), "{}", r.both());
    let lines = guard_lines(&r.stdout);
    let expect = [
        ("forward e4m3 aligned", None),
        ("dgrad e4m3 aligned", None),
        ("wgrad e4m3 aligned", None),
        ("forward 32x32 weights", None),
        ("forward empty expert", None),
        ("quantize e4m3", None),
        ("forward pre-quantized e4m3", None),
        ("quantize e5m2", Some("element-format")),
        ("forward e5m2 in-call", Some("element-format")),
        ("wgrad e5m2 in-call", Some("element-format")),
        ("forward hadamard", Some("no-hadamard")),
        ("forward dge", Some("no-dge")),
        ("dgrad bias", Some("no-bias")),
        ("forward unaligned offs", Some("group-alignment")),
        ("wgrad unaligned offs", Some("group-alignment")),
        ("forward K=48", Some("k-multiple-of-32")),
        ("dgrad N=48", Some("k-multiple-of-32")),
        ("bf16 forward unaligned offs", None),
        ("bf16 forward K=48", None),
        ("bf16 forward bias", Some("no-bias")),
    ];
    for (case, rule) in expect {
        let (_, outcome) = lines
            .iter()
            .find(|(c, _)| c == case)
            .unwrap_or_else(|| panic!("no `{case}` line:\n{}", r.stdout));
        match rule {
            None => assert_eq!(outcome, "accepted", "{case}"),
            Some(rule) => {
                assert!(
                    outcome.starts_with(
                        "rejected-by-guard | guard `alto-guard` rejected the call: rule `"
                    ) && outcome.contains(&format!("`{rule}`")),
                    "{case}: {outcome}"
                );
            }
        }
    }
    // Messages say why, not only which rule.
    let msg = |case: &str| lines.iter().find(|(c, _)| c == case).unwrap().1.clone();
    assert!(msg("forward unaligned offs").contains("offs[0] = 30"));
    assert!(msg("forward K=48").contains("K (x's columns, the contracted dimension) = 48"));
    assert!(msg("quantize e5m2").contains("E4M3 only"));
}

#[test]

fn the_e5m2_build_allows_e5m2_and_keeps_the_other_rules() {
    let r = run_guest(
        "moe-checks",
        &["--guard", &wasm("alto-guard-e5m2")],
        &["guard", "e5m2"],
    );
    assert_eq!(r.code, Some(0), "{}", r.both());
    let lines = guard_lines(&r.stdout);
    for case in [
        "quantize e5m2",
        "forward pre-quantized e5m2",
        "forward e5m2 in-call",
        "wgrad e5m2 in-call",
    ] {
        assert!(
            lines.iter().any(|(c, o)| c == case && o == "accepted"),
            "{case}:\n{}",
            r.stdout
        );
    }
    assert!(lines
        .iter()
        .any(|(c, o)| c == "forward unaligned offs" && o.contains("group-alignment")));
}

#[test]

fn guards_chain_in_order_and_the_first_rejection_wins() {
    // Unguarded, an unaligned E5M2 forward is fine.
    let r = run_guest("moe-checks", &[], &["unguarded-e5m2"]);
    assert_eq!(r.code, Some(0), "{}", r.both());
    // The E5M2 build rejects it for its alignment; the E4M3 build first for its format.
    let (e5, e4) = (wasm("alto-guard-e5m2"), wasm("alto-guard"));
    let r = run_guest(
        "moe-checks",
        &["--guard", &e5, "--guard", &e4],
        &["unguarded-e5m2"],
    );
    assert_eq!(r.code, Some(1), "{}", r.both());
    assert!(r.both().contains("rejected-by-guard"), "{}", r.both());
    assert!(
        r.both()
            .contains("guard `alto-guard-e5m2` rejected the call: rule `group-alignment`"),
        "{}",
        r.both()
    );
    let r = run_guest(
        "moe-checks",
        &["--guard", &e4, "--guard", &e5],
        &["unguarded-e5m2"],
    );
    assert!(
        r.both()
            .contains("guard `alto-guard` rejected the call: rule `element-format`"),
        "{}",
        r.both()
    );
    // hello-gemm's deliberately unaligned experts are outside the V1 rules.
    let r = run_guest("hello-gemm", &["--guard", &e4], &[]);
    assert_eq!(r.code, Some(1), "{}", r.both());
    assert!(r.both().contains("group-alignment"), "{}", r.both());
}

fn out_dir(name: &str) -> PathBuf {
    let d = release_dir().parent().unwrap().join("test-out").join(name);
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// (plugin, first, last, head mean, tail mean) rows of toy-moe's summary.
fn loss_rows(stdout: &str) -> Vec<(String, [f64; 4])> {
    stdout
        .lines()
        .filter(|l| l.starts_with("mxfp8 ") || l.starts_with("bf16 "))
        .map(|l| {
            let t: Vec<&str> = l.split_whitespace().collect();
            let v: Vec<f64> = t[1..5].iter().map(|s| s.parse().unwrap()).collect();
            (t[0].to_string(), [v[0], v[1], v[2], v[3]])
        })
        .collect()
}

#[test]
fn toy_moe_trains_with_both_plugins_and_writes_metrics() {
    let dir = out_dir("toy-moe");
    let r = run_guest(
        "toy-moe",
        &["--out", dir.to_str().unwrap()],
        &["--steps", "60", "--tokens", "512"],
    );
    assert_eq!(r.code, Some(0), "{}", r.both());
    assert!(r.stdout.contains("toy-moe: PASS"), "{}", r.stdout);
    let rows = loss_rows(&r.stdout);
    assert_eq!(rows.len(), 2, "{}", r.stdout);
    for (plugin, [first, last, head, tail]) in &rows {
        assert!(
            last < first && tail <= &(0.5 * head),
            "{plugin}: {}",
            r.stdout
        );
    }
    assert!(rows[0].1[3] <= 1.10 * rows[1].1[3], "{}", r.stdout);

    let csv = std::fs::read_to_string(dir.join("metrics.csv")).expect("metrics.csv");
    let mut lines = csv.lines();
    assert_eq!(lines.next(), Some("name,step,value"));
    let mut steps = std::collections::BTreeMap::<String, Vec<u64>>::new();
    for l in lines {
        let f: Vec<&str> = l.split(',').collect();
        assert_eq!(f.len(), 3, "{l}");
        let v: f64 = f[2].parse().unwrap_or_else(|_| panic!("value in {l}"));
        assert!(v.is_finite() && v >= 0.0, "{l}");
        steps
            .entry(f[0].to_string())
            .or_default()
            .push(f[1].parse().unwrap());
    }
    for name in ["loss/mxfp8", "loss/bf16"] {
        assert_eq!(steps[name], (0..60).collect::<Vec<u64>>(), "{name}");
    }
    let png = std::fs::read(dir.join("loss.png")).expect("loss.png");
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
}

#[test]
fn toy_moe_rejects_bad_arguments() {
    let r = run_guest("toy-moe", &[], &["--steps", "2"]);
    assert_eq!(r.code, Some(1), "{}", r.both());
    assert!(r.both().contains("--steps"), "{}", r.both());
}

#[test]
fn snr_table_meets_the_gates_for_every_format_mode_and_block() {
    let r = run_guest("snr", &[], &[]);
    assert_eq!(r.code, Some(0), "{}", r.both());
    let rows: Vec<(Vec<String>, Vec<f64>)> = r
        .stdout
        .lines()
        .filter(|l| {
            ["forward ", "dgrad ", "wgrad "]
                .iter()
                .any(|p| l.starts_with(p))
        })
        .map(|l| {
            let t: Vec<&str> = l.split_whitespace().collect();
            let db = t
                .windows(2)
                .filter(|w| w[1] == "dB")
                .map(|w| w[0].parse().unwrap())
                .collect();
            (t[..4].iter().map(|s| s.to_string()).collect(), db)
        })
        .collect();
    assert_eq!(rows.len(), 3 * 2 * 3 * 2, "{}", r.stdout);
    for (key, db) in &rows {
        assert_eq!(db.len(), 3, "{key:?}");
        let gate = if key[0] == "forward" { 20.0 } else { 15.0 };
        assert!(db[0] >= gate && db[1] >= gate, "{key:?}: {db:?}");
        if key[0] == "forward" {
            assert!(db[2] >= 40.0, "{key:?}: {db:?}");
        }
        // E4M3 carries one more mantissa bit than E5M2: about 6 dB better.
        let expect = if key[1] == "e4m3" {
            25.0..33.0
        } else {
            19.0..27.0
        };
        assert!(expect.contains(&db[0]), "{key:?}: {db:?}");
    }
}

#[test]

fn toy_moe_training_passes_the_alto_guard_with_the_router_guest() {
    // Every GEMM of a training step (aligned groups, E4M3, K = 256) is within V1's rules.
    let r = run_guest(
        "toy-moe",
        &[
            "--guard",
            &wasm("alto-guard"),
            "--router",
            &wasm("topk-router"),
        ],
        &["--steps", "10", "--tokens", "256", "--blocks-2d"],
    );
    assert!(!r.both().contains("rejected"), "{}", r.both());
    assert!(
        r.stdout.contains("tail-mean ratio MXFP8/BF16"),
        "{}",
        r.both()
    );
}
