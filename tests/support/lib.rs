//! Support for the integration tests: build the host, plugins and guests once (release
//! profile, the same artifacts the Quick start uses), and run `mxhost`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

pub fn release_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target"))
        .join("release")
}

pub fn wasm_dir() -> PathBuf {
    release_dir()
        .parent()
        .unwrap()
        .join("wasm32-wasip2")
        .join("release")
}

fn cargo(args: &[&str]) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args(args)
        .current_dir(root())
        .status()
        .expect("running cargo");
    assert!(status.success(), "cargo {args:?} failed");
}

/// Build everything the tests run (a no-op when up to date). Cargo releases its build
/// lock while tests run, so building from a test is safe.
pub fn build_all() {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        cargo(&[
            "build",
            "--release",
            "-p",
            "mxhost",
            "-p",
            "mxhost-plugin-mxfp8",
            "-p",
            "mxhost-plugin-bf16",
            "-p",
            "mxhost-test-plugin",
        ]);
        cargo(&[
            "build",
            "--release",
            "--target",
            "wasm32-wasip2",
            "-p",
            "hello-gemm",
            "-p",
            "fixtures",
            "-p",
            "topk-router",
            "-p",
            "alto-guard",
            "-p",
            "toy-moe",
            "-p",
            "snr",
            "-p",
            "moe-checks",
        ]);
    });
}

pub fn guest(name: &str) -> PathBuf {
    build_all();
    wasm_dir().join(format!("{name}.wasm"))
}

pub fn test_plugin() -> PathBuf {
    build_all();
    release_dir().join(format!(
        "{}mxhost_test_plugin{}",
        std::env::consts::DLL_PREFIX,
        std::env::consts::DLL_SUFFIX
    ))
}

/// The `mxhost` binary with plugins discovered next to it and no inherited plugin path.
pub fn mxhost() -> Command {
    build_all();
    let mut c = Command::new(release_dir().join("mxhost"));
    c.env_remove("MXHOST_PLUGIN_PATH");
    c
}

pub struct Run {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn both(&self) -> String {
        format!("{}\n{}", self.stdout, self.stderr)
    }
}

pub fn run(cmd: &mut Command) -> Run {
    let Output {
        status,
        stdout,
        stderr,
    } = cmd.output().expect("spawning mxhost");
    let r = Run {
        code: status.code(),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    };
    assert!(r.code.is_some(), "mxhost died from a signal:\n{}", r.both());
    r
}

/// Run `mxhost run <guest> [flags] -- [args]`.
pub fn run_guest(name: &str, flags: &[&str], args: &[&str]) -> Run {
    let mut c = mxhost();
    c.arg("run")
        .arg(guest(name))
        .args(flags)
        .arg("--")
        .args(args);
    run(&mut c)
}

/// In-process runs: a guest's configuration with the given limits and no grants.
pub fn in_process_config(
    name: &str,
    args: &[&str],
    limits: mxhost::limits::Limits,
) -> mxhost::runtime::run::RunConfig {
    mxhost::runtime::run::RunConfig {
        guest: guest(name),
        guards: vec![],
        router: None,
        limits,
        capabilities: Default::default(),
        args: args.iter().map(|s| s.to_string()).collect(),
    }
}

/// In-process runs: the plugins built next to `mxhost` (default `mxfp8`) and a quiet
/// metrics sink.
pub fn in_process_shared() -> std::sync::Arc<mxhost::runtime::state::Shared> {
    use std::sync::{Arc, Mutex};
    build_all();
    let plugins = Arc::new(
        mxhost::plugin::registry::PluginRegistry::open(&[release_dir()], "mxfp8").unwrap(),
    );
    Arc::new(mxhost::runtime::state::Shared {
        plugins,
        metrics: Arc::new(Mutex::new(mxhost::metrics::MetricsSink::new(false))),
    })
}
