//! Python experiments: `mxhost run app.py` builds the script into a component of world
//! `experiment` with [componentize-py](https://github.com/bytecodealliance/componentize-py)
//! and runs that, exactly like a Rust guest (same WIT, host and plugins).
//!
//! The build wraps the script in a generated entry module (`mxhost_entry.py`, which
//! calls `mxhost_guest.entry.load_script`: the script's `run(args)` becomes the export,
//! and any Python exception comes back as `err(traceback)`), with the Python SDK
//! (`guest-sdk-py/`), the script's directory and the entry module on the Python path,
//! and the repository's `wit/` directory.
//!
//! Built components are cached in [`cache_dir`] under a SHA-256 of everything that goes
//! into them: the script and the other `.py` files of its directory, the SDK's `.py`
//! files, the WIT files and `componentize-py --version`. An unchanged script starts
//! without rebuilding; wasmtime's compiled-code cache then skips compilation too.
//!
//! Where things are found (first hit wins):
//! - componentize-py: `$MXHOST_COMPONENTIZE_PY`, `<repo>/.venv-py/bin/componentize-py`,
//!   `componentize-py` on `PATH`;
//! - WIT and SDK: `$MXHOST_WIT_DIR` / `$MXHOST_PY_SDK`, else the repository this binary
//!   was built from (`wit/`, `guest-sdk-py/`; the path is embedded at build time), else
//!   `wit/` and `guest-sdk-py/` next to the `mxhost` binary;
//! - cache: `$MXHOST_CACHE_DIR/python`, `$XDG_CACHE_HOME/mxhost/python`,
//!   `~/.cache/mxhost/python`.

use anyhow::{bail, Context};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// The componentize-py release the SDK is tested with (used in the install hint).
pub const COMPONENTIZE_PY_VERSION: &str = "0.25.1";

/// Name of the generated entry module.
const ENTRY_MODULE: &str = "mxhost_entry";

/// Is this guest path a Python script?
pub fn is_python(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "py")
}

/// The component to run for `guest`: the path itself for a `.wasm`, the (cached) build of
/// a `.py` script. Reports on stderr whether the build was cached.
pub fn guest_component(guest: &Path) -> anyhow::Result<PathBuf> {
    if !is_python(guest) {
        return Ok(guest.to_path_buf());
    }
    let built = build(guest)?;
    if built.cached {
        eprintln!(
            "mxhost: python: using cached component {}",
            built.component.display()
        );
    } else {
        eprintln!(
            "mxhost: python: built {} with componentize-py {} in {:.1} s ({})",
            guest.display(),
            built.componentize_version,
            built.build_seconds,
            built.component.display()
        );
    }
    Ok(built.component)
}

/// The result of [`build`].
#[derive(Debug, Clone)]
pub struct Built {
    pub component: PathBuf,
    /// The component was already in the cache.
    pub cached: bool,
    pub build_seconds: f64,
    pub componentize_version: String,
}

/// The repository this binary was built from (where `wit/`, `guest-sdk-py/` and
/// `.venv-py/` live), if it still exists.
pub fn repo_root() -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent()?;
    root.join("wit").is_dir().then(|| root.to_path_buf())
}

fn exe_dir() -> Option<PathBuf> {
    std::env::current_exe()
        .ok()?
        .parent()
        .map(Path::to_path_buf)
}

