//! Python experiments (`mxhost run app.py`): the Python SNR and toy-MoE guests against
//! their Rust twins, Python exceptions reaching the user as tracebacks, and the build
//! cache. Needs componentize-py (`scripts/test.sh` installs it into `.venv-py/`).

use mxhost_integration_tests::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// A cache shared by the tests of this file (and kept between test runs), so each
/// script is built once.
fn shared_cache() -> PathBuf {
    release_dir()
        .parent()
        .unwrap()
        .join("mxhost-test-python-cache")
}

fn example(name: &str) -> PathBuf {
    root().join("guest-examples/python").join(name)
}

fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("mxhost-py-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn py_cmd(script: &Path, cache: &Path, flags: &[&str], args: &[&str]) -> Command {
    let mut c = mxhost();
    c.env("MXHOST_CACHE_DIR", cache)
        .arg("run")
        .arg(script)
        .args(flags)
        .arg("--")
        .args(args);
    c
}

fn run_py(script: &Path, flags: &[&str], args: &[&str]) -> Run {
    run(&mut py_cmd(script, &shared_cache(), flags, args))
}

/// The lines of a toy-moe report without the wall-clock numbers.
fn without_times(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .filter(|l| !l.starts_with("time:"))
        .map(|l| match l.rfind(' ') {
            // The per-run rows end with the run time ("  0.3s").
            Some(i) if l.ends_with('s') && (l.starts_with("mxfp8 ") || l.starts_with("bf16 ")) => {
                l[..i].trim_end().to_string()
            }
            _ => l.to_string(),
        })
        .collect()
}

/// Run the Rust twin of a Python example, when this tree has it (the Rust `snr` and
/// `toy-moe` guests may land separately; without them only the Python side is checked).
fn rust_twin(name: &str, flags: &[&str], args: &[&str]) -> Option<Run> {
    if !root()
        .join("guest-examples")
        .join(name)
        .join("Cargo.toml")
        .is_file()
    {
        eprintln!("no guest-examples/{name} in this tree: skipping the comparison with Rust");
        return None;
    }
    Some(run_guest(name, flags, args))
}

#[test]
fn python_snr_passes_its_gates_and_prints_the_rust_table() {
    let py = run_py(&example("snr.py"), &[], &[]);
    assert_eq!(py.code, Some(0), "{}", py.both());
    assert!(
        py.stdout.contains("all 36 rows pass the gates"),
        "{}",
        py.stdout
    );
    let Some(rs) = rust_twin("snr", &[], &[]) else {
        return;
    };
    assert_eq!(rs.code, Some(0), "{}", rs.both());
    // Same host calls, same FP64 references (summed in another order: equal at 0.1 dB).
    assert_eq!(py.stdout, rs.stdout, "Python and Rust SNR tables differ");
}

