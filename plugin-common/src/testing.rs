//! Test support shared by the plugins' test suites (feature `testing`): a seeded RNG,
//! an obviously-correct f64 grouped GEMM with the matching error bound, and where the
//! NVRTC compile tests find `libnvrtc`.

use mxhost_plugin_abi::{GemmPass, WeightLayout};

/// xorshift64*: deterministic, dependency-free.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
    /// Standard normal (Box–Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = self.uniform().max(1e-300);
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
    pub fn normals(&mut self, n: usize, scale: f64) -> Vec<f32> {
        (0..n).map(|_| (self.normal() * scale) as f32).collect()
    }
}

/// Naive grouped GEMM in f64 on f32 operands (`offs` = cumulative ends): forward
/// `A·W_eᵀ`, dgrad `dY·W_e`, wgrad `dY_eᵀ·X_e` stored per `layout`. Padding rows and
/// empty experts give zeros.
#[allow(clippy::too_many_arguments)]
pub fn reference_gemm(
    pass: GemmPass,
    layout: WeightLayout,
    a: &[f32],
    b: &[f32],
    offs: &[usize],
    rows: usize,
    n: usize,
    k: usize,
) -> Vec<f64> {
    let w = |e: usize, nn: usize, kk: usize| -> f64 {
        (match layout {
            WeightLayout::Nk => b[e * n * k + nn * k + kk],
            WeightLayout::Kn => b[e * n * k + kk * n + nn],
        }) as f64
    };
    let expert_of = |r: usize| offs.iter().position(|&end| r < end);
    match pass {
        GemmPass::Forward => {
            let mut out = vec![0f64; rows * n];
            for r in 0..rows {
                if let Some(e) = expert_of(r) {
                    for nn in 0..n {
                        out[r * n + nn] =
                            (0..k).map(|kk| a[r * k + kk] as f64 * w(e, nn, kk)).sum();
                    }
                }
            }
            out
        }
        GemmPass::Dgrad => {
            let mut out = vec![0f64; rows * k];
            for r in 0..rows {
                if let Some(e) = expert_of(r) {
                    for kk in 0..k {
                        out[r * k + kk] =
                            (0..n).map(|nn| a[r * n + nn] as f64 * w(e, nn, kk)).sum();
                    }
                }
            }
            out
        }
        GemmPass::Wgrad => {
            // a = dY [rows, n], b = X [rows, k]
            let mut out = vec![0f64; offs.len() * n * k];
            let mut start = 0;
            for (e, &end) in offs.iter().enumerate() {
                for nn in 0..n {
                    for kk in 0..k {
                        let v: f64 = (start..end)
                            .map(|r| a[r * n + nn] as f64 * b[r * k + kk] as f64)
                            .sum();
                        let idx = match layout {
                            WeightLayout::Nk => e * n * k + nn * k + kk,
                            WeightLayout::Kn => e * n * k + kk * n + nn,
                        };
                        out[idx] = v;
                    }
                }
                start = end;
            }
            out
        }
    }
}

/// The reference result and, per element, Σ|a·b| (the scale of the rounding error).
#[allow(clippy::too_many_arguments)]
pub fn reference_with_bound(
    pass: GemmPass,
    layout: WeightLayout,
    a: &[f32],
    b: &[f32],
    offs: &[usize],
    rows: usize,
    n: usize,
    k: usize,
) -> (Vec<f64>, Vec<f64>) {
    let abs = |x: &[f32]| x.iter().map(|v| v.abs()).collect::<Vec<f32>>();
    (
        reference_gemm(pass, layout, a, b, offs, rows, n, k),
        reference_gemm(pass, layout, &abs(a), &abs(b), offs, rows, n, k),
    )
}

/// Check `got` against a reference: every element written (not NaN) and within the
/// worst-case f32 summation error (depth + 2)·2^-24·Σ|a·b|. Returns the first failure.
pub fn check_close(got: &[f32], want: &[f64], absum: &[f64], depth: usize) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!("length {} != {}", got.len(), want.len()));
    }
    for (i, (&g, (&w, &s))) in got.iter().zip(want.iter().zip(absum)).enumerate() {
        let tol = (depth as f64 + 2.0) * 2f64.powi(-24) * s;
        if g.is_nan() {
            return Err(format!("element {i} not written (NaN)"));
        }
        if (g as f64 - w).abs() > tol {
            return Err(format!("element {i}: got {g}, want {w}, tol {tol:e}"));
        }
    }
    Ok(())
}

/// A host-memory [`TensorView`](mxhost_plugin_abi::TensorView) over `data` for ABI tests.
pub fn view<T>(
    data: &mut [T],
    dtype: mxhost_plugin_abi::DType,
    shape: &[u64],
) -> mxhost_plugin_abi::TensorView {
    let mut v = mxhost_plugin_abi::TensorView::empty();
    v.data = data.as_mut_ptr() as *mut std::ffi::c_void;
    v.dtype = dtype as u32;
    v.rank = shape.len() as u32;
    v.shape[..shape.len()].copy_from_slice(shape);
    v
}

/// Call a plugin entry with a 1 KiB error buffer; returns (status, message).
pub fn call_entry(
    f: impl FnOnce(*mut mxhost_plugin_abi::ErrorBuf) -> u32,
) -> (mxhost_plugin_abi::Status, String) {
    let mut storage = vec![0u8; 1024];
    let mut eb = mxhost_plugin_abi::ErrorBuf {
        struct_size: std::mem::size_of::<mxhost_plugin_abi::ErrorBuf>(),
        data: storage.as_mut_ptr(),
        capacity: storage.len(),
        len: 0,
    };
    let raw = f(&mut eb);
    (
        mxhost_plugin_abi::Status::from_raw(raw).expect("known status"),
        String::from_utf8(storage[..eb.len].to_vec()).unwrap(),
    )
}

/// The first directory holding `libnvrtc.so.13` among `$MXHOST_NVRTC_LIB_DIR`,
/// `$CUDA_HOME/lib64`, `/usr/local/cuda/lib64` and the development machine's CUDA 13.0
/// wheels: the plugins' NVRTC tests re-run themselves with it on `LD_LIBRARY_PATH`
/// (cudarc dlopens the library, so it must be on the path when the process starts).
pub fn nvrtc_lib_dir() -> Option<std::path::PathBuf> {
    let mut dirs: Vec<std::path::PathBuf> = Vec::new();
    if let Some(d) = std::env::var_os("MXHOST_NVRTC_LIB_DIR") {
        dirs.push(d.into());
    }
    if let Some(d) = std::env::var_os("CUDA_HOME") {
        dirs.push(std::path::PathBuf::from(d).join("lib64"));
    }
    dirs.push("/usr/local/cuda/lib64".into());
    dirs.push("/work/cuda-venv/lib/python3.11/site-packages/nvidia/cu13/lib".into());
    dirs.into_iter()
        .find(|d| d.join("libnvrtc.so.13").is_file())
}

/// `LD_LIBRARY_PATH` for a child process: `dir` (when given) in front of this process's.
pub fn ld_library_path_with(dir: Option<&std::path::Path>) -> std::ffi::OsString {
    let mut p = std::ffi::OsString::new();
    if let Some(d) = dir {
        p.push(d);
        p.push(":");
    }
    p.push(std::env::var_os("LD_LIBRARY_PATH").unwrap_or_default());
    p
}