/// A directory from `$var`, the repository, or next to the binary.
fn locate_dir(var: &str, name: &str) -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os(var) {
        let p = PathBuf::from(p);
        if !p.is_dir() {
            bail!("${var} = {} is not a directory", p.display());
        }
        return Ok(p);
    }
    let candidates: Vec<PathBuf> = [repo_root(), exe_dir()]
        .into_iter()
        .flatten()
        .map(|d| d.join(name))
        .collect();
    candidates
        .iter()
        .find(|p| p.is_dir())
        .cloned()
        .with_context(|| {
            format!(
                "cannot find `{name}/` for building Python experiments (looked in {}); set ${var}",
                candidates
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
}

/// The WIT directory Python guests are built against.
pub fn wit_dir() -> anyhow::Result<PathBuf> {
    locate_dir("MXHOST_WIT_DIR", "wit")
}

/// The Python SDK directory (holding the `mxhost_guest` package).
pub fn sdk_dir() -> anyhow::Result<PathBuf> {
    let dir = locate_dir("MXHOST_PY_SDK", "guest-sdk-py")?;
    if !dir.join("mxhost_guest").join("__init__.py").is_file() {
        bail!(
            "{} does not hold the Python SDK (mxhost_guest/__init__.py)",
            dir.display()
        );
    }
    Ok(dir)
}

/// The one command that installs componentize-py where mxhost looks for it.
pub fn install_hint() -> String {
    let venv = repo_root()
        .map(|r| r.join(".venv-py"))
        .unwrap_or_else(|| PathBuf::from(".venv-py"));
    format!(
        "python3 -m venv {v} && {v}/bin/pip install componentize-py=={COMPONENTIZE_PY_VERSION}",
        v = venv.display()
    )
}

/// The componentize-py executable.
pub fn componentize_py() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("MXHOST_COMPONENTIZE_PY") {
        let p = PathBuf::from(p);
        if !p.is_file() {
            bail!(
                "$MXHOST_COMPONENTIZE_PY = {} does not exist; install componentize-py with:\n    {}",
                p.display(),
                install_hint()
            );
        }
        return Ok(p);
    }
    if let Some(p) = repo_root()
        .map(|r| r.join(".venv-py/bin/componentize-py"))
        .filter(|p| p.is_file())
    {
        return Ok(p);
    }
    if let Some(p) = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join("componentize-py"))
            .find(|p| p.is_file())
    }) {
        return Ok(p);
    }
    bail!(
        "running a Python experiment needs componentize-py, which is not installed; install it with:\n    {}\n(or point $MXHOST_COMPONENTIZE_PY at a componentize-py executable)",
        install_hint()
    )
}

/// The cache directory for built Python components (created if missing).
pub fn cache_dir() -> anyhow::Result<PathBuf> {
    let base = if let Some(d) = std::env::var_os("MXHOST_CACHE_DIR") {
        PathBuf::from(d)
    } else if let Some(d) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        PathBuf::from(d).join("mxhost")
    } else if let Some(h) = std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        PathBuf::from(h).join(".cache").join("mxhost")
    } else {
        std::env::temp_dir().join("mxhost-cache")
    };
    let dir = base.join("python");
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("creating the Python build cache {}", dir.display()))?;
    Ok(dir)
}

fn componentize_version(exe: &Path) -> anyhow::Result<String> {
    let out = Command::new(exe)
        .arg("--version")
        .output()
        .with_context(|| format!("running {} --version", exe.display()))?;
    if !out.status.success() {
        bail!(
            "{} --version failed: {}",
            exe.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .trim()
        .trim_start_matches("componentize-py")
        .trim()
        .to_string())
}

/// Files of `dir` (recursively when `deep`) whose name ends with one of `exts`, sorted,
/// skipping `__pycache__` and hidden entries.
fn files(dir: &Path, exts: &[&str], deep: bool) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).with_context(|| format!("reading {}", d.display()))? {
            let path = entry?.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if name.starts_with('.') || name == "__pycache__" {
                continue;
            }
            if path.is_dir() {
                if deep {
                    stack.push(path);
                }
            } else if exts.iter().any(|e| name.ends_with(e)) {
                out.push(path);
            }
        }
    }
    out.sort();
    Ok(out)
}

fn hash_files(h: &mut Sha256, tag: &str, root: &Path, paths: &[PathBuf]) -> anyhow::Result<()> {
    for p in paths {
        let bytes = std::fs::read(p).with_context(|| format!("reading {}", p.display()))?;
        let rel = p.strip_prefix(root).unwrap_or(p).to_string_lossy();
        for part in [
            tag.as_bytes(),
            rel.as_bytes(),
            &(bytes.len() as u64).to_le_bytes(),
        ] {
            h.update((part.len() as u64).to_le_bytes());
            h.update(part);
        }
        h.update(&bytes);
    }
    Ok(())
}

/// A Python string literal (JSON's escapes are valid Python).
fn py_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "''".into())
}

fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

