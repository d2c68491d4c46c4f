//! The sandbox's capabilities and malformed components: nothing is granted by default,
//! `--allow-dir`/`--allow-env` grant exactly what they name, and files that are not
//! the right kind of component are refused with a clear message.

use mxhost_integration_tests::*;

fn temp_dir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("mxhost-sandbox-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn no_filesystem_or_environment_by_default() {
    let dir = temp_dir("none");
    std::fs::write(dir.join("secret.txt"), "secret").unwrap();
    let path = dir.join("secret.txt");
    let r = run_guest("fixtures", &[], &["read", path.to_str().unwrap()]);
    assert_eq!(r.code, Some(1), "{}", r.both());
    assert!(r.stderr.contains("cannot read"), "{}", r.stderr);
    let mut c = mxhost();
    c.env("MXHOST_SECRET", "s3cret")
        .arg("run")
        .arg(guest("fixtures"))
        .args(["--", "env", "MXHOST_SECRET"]);
    let r = run(&mut c);
    assert_eq!(r.code, Some(1), "{}", r.both());
    assert!(!r.stdout.contains("s3cret"));
}

#[test]
fn granted_directory_and_environment() {
    let dir = temp_dir("grant");
    std::fs::write(dir.join("hello.txt"), "hello from the host").unwrap();
    let ro = format!("{}:/data", dir.display());
    let r = run_guest(
        "fixtures",
        &["--allow-dir", &ro],
        &["read", "/data/hello.txt"],
    );
    assert_eq!(r.code, Some(0), "{}", r.both());
    assert!(r.stdout.contains("hello from the host"));
    // Read-only by default: writing fails; `:rw` allows it.
    let r = run_guest(
        "fixtures",
        &["--allow-dir", &ro],
        &["write", "/data/out.txt"],
    );
    assert_eq!(r.code, Some(1), "{}", r.both());
    assert!(!dir.join("out.txt").exists());
    let rw = format!("{}:/data:rw", dir.display());
    let r = run_guest(
        "fixtures",
        &["--allow-dir", &rw],
        &["write", "/data/out.txt"],
    );
    assert_eq!(r.code, Some(0), "{}", r.both());
    assert_eq!(
        std::fs::read_to_string(dir.join("out.txt")).unwrap(),
        "written by a guest"
    );
    let r = run_guest(
        "fixtures",
        &["--allow-env", "GREETING=hi"],
        &["env", "GREETING"],
    );
    assert_eq!(r.code, Some(0), "{}", r.both());
    assert!(r.stdout.contains("hi"));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn malformed_and_wrong_world_components_are_refused() {
    let dir = temp_dir("bad");
    let junk = dir.join("junk.wasm");
    std::fs::write(&junk, b"\0asm\x0d\0\x01\0garbage").unwrap();
    let r = run(mxhost().arg("run").arg(&junk));
    assert_eq!(r.code, Some(1), "{}", r.both());
    assert!(
        r.stderr.contains("is not a valid WebAssembly component"),
        "{}",
        r.stderr
    );
    // An experiment given where a guard is expected.
    let hello = guest("hello-gemm");
    let r = run(mxhost()
        .arg("run")
        .arg(guest("fixtures"))
        .arg("--guard")
        .arg(&hello)
        .args(["--", "ok"]));
    assert_eq!(r.code, Some(1), "{}", r.both());
    assert!(
        r.stderr.contains("is not a guard component"),
        "{}",
        r.stderr
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn guest_clocks_are_coarse() {
    let r = run_guest("fixtures", &[], &["clock"]);
    assert_eq!(r.code, Some(0), "{}", r.both());
    let lines: Vec<&str> = r
        .stdout
        .lines()
        .filter(|l| l.split_whitespace().count() == 2)
        .collect();
    assert_eq!(lines.len(), 5, "{}", r.stdout);
    for l in lines {
        assert!(
            l.split_whitespace().all(|v| v == "0"),
            "sub-millisecond clock part in `{l}`"
        );
    }
}
