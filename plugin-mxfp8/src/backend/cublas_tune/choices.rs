//! The choices of [`super`]: their text form, the process's map and the file
//! `cublas-choices.txt` in the kernel cache directory that keeps them for later processes.

use super::StridedGemm;
use cudarc::cublaslt::sys as lt;
use cudarc::driver::sys as cu;
use mxhost_plugin_common::cuda::current_context;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// Which algorithm a problem runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    /// `cublasGemmStridedBatchedEx` with `CUBLAS_GEMM_DEFAULT`.
    Default,
    /// `cublasLtMatmul` with this algorithm (its workspace in bytes).
    Lt([u64; 8], usize),
}

impl Choice {
    fn to_text(self) -> String {
        match self {
            Choice::Default => "default".to_string(),
            Choice::Lt(d, ws) => {
                let words: Vec<String> = d.iter().map(|w| format!("{w:016x}")).collect();
                format!("lt:{}:{ws}", words.join(","))
            }
        }
    }

    fn from_text(s: &str) -> Option<Choice> {
        if s == "default" {
            return Some(Choice::Default);
        }
        let rest = s.strip_prefix("lt:")?;
        let (words, ws) = rest.rsplit_once(':')?;
        let v: Vec<u64> = words
            .split(',')
            .map(|w| u64::from_str_radix(w, 16).ok())
            .collect::<Option<_>>()?;
        Some(Choice::Lt(v.try_into().ok()?, ws.parse().ok()?))
    }
}
/// The problem's choice: this process's for the current context, else the choices file's
/// for this GPU and library (then kept for the process). The file and the GPU's name are
/// only read when the process has none, so a known problem costs one map lookup.
pub(super) fn known(g: &StridedGemm) -> Option<Choice> {
    let key = (current_context(), *g);
    let mut map = process_map().lock().unwrap_or_else(|e| e.into_inner());
    if let Some(c) = map.get(&key) {
        return Some(*c);
    }
    let c = *file_choices().get(&file_key(g))?;
    map.insert(key, c);
    Some(c)
}

/// Keeps `c` as the problem's choice for the current context and, with `persist`, in the
/// choices file.
pub(super) fn keep(g: &StridedGemm, c: Choice, persist: bool) {
    process_map()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert((current_context(), *g), c);
    if persist {
        save(&file_key(g), c);
    }
}

fn process_map() -> &'static Mutex<HashMap<(usize, StridedGemm), Choice>> {
    static M: OnceLock<Mutex<HashMap<(usize, StridedGemm), Choice>>> = OnceLock::new();
    M.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The choices file as read once per process, keyed by its lines' keys ([`file_key`]).
fn file_choices() -> &'static HashMap<String, Choice> {
    static F: OnceLock<HashMap<String, Choice>> = OnceLock::new();
    F.get_or_init(load_file)
}

/// A problem's key in the file: the GPU, the library version and the problem.
fn file_key(g: &StridedGemm) -> String {
    format!("{}|{}", device_tag(), g.key_text())
}

fn file_path() -> Option<std::path::PathBuf> {
    crate::kernels::cache_dir().map(|d| d.join("cublas-choices.txt"))
}

/// The choices file's lines `key|choice`; unreadable or malformed lines are skipped.
fn load_file() -> HashMap<String, Choice> {
    let text = file_path()
        .and_then(|p| std::fs::read_to_string(p).ok())
        .unwrap_or_default();
    parse_choices(&text)
}

fn parse_choices(text: &str) -> HashMap<String, Choice> {
    text.lines()
        .filter_map(|l| {
            let (k, c) = l.rsplit_once('|')?;
            Some((k.to_string(), Choice::from_text(c.trim())?))
        })
        .collect()
}

/// Appends one choice (best effort: a read-only cache only costs the timing again).
fn save(key: &str, c: Choice) {
    let Some(path) = file_path() else { return };
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    use std::io::Write;
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
    {
        let _ = writeln!(f, "{key}|{}", c.to_text());
    }
}

/// The current context's GPU name and cuBLASLt's version, the part of a key that makes a
/// choice valid only where it was made.
fn device_tag() -> String {
    let mut dev: cu::CUdevice = 0;
    let mut name = [0 as std::ffi::c_char; 128];
    // SAFETY: out-parameters; a context is current (the caller's call).
    let ok = unsafe {
        cu::cuCtxGetDevice(&mut dev) == cu::CUresult::CUDA_SUCCESS
            && cu::cuDeviceGetName(name.as_mut_ptr(), name.len() as i32, dev)
                == cu::CUresult::CUDA_SUCCESS
    };
    let name = if ok {
        // SAFETY: cuDeviceGetName wrote a NUL-terminated string into `name`.
        unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) }
            .to_string_lossy()
            .replace(['|', ' '], "_")
    } else {
        "unknown".to_string()
    };
    // SAFETY: no arguments.
    let version = unsafe { lt::cublasLtGetVersion() };
    format!("{name}:lt{version}")
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choices_survive_their_text_form() {
        let lt = Choice::Lt([1, 2, 0xdead_beef, 4, 5, 6, 7, u64::MAX], 4096);
        for c in [Choice::Default, lt] {
            assert_eq!(Choice::from_text(&c.to_text()), Some(c));
        }
        assert_eq!(
            Choice::from_text("lt:1,2:5"),
            None,
            "an algorithm is 8 words"
        );
        assert_eq!(Choice::from_text("fast"), None);
    }

    #[test]
    fn the_choices_file_keys_each_problem_by_its_whole_line() {
        let g = StridedGemm {
            trans_a: false,
            trans_b: true,
            m: 2048,
            n: 8192,
            k: 4096,
            lda: 2048,
            ldb: 8192,
            ldc: 2048,
            strides: (4096 * 2048, 4096 * 8192, 8192 * 2048),
            batch: 8,
            out_bf16: true,
        };
        let key = format!("H100:lt130002|{}", g.key_text());
        let text = format!(
            "{key}|default\nH100:lt130002|{}|{}\ngarbage line\n",
            StridedGemm { batch: 4, ..g }.key_text(),
            Choice::Lt([9; 8], 0).to_text()
        );
        let m = parse_choices(&text);
        assert_eq!(m.len(), 2);
        assert_eq!(m.get(&key), Some(&Choice::Default));
        assert!(!key.contains(' '));
        // a later line for the same problem wins (the file is appended to)
        let m = parse_choices(&format!(
            "{text}{key}|{}\n",
            Choice::Lt([3; 8], 64).to_text()
        ));
        assert_eq!(m.get(&key), Some(&Choice::Lt([3; 8], 64)));
    }
}