#[test]
fn python_toy_moe_gives_the_rust_losses() {
    let args = [
        "--steps", "8", "--tokens", "128", "--hidden", "64", "--ffn", "128", "--seed", "3",
    ];
    let dir = temp_dir("toy");
    let (py_out, rs_out) = (dir.join("py"), dir.join("rs"));
    let py = run_py(
        &example("toy_moe.py"),
        &["--out", py_out.to_str().unwrap()],
        &args,
    );
    // A run this short may miss the convergence criteria (exit code 1).
    assert!(matches!(py.code, Some(0) | Some(1)), "{}", py.both());
    assert!(
        py.stdout.contains("tail-mean ratio MXFP8/BF16"),
        "{}",
        py.both()
    );
    let csv = |d: &Path| std::fs::read_to_string(d.join("metrics.csv")).unwrap();
    let py_csv = csv(&py_out);
    assert!(
        py_csv.contains("loss/mxfp8") && py_csv.contains("loss/bf16"),
        "{py_csv}"
    );
    assert_eq!(py_csv.lines().count(), 1 + 2 * 8, "{py_csv}");
    assert!(py_out.join("loss.png").is_file());
    let Some(rs) = rust_twin("toy-moe", &["--out", rs_out.to_str().unwrap()], &args) else {
        return;
    };
    assert_eq!(
        py.code,
        rs.code,
        "python:\n{}\nrust:\n{}",
        py.both(),
        rs.both()
    );
    // Same host ops in the same order, the router backward emulating f32 (and musl's
    // expf) exactly, and the host's reductions deterministic (fixed chunks, ordered
    // sum): the recorded losses are identical to the last bit.
    assert_eq!(py_csv, csv(&rs_out), "Python and Rust losses differ");
    assert_eq!(without_times(&py.stdout), without_times(&rs.stdout));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn python_exceptions_reach_the_user_as_tracebacks() {
    let dir = temp_dir("exc");
    let script = dir.join("broken_experiment.py");
    std::fs::write(
        &script,
        r#"from mxhost_guest import Tensor, Failure

def helper_that_divides(n):
    return 1 / n

def run(args):
    if args == ["host"]:
        Tensor.from_f32([3], [1.0])       # the host refuses: invalid-argument
    if args == ["fail"]:
        raise Failure("criteria not met")
    x = Tensor.randn_f32([4, 4], 1)
    return str(helper_that_divides(len(args) * 0 + x.rows() - 4))
"#,
    )
    .unwrap();
    let r = run_py(&script, &[], &[]);
    assert_eq!(r.code, Some(1), "{}", r.both());
    for needle in [
        "Traceback (most recent call last)",
        "helper_that_divides",
        "ZeroDivisionError",
        "return 1 / n", // source lines, though the sandboxed guest reads no files
    ] {
        assert!(r.stderr.contains(needle), "no {needle:?} in:\n{}", r.stderr);
    }
    // File names are the host's, not componentize-py's /N/ mounts.
    let host_path = format!("File \"{}\"", script.canonicalize().unwrap().display());
    assert!(
        r.stderr.contains(&host_path),
        "no {host_path} in:\n{}",
        r.stderr
    );
    assert!(!r.stderr.contains("entry.py"), "{}", r.stderr);
    let r = run_py(&script, &[], &["host"]);
    assert_eq!(r.code, Some(1), "{}", r.both());
    assert!(r.stderr.contains("Traceback"), "{}", r.stderr);
    assert!(
        r.stderr
            .contains("invalid-argument: shape [3] holds 3 values"),
        "{}",
        r.stderr
    );
    let r = run_py(&script, &[], &["fail"]);
    assert_eq!(r.code, Some(1), "{}", r.both());
    assert!(
        r.stderr.contains("experiment failed: criteria not met"),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("Traceback"), "{}", r.stderr);

    // An exception at import time, and a script without `run`.
    let bad_import = dir.join("bad_import.py");
    std::fs::write(
        &bad_import,
        "import no_such_module_here\ndef run(args):\n    return 'x'\n",
    )
    .unwrap();
    let r = run_py(&bad_import, &[], &[]);
    assert_eq!(r.code, Some(1), "{}", r.both());
    assert!(r.stderr.contains("ModuleNotFoundError"), "{}", r.stderr);
    let no_run = dir.join("no_run.py");
    std::fs::write(&no_run, "x = 1\n").unwrap();
    let r = run_py(&no_run, &[], &[]);
    assert_eq!(r.code, Some(1), "{}", r.both());
    assert!(r.stderr.contains("defines no `run(args)`"), "{}", r.stderr);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn second_run_of_an_unchanged_script_reuses_the_cached_component() {
    let dir = temp_dir("cache");
    let cache = dir.join("cache");
    let script = dir.join("tiny.py");
    std::fs::write(
        &script,
        "from mxhost_guest import *\ndef run(args):\n    return 'tiny ' + plugin.active()\n",
    )
    .unwrap();
    let component = |stderr: &str, what: &str| -> PathBuf {
        let line = stderr
            .lines()
            .find(|l| l.contains(what))
            .unwrap_or_else(|| panic!("no {what:?} in:\n{stderr}"));
        let path = line
            .rsplit(['(', ' '])
            .next()
            .unwrap()
            .trim_end_matches(')');
        PathBuf::from(path)
    };
    let t = Instant::now();
    let first = run(&mut py_cmd(&script, &cache, &[], &[]));
    let first_s = t.elapsed().as_secs_f64();
    assert_eq!(first.code, Some(0), "{}", first.both());
    assert!(first.stdout.contains("tiny mxfp8"), "{}", first.stdout);
    let built = component(&first.stderr, "python: built");
    let mtime = std::fs::metadata(&built).unwrap().modified().unwrap();

    let t = Instant::now();
    let second = run(&mut py_cmd(&script, &cache, &[], &[]));
    let second_s = t.elapsed().as_secs_f64();
    assert_eq!(second.code, Some(0), "{}", second.both());
    assert!(second.stdout.contains("tiny mxfp8"));
    assert_eq!(component(&second.stderr, "using cached component"), built);
    assert_eq!(
        std::fs::metadata(&built).unwrap().modified().unwrap(),
        mtime
    );
    eprintln!("python start-up: first run {first_s:.2} s (build + compile), second {second_s:.2} s (cached)");

    // A changed script is a new component.
    std::fs::write(
        &script,
        "from mxhost_guest import *\ndef run(args):\n    return 'changed'\n",
    )
    .unwrap();
    let third = run(&mut py_cmd(&script, &cache, &[], &[]));
    assert_eq!(third.code, Some(0), "{}", third.both());
    assert!(third.stdout.contains("changed"));
    assert_ne!(component(&third.stderr, "python: built"), built);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn missing_componentize_py_says_how_to_install_it() {
    let mut c = py_cmd(&example("snr.py"), &shared_cache(), &[], &[]);
    c.env("MXHOST_COMPONENTIZE_PY", "/nonexistent/componentize-py");
    let r = run(&mut c);
    assert_eq!(r.code, Some(1), "{}", r.both());
    assert!(
        r.stderr.contains("pip install componentize-py=="),
        "{}",
        r.stderr
    );
}

/// `gemm.quantize_keep_values` reaches the host's `quantize-ext` from Python: the MX
/// tensor says it keeps its values, and a forward on it gives what the same forward on
/// plainly quantized operands gives (the same MX values; on the CPU the same bits).
#[test]
fn python_kept_values_reach_the_gemm() {
    let dir = temp_dir("kept");
    let script = dir.join("kept_values.py");
    std::fs::write(
        &script,
        r#"from mxhost_guest import Failure, Tensor, Tile32x32, gemm, mx_spec, plugin

def run(args):
    plugin.select("mxfp8")
    x = Tensor.randn_f32([64, 64], 1)
    w = Tensor.randn_f32([2, 32, 64], 2)
    offs = [32, 64]
    kx = gemm.quantize_keep_values(x, mx_spec())
    kw = gemm.quantize_keep_values(w, mx_spec(block=Tile32x32))
    qx, qw = gemm.quantize(x, mx_spec()), gemm.quantize(w, mx_spec(block=Tile32x32))
    if not (kx.has_values() and kw.has_values()) or qx.has_values():
        raise Failure("has_values does not follow keep-values")
    a = gemm.forward(kx, kw, offs).to_f32()
    b = gemm.forward(qx, qw, offs).to_f32()
    if a != b:
        raise Failure("kept values changed the result")
    return "kept values: same result"
"#,
    )
    .unwrap();
    let r = run_py(&script, &[], &[]);
    assert_eq!(r.code, Some(0), "{}", r.both());
    assert!(
        r.stdout.contains("kept values: same result"),
        "{}",
        r.both()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `gemm.quantize_with_wgrad_values` reaches the host from Python: the MX tensor is the plain
/// quantize's, and wgrad on the values gives the bits wgrad on the dense tensors gives. With
/// `weight=` (quantize-with-wgrad-values-for, ABI 1.9) the MX tensor is the same, and a weight
/// whose last axis is not x's is an invalid argument.
#[test]
fn python_wgrad_values_reach_the_gemm() {
    let dir = temp_dir("wgrad-values");
    let script = dir.join("wgrad_values.py");
    std::fs::write(
        &script,
        r#"from mxhost_guest import Failure, HostError, Tensor, Tile32x32, gemm, mx_spec, plugin

def run(args):
    plugin.select("mxfp8")
    x = Tensor.randn_f32([96, 64], 1)
    dy = Tensor.randn_f32([96, 32], 2)
    offs = [40, 40, 96]
    qx, _, xv = gemm.quantize_with_wgrad_values(x, mx_spec(), offs)
    _, _, dyv = gemm.quantize_with_wgrad_values(dy, mx_spec(), offs)
    if gemm.dequantize(qx).to_f32() != gemm.dequantize(gemm.quantize(x, mx_spec())).to_f32():
        raise Failure("the MX tensor differs from quantize's")
    a = gemm.wgrad(dyv, xv, offs).to_f32()
    b = gemm.wgrad(dy, x, offs).to_f32()
    if a != b:
        raise Failure("wgrad on the wgrad values differs")
    w = Tensor.randn_f32([3, 32, 64], 3)
    qw, qwt = gemm.quantize_with_transpose(w, mx_spec(block=Tile32x32), for_gemm=True)
    nx, _, _ = gemm.quantize_with_wgrad_values(x, mx_spec(), offs, for_gemm=True, weight=qw)
    if gemm.dequantize(nx).to_f32() != gemm.dequantize(qx).to_f32():
        raise Failure("naming the weight changed the MX tensor")
    try:
        gemm.quantize_with_wgrad_values(x, mx_spec(), offs, for_gemm=True, weight=qwt)
        raise Failure("a weight of the wrong shape was accepted")
    except HostError as e:
        if "weight" not in e.value.message:
            raise
    return "wgrad values: same result"
"#,
    )
    .unwrap();
    let r = run_py(&script, &[], &[]);
    assert_eq!(r.code, Some(0), "{}", r.both());
    assert!(
        r.stdout.contains("wgrad values: same result"),
        "{}",
        r.both()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
