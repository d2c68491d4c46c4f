//! Bad guest inputs and bad plugins give clear, typed errors; the host never crashes.

use mxhost_integration_tests::*;

#[test]
fn invalid_requests_reach_the_guest_as_typed_errors() {
    let r = run_guest("fixtures", &[], &["errors"]);
    assert_eq!(r.code, Some(0), "{}", r.both());
    for (case, needle) in [
        ("offs non-monotonic", "non-decreasing"),
        ("offs negative", "non-negative"),
        ("offs past buffer", "only 10 rows"),
        ("offs wrong length", "3 experts"),
        ("K mismatch", "K = 32"),
        ("shape overflow", "overflows"),
        ("tensor budget", "tensor memory limit exceeded"),
        (
            "bf16 with MX operand",
            "does not accept pre-quantized operands",
        ),
        ("hadamard", "adamard"),
    ] {
        let line = r
            .stdout
            .lines()
            .find(|l| l.starts_with(case))
            .unwrap_or_else(|| panic!("no `{case}` line:\n{}", r.stdout));
        assert!(line.contains(needle), "`{case}`: {line}");
    }
}

#[test]
fn trapping_looping_and_hoarding_guests_are_stopped_with_the_limit_named() {
    let r = run_guest("fixtures", &[], &["trap"]);
    assert_eq!(r.code, Some(2), "{}", r.both());
    assert!(r.stderr.contains("guest trapped"), "{}", r.stderr);

    let r = run_guest("fixtures", &["--timeout-s", "0.5"], &["loop"]);
    assert_eq!(r.code, Some(2), "{}", r.both());
    assert!(r.stderr.contains("deadline of 0.5 s"), "{}", r.stderr);

    let r = run_guest("fixtures", &["--max-memory-mib", "64"], &["alloc"]);
    assert_eq!(r.code, Some(2), "{}", r.both());
    assert!(r.stderr.contains("memory limit of 64 MiB"), "{}", r.stderr);

    let r = run_guest("fixtures", &["--max-tensors", "500"], &["tensors"]);
    assert_eq!(r.code, Some(0), "{}", r.both());
    assert!(
        r.stdout
            .contains("created 500 tensors, then limit-exceeded"),
        "{}",
        r.stdout
    );
}

fn load_error(plugin: &str, mode: Option<&str>) -> String {
    let mut c = mxhost();
    c.arg("run")
        .arg(guest("fixtures"))
        .args(["--plugin", plugin, "--", "ok"]);
    if let Some(m) = mode {
        c.env("MXHOST_TEST_PLUGIN_MODE", m);
    }
    let r = run(&mut c);
    assert_eq!(r.code, Some(1), "{}", r.both());
    r.stderr
}

#[test]
fn broken_plugin_files_give_load_errors() {
    let e = load_error("/nonexistent/libplugin.so", None);
    assert!(e.contains("does not exist"), "{e}");

    let not_lib = std::env::temp_dir().join(format!("not-a-library-{}.so", std::process::id()));
    std::fs::write(&not_lib, b"this is text, not ELF").unwrap();
    let e = load_error(not_lib.to_str().unwrap(), None);
    assert!(e.contains("is not a loadable library"), "{e}");
    std::fs::remove_file(&not_lib).ok();

    let plugin = test_plugin();
    let p = plugin.to_str().unwrap();
    for (mode, needle) in [
        ("abi-major", "incompatible plugin ABI 99."),
        ("bad-magic", "bad magic number"),
        ("short-table", "plugin table is 16 bytes"),
        ("null", "returned a null table"),
    ] {
        let e = load_error(p, Some(mode));
        assert!(e.contains(needle), "{mode}: {e}");
    }

    // A real library without the entry symbol: the host's own libc-linked plugin
    // directory always has the bf16/mxfp8 libraries, so use a system library.
    if let Some(libm) = [
        "/lib/x86_64-linux-gnu/libm.so.6",
        "/usr/lib/x86_64-linux-gnu/libm.so.6",
        "/lib64/libm.so.6",
    ]
    .iter()
    .find(|p| std::path::Path::new(p).exists())
    {
        let e = load_error(libm, None);
        assert!(e.contains("does not export the entry symbol"), "{e}");
    }
}

#[test]
fn plugin_errors_and_panics_become_guest_errors() {
    let plugin = test_plugin();
    for (mode, needle) in [
        ("error", "test plugin fails on purpose"),
        ("panic", "plugin panicked: test plugin panics on purpose"),
    ] {
        let mut c = mxhost();
        c.arg("run").arg(guest("fixtures")).args([
            "--plugin",
            plugin.to_str().unwrap(),
            "--",
            "gemm",
        ]);
        c.env("MXHOST_TEST_PLUGIN_MODE", mode);
        let r = run(&mut c);
        assert_eq!(r.code, Some(1), "{}", r.both());
        assert!(r.stderr.contains(needle), "{mode}: {}", r.stderr);
        assert!(r.stderr.contains("backend-failure"), "{mode}: {}", r.stderr);
    }
}

#[test]
fn a_hanging_plugin_call_is_cut_off_by_the_watchdog() {
    let plugin = test_plugin();
    let mut c = mxhost();
    c.arg("run").arg(guest("fixtures")).args([
        "--plugin",
        plugin.to_str().unwrap(),
        "--plugin-timeout-s",
        "1",
        "--",
        "gemm",
    ]);
    c.env("MXHOST_TEST_PLUGIN_MODE", "hang");
    let start = std::time::Instant::now();
    let r = run(&mut c);
    assert_eq!(r.code, Some(1), "{}", r.both());
    assert!(
        r.stderr
            .contains("exceeded the watchdog limit of 1.0 s (--plugin-timeout-s)"),
        "{}",
        r.stderr
    );
    // The guest got its error after ~1 s, not after the plugin's 20 s sleep.
    assert!(
        start.elapsed() < std::time::Duration::from_secs(15),
        "{:?}",
        start.elapsed()
    );
}