/// Build `script` into a component (or find it in the cache).
pub fn build(script: &Path) -> anyhow::Result<Built> {
    let script = std::fs::canonicalize(script)
        .with_context(|| format!("reading the Python experiment {}", script.display()))?;
    let module = script
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default()
        .to_string();
    if !is_identifier(&module) || module == ENTRY_MODULE {
        bail!(
            "{}: a Python experiment's file name must be a valid module name (letters, digits, `_`), e.g. toy_moe.py",
            script.display()
        );
    }
    let script_dir = script
        .parent()
        .context("script has no directory")?
        .to_path_buf();
    let exe = componentize_py()?;
    let version = componentize_version(&exe)?;
    let (wit, sdk) = (wit_dir()?, sdk_dir()?);

    let mut h = Sha256::new();
    h.update(b"mxhost-python-component-v1\0");
    h.update(version.as_bytes());
    h.update(b"\0");
    h.update(module.as_bytes());
    h.update(b"\0");
    // The directory too: tracebacks name the script's host path.
    h.update(script_dir.to_string_lossy().as_bytes());
    h.update(b"\0");
    hash_files(&mut h, "script", &script_dir, std::slice::from_ref(&script))?;
    let siblings: Vec<PathBuf> = files(&script_dir, &[".py"], false)?
        .into_iter()
        .filter(|p| *p != script)
        .collect();
    hash_files(&mut h, "sibling", &script_dir, &siblings)?;
    hash_files(&mut h, "sdk", &sdk, &files(&sdk, &[".py"], true)?)?;
    hash_files(&mut h, "wit", &wit, &files(&wit, &[".wit"], true)?)?;
    let key: String = h
        .finalize()
        .iter()
        .take(16)
        .map(|b| format!("{b:02x}"))
        .collect();

    let cache = cache_dir()?;
    let component = cache.join(format!("{module}-{key}.wasm"));
    if component.is_file() {
        return Ok(Built {
            component,
            cached: true,
            build_seconds: 0.0,
            componentize_version: version,
        });
    }

    let started = Instant::now();
    let work = cache.join(format!("build-{key}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    let result = (|| -> anyhow::Result<()> {
        std::fs::write(
            work.join(format!("{ENTRY_MODULE}.py")),
            format!(
                "# Generated by mxhost for {}\nfrom mxhost_guest.entry import load_script\nWitWorld = load_script({module:?}, {{\"/1/\": {}, \"/2/\": {}}})\n",
                script.display(),
                py_str(&format!("{}/", script_dir.display())),
                py_str(&format!("{}/", sdk.display())),
            ),
        )?;
        let out_file = work.join("component.wasm");
        // -p order matters: componentize-py mounts the directories as /0/, /1/, /2/ (the
        // traceback path mapping above relies on it).
        let out = Command::new(&exe)
            .arg("-d")
            .arg(&wit)
            .args(["-w", "experiment", "componentize"])
            .arg("-p")
            .arg(&work)
            .arg("-p")
            .arg(&script_dir)
            .arg("-p")
            .arg(&sdk)
            .arg(ENTRY_MODULE)
            .arg("-o")
            .arg(&out_file)
            .current_dir(&work)
            .output()
            .with_context(|| format!("running {}", exe.display()))?;
        if !out.status.success() || !out_file.is_file() {
            let mut text = String::from_utf8_lossy(&out.stderr).into_owned();
            text.push_str(&String::from_utf8_lossy(&out.stdout));
            // componentize-py appends a long native backtrace; keep the Python part.
            if let Some(i) = text.find("\nStack backtrace:") {
                text.truncate(i);
            }
            bail!(
                "building {} with componentize-py {version} failed:\n{}",
                script.display(),
                text.trim_end()
            );
        }
        // Atomic publish: a concurrent build of the same key writes the same bytes.
        std::fs::rename(&out_file, &component)
            .with_context(|| format!("storing {}", component.display()))?;
        Ok(())
    })();
    let _ = std::fs::remove_dir_all(&work);
    result?;
    Ok(Built {
        component,
        cached: false,
        build_seconds: started.elapsed().as_secs_f64(),
        componentize_version: version,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_names() {
        assert!(is_identifier("toy_moe"));
        assert!(is_identifier("_x1"));
        assert!(!is_identifier("toy-moe"));
        assert!(!is_identifier("1x"));
        assert!(!is_identifier(""));
        assert!(is_python(Path::new("a/b.py")));
        assert!(!is_python(Path::new("a/b.wasm")));
    }
}
