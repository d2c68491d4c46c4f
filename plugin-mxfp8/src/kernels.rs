//! The CUDA kernel sources of the plugin and their run-time compilation with NVRTC.
//!
//! The `.cu`/`.cuh` files under `plugin-mxfp8/cuda/` are embedded with `include_str!`
//! and compiled for the device's architecture (`sm_90a` on Hopper) on first use. Each
//! compilation unit ([`Unit`]) is one module: the quantizer (+ scale relayout), the
//! backend's helper kernels (dequantize, byte transpose), and one grouped-GEMM variant
//! per (A format, B format, weight-scale kind, output dtype) and kernel family
//! (`mx_gemm_*` cp.async or `mx_tgemm_*` TMA), instantiated through
//! `MXG_CUSTOM_INSTANTIATIONS` so only what a request needs is compiled (~1 s each).
//!
//! On Hopper the units are compiled to cubins for [`HOPPER_ARCH`]. Every other GPU (compute
//! capability 8.0 or newer), or any GPU with `MXHOST_MX_PORTABLE` set, gets the **portable
//! build**: only the quantizer and helper units ([`Unit::PORTABLE`]), compiled to PTX for a
//! virtual architecture `compute_XY` that the driver JIT-compiles; kernels that need sm_90
//! (TMA) are compiled out, and FP8 conversions that need sm_89 use the software ones in
//! `mx_numerics.cuh`. The GEMMs then run as dequantize-to-BF16 + cuBLAS (backend::cuda).
//!
//! Compiled modules are cached on disk under `$MXHOST_KERNEL_CACHE`, else
//! `$XDG_CACHE_HOME/mxhost/kernels`, else `~/.cache/mxhost/kernels`, as
//! `<hash>.cubin` (or `.ptx`) where the hash covers the source, the options, the NVRTC
//! version and the driver version. A failed compilation returns NVRTC's log.
//!
//! Nothing here needs a GPU: `compile` only needs `libnvrtc.so.13` (found through the
//! usual library search, e.g. `LD_LIBRARY_PATH`).

#![cfg(feature = "cuda")]

use std::ffi::{c_char, c_int, CString};
use std::path::PathBuf;

/// One entry of [`HEADERS`]: the name the sources include and the embedded file.
macro_rules! header {
    ($name:literal) => {
        ($name, include_str!(concat!("../cuda/include/", $name)))
    };
}

/// Headers, passed to NVRTC in memory under the names the `.cu` files include.
pub const HEADERS: [(&str, &str); 28] = [
    header!("mx_types.cuh"),
    header!("mx_ptx.cuh"),
    header!("mx_warp.cuh"),
    header!("mx_numerics.cuh"),
    header!("mx_wgmma.cuh"),
    header!("mx_quant_blocks.cuh"),
    header!("mx_quant_tile.cuh"),
    header!("mx_quant_values.cuh"),
    header!("mx_quant_flat.cuh"),
    header!("mx_scale_tables.cuh"),
    header!("mx_fakequant.cuh"),
    header!("mx_gemm_common.cuh"),
    header!("mx_gemm_cpasync.cuh"),
    header!("mx_tgemm_pipeline.cuh"),
    header!("mx_tgemm_mainloop.cuh"),
    header!("mx_tgemm_roles.cuh"),
    header!("mx_tgemm_kernels.cuh"),
    header!("mx_fp8_shift.cuh"),
    header!("mx_reencode.cuh"),
    header!("mx_reencode_pair.cuh"),
    header!("mx_reencode_block.cuh"),
    header!("mx_tgemm_chain.cuh"),
    header!("mx_chain_status.cuh"),
    header!("mx_quant_chain.cuh"),
    header!("mx_quant_block_form.cuh"),
    header!("mx_chain_need.cuh"),
    header!("mx_plain_from_form.cuh"),
    header!("mx_quant_rows_wv.cuh"),
];
pub const QUANTIZE_CU: &str = include_str!("../cuda/mx_quantize.cu");
pub const GEMM_CU: &str = include_str!("../cuda/mx_grouped_gemm.cu");
pub const AUX_CU: &str = include_str!("../cuda/mx_dequantize.cu");
pub const CHAIN_CU: &str = include_str!("../cuda/mx_chain_gemm.cu");

/// Pipeline stages of the GEMM variants we instantiate (see the kernels' README).
pub const GEMM_STAGES: u32 = 5;
/// Consumer warpgroups (block = 128 × (NC + 1) threads).
pub const GEMM_NC: u32 = 2;
/// Pipeline stages of the TMA GEMM variants (`mx_tgemm_*`, README: 6 fits).
pub const TGEMM_STAGES: u32 = 6;
/// Threads per block of the TMA GEMM (`MXT_THREADS`).
pub const TGEMM_THREADS: u32 = 384;
/// Pipeline stages of the TMA-store GEMMs (`MXT_V2T_STAGES`: 5 stages + 32 KB of output
/// staging fit where 6 stages did).
pub const TGEMM_STORE_STAGES: u32 = 5;

/// One NVRTC compilation unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unit {
    /// `mx_quantize_{f32,bf16}_{e4m3,e5m2}`, `mx_quantize_rows_*` (flat 1×32),
    /// `mx_quantize_t32_bf16_*` (32×32 tiles through a TMA ring), the fake quantizers
    /// `mx_fakequant_m32_*` / `mx_fakequant_rows_*` and `mx_scales_to_f32`.
    Quantize,
    /// `mx_dequantize` and `mx_transpose_u8`.
    Aux,
    /// One grouped-GEMM instantiation: A and B element formats (0 = E4M3, 1 = E5M2),
    /// 32×32 (true) or 1×32 (false) B scales, bf16 (true) or f32 output.
    Gemm {
        fa: u8,
        fb: u8,
        w2d: bool,
        out_bf16: bool,
    },
    /// The same instantiation of the TMA grouped GEMM (`mx_tgemm_*`: TMA loads with
    /// 128-byte swizzle, 384 threads; same math and parameters plus two tensor maps).
    TGemm {
        fa: u8,
        fb: u8,
        w2d: bool,
        out_bf16: bool,
    },
    /// The chained GEMM and its re-encoding (`mx_chain_gemm.cu`: `mx_reencode_*`,
    /// `mx_cgemm_*`; 256 × 128 tiles, one promotion per 128-deep stage, exact through
    /// stage-uniform copies plus residual corrections). Launched for forward/dgrad only
    /// when `MXHOST_MX_CHAIN` asks for it (`backend/cuda/chain.rs`; docs/perf.md, runs
    /// 89–104).
    Chain,
}

fn gemm_kernel_name(prefix: &str, fa: u8, fb: u8, w2d: bool, out_bf16: bool) -> String {
    let f = |x: u8| if x == 0 { "e4m3" } else { "e5m2" };
    format!(
        "{prefix}_{}{}_{}_{}",
        f(fa),
        f(fb),
        if w2d { "w2d" } else { "w1d" },
        if out_bf16 { "bf16" } else { "f32" }
    )
}

impl Unit {
    /// The units of the portable build (no wgmma GEMMs).
    pub const PORTABLE: [Unit; 2] = [Unit::Quantize, Unit::Aux];

    /// Every unit: those the backend can ask for and [`Unit::Chain`] (the NVRTC gate compiles all).
    pub fn all() -> Vec<Unit> {
        let mut v = vec![Unit::Quantize, Unit::Aux];
        for fa in 0..2 {
            for fb in 0..2 {
                for w2d in [true, false] {
                    for out_bf16 in [false, true] {
                        v.push(Unit::Gemm {
                            fa,
                            fb,
                            w2d,
                            out_bf16,
                        });
                        v.push(Unit::TGemm {
                            fa,
                            fb,
                            w2d,
                            out_bf16,
                        });
                    }
                }
            }
        }
        v.push(Unit::Chain);
        v
    }

    /// Name of the GEMM kernel of a `Gemm` (`mx_gemm_*`) or `TGemm` (`mx_tgemm_*`) unit.
    pub fn gemm_name(&self) -> Option<String> {
        match *self {
            Unit::Gemm {
                fa,
                fb,
                w2d,
                out_bf16,
            } => Some(gemm_kernel_name("mx_gemm", fa, fb, w2d, out_bf16)),
            Unit::TGemm {
                fa,
                fb,
                w2d,
                out_bf16,
            } => Some(gemm_kernel_name("mx_tgemm", fa, fb, w2d, out_bf16)),
            _ => None,
        }
    }

    /// Every kernel the backend looks up in this unit's module (`cuModuleGetFunction` at
    /// load time; a name missing here is a "not in module" error at launch). The NVRTC
    /// test requires each of them in the compiled unit.
    pub fn kernel_names(&self) -> Vec<String> {
        self.kernel_names_for(HOPPER_ARCH)
    }

    /// [`Unit::kernel_names`] of this unit compiled for `arch`: a portable build
    /// ([`is_portable`]) has no `mx_quantize_t32_*` (TMA).
    pub fn kernel_names_for(&self, arch: &str) -> Vec<String> {
        let fmts = ["e4m3", "e5m2"];
        let ins = ["f32", "bf16"];
        match self {
            Unit::Quantize => {
                let mut v = Vec::new();
                for f in fmts {
                    for i in ins {
                        v.push(format!("mx_quantize_{i}_{f}"));
                        v.push(format!("mx_quantize_rows_{i}_{f}"));
                        v.push(format!("mx_fakequant_m32_{i}_{f}"));
                        v.push(format!("mx_fakequant_rows_{i}_{f}"));
                        v.push(format!("mx_quantize_rows_vals_{i}_{f}"));
                    }
                }
                if !is_portable(arch) {
                    for f in fmts {
                        v.push(format!("mx_quantize_t32_bf16_{f}"));
                        v.push(format!("mx_quantize_t32l_bf16_{f}"));
                    }
                }
                for f in fmts {
                    v.push(format!("mx_quantize_rows_wv_bf16_{f}"));
                    v.push(format!("mx_quantize_rows_vals_wv_bf16_{f}"));
                }
                v.push("mx_scales_to_f32".into());
                v.push("mx_scales_to_f32_stages".into());
                v
            }
            Unit::Aux => [
                "mx_dequantize",
                "mx_transpose_u8",
                "mx_wgrad_relayout",
                "mx_dequantize16",
            ]
            .map(String::from)
            .to_vec(),
            Unit::Gemm { .. } | Unit::TGemm { .. } => vec![self.gemm_name().unwrap()],
            Unit::Chain => [
                "mx_chain_status_merge",
                "mx_reencode_e4m3",
                "mx_reencode_e5m2",
                "mx_reencode_pair_e4m3",
                "mx_reencode_pair_ref_e4m3",
                "mx_quantize_pair_bf16_e4m3",
                "mx_quantize_pair_bf16_noq_e4m3",
                "mx_chain_lists_e4m3",
                "mx_chain_lists_e5m2",
                "mx_reencode_block_e4m3",
                "mx_reencode_block_e5m2",
                "mx_quantize_rows_form_e4m3",
                "mx_quantize_rows_form_e5m2",
                "mx_quantize_rows_form4_e4m3",
                "mx_quantize_rows_form4_e5m2",
                "mx_chain_need_map",
                "mx_quantize_rows_form_wv_e4m3",
                "mx_quantize_rows_form_wv_e5m2",
                "mx_quantize_rows_form_noq_e4m3",
                "mx_quantize_rows_form_noq_e5m2",
                "mx_quantize_rows_form_wv_noq_e4m3",
                "mx_quantize_rows_form_wv_noq_e5m2",
                "mx_quantize_rows_form_wv_noq_pf_e4m3",
                "mx_quantize_rows_form_wv_noq_pf_e5m2",
                "mx_plain_from_form_e4m3",
                "mx_plain_from_form_e5m2",
                "mx_quantize_rows_chain_e4m3",
                "mx_quantize_rows_chain_e5m2",
                "mx_bytes_diff",
                "mx_chain_res_diff",
                "mx_cgemm_e4m3e4m3_w2d_bf16",
                "mx_cgemm_e4m3e4m3_w2d_f32",
                "mx_cgemm_e5m2e4m3_w2d_bf16",
                "mx_cgemm_e4m3e4m3_w2d_bf16_s3",
                "mx_cgemm_e4m3e4m3_w2d_f32_s3",
                "mx_cgemm_w_e4m3e4m3_bf16_s3",
                "mx_cgemm_w_e4m3e4m3_f32_s3",
            ]
            .map(String::from)
            .to_vec(),
        }
    }

    /// Whether this TMA GEMM unit stores its output through shared memory and TMA (the
    /// `v2t` instantiation: 32×32 weight scales, bf16 output). Such a kernel takes
    /// `MxGemmTmaParamsO` (the parameters plus the output's tensor map) and
    /// [`TGEMM_STORE_STAGES`] stages plus 32 KB of staging.
    pub fn tma_store(&self) -> bool {
        matches!(
            self,
            Unit::TGemm {
                w2d: true,
                out_bf16: true,
                ..
            }
        )
    }

    /// A short label for messages and cache file names.
    pub fn label(&self) -> String {
        match self {
            Unit::Quantize => "mx_quantize".into(),
            Unit::Aux => "mx_dequantize".into(),
            Unit::Gemm { .. } | Unit::TGemm { .. } => self.gemm_name().unwrap(),
            Unit::Chain => "mx_chain_gemm".into(),
        }
    }

    /// (program name, main source) handed to NVRTC.
    pub fn source(&self) -> (String, String) {
        match *self {
            Unit::Quantize => ("mx_quantize.cu".into(), QUANTIZE_CU.into()),
            Unit::Aux => ("mx_dequantize.cu".into(), AUX_CU.into()),
            Unit::Chain => ("mx_chain_gemm.cu".into(), CHAIN_CU.into()),
            Unit::Gemm {
                fa,
                fb,
                w2d,
                out_bf16,
            } => {
                let name = self.gemm_name().unwrap();
                let src = format!(
                    "#define MXG_CUSTOM_INSTANTIATIONS 1\n{GEMM_CU}\n\
                     MXG_INST({name}, {GEMM_NC}, {fa}, {fb}, {}, {}, {GEMM_STAGES})\n",
                    w2d as u8, out_bf16 as u8
                );
                ("mx_grouped_gemm.cu".into(), src)
            }
            Unit::TGemm {
                fa,
                fb,
                w2d,
                out_bf16,
            } => {
                let name = self.gemm_name().unwrap();
                // 32×32 weight scales run the v2 main loop (one m64n128k32 per k32 step,
                // next wgmma issued before the previous step is promoted): 1.02–1.17×
                // faster than MODE 0 on the H200 (docs/perf.md, final run), in its `v2u`
                // form (warp-uniform warpgroup index: wgmma descriptors in the uniform
                // datapath; +1–4 %, bit-identical, run 13); with bf16 output as `v2t`,
                // whose full tiles leave through shared memory and TMA stores that overlap
                // the next tile (bit-identical, 1.02–1.26× on a–d, run 26). 1×32 weight
                // scales keep MODE 0, which v2 made 4–7 % slower.
                let src = if self.tma_store() {
                    format!(
                        "#define MXG_CUSTOM_INSTANTIATIONS 1\n{GEMM_CU}\n\
                         MXT_INST_V2T({name}, {fa}, {fb}, 1, 1)\n"
                    )
                } else {
                    let inst = if w2d { "MXT_INST_V2U" } else { "MXT_INST" };
                    format!(
                        "#define MXG_CUSTOM_INSTANTIATIONS 1\n{GEMM_CU}\n\
                         {inst}({name}, {fa}, {fb}, {}, {}, {TGEMM_STAGES})\n",
                        w2d as u8, out_bf16 as u8
                    )
                };
                ("mx_grouped_gemm.cu".into(), src)
            }
        }
    }
}

/// The architecture of the fast path: Hopper, wgmma and TMA.
pub const HOPPER_ARCH: &str = "sm_90a";
/// The oldest virtual architecture of the portable build (cp.async, bf16): what
/// `MXHOST_MX_PORTABLE=1` compiles for, so that every software fallback runs.
pub const PORTABLE_MIN: i32 = 80;

/// Whether `arch` names a portable build (anything but [`HOPPER_ARCH`]).
pub fn is_portable(arch: &str) -> bool {
    arch != HOPPER_ARCH
}

/// The architecture to compile for on a device of compute capability `cc`, given
/// `MXHOST_MX_PORTABLE` (`forced`: unset/empty/"0" = no, "1" = [`PORTABLE_MIN`],
/// "compute_XY" = that) and the virtual architectures NVRTC supports (`supported`, e.g.
/// 75, 80, …, 120, or why they are unknown; asked only for a portable build, so Hopper's
/// start-up does not query NVRTC). Hopper without the variable → [`HOPPER_ARCH`];
/// otherwise the newest supported `compute_XY` not newer than the device. Err says why
/// there is none.
pub fn select_arch(
    cc: (i32, i32),
    forced: Option<&str>,
    supported: impl FnOnce() -> Result<Vec<i32>, String>,
) -> Result<String, String> {
    let dev = cc.0 * 10 + cc.1;
    let forced = forced.map(str::trim).filter(|v| !v.is_empty() && *v != "0");
    let want = match forced {
        None if cc == (9, 0) => return Ok(HOPPER_ARCH.into()),
        None => dev,
        Some("1") => PORTABLE_MIN,
        Some(v) => v
            .strip_prefix("compute_")
            .and_then(|n| n.parse::<i32>().ok())
            .filter(|&n| n >= PORTABLE_MIN && n <= dev)
            .ok_or_else(|| {
                format!(
                    "MXHOST_MX_PORTABLE={v:?}: expected 1 or compute_XY with {PORTABLE_MIN} <= XY <= {dev} (this device is sm_{dev})"
                )
            })?,
    };
    if dev < PORTABLE_MIN {
        return Err(format!(
            "the MXFP8 kernels need compute capability 8.0 or newer (cp.async, bf16); this device is sm_{dev}"
        ));
    }
    let none = || {
        format!("NVRTC supports no virtual architecture between compute_{PORTABLE_MIN} and compute_{want}")
    };
    let supported = supported().map_err(|why| format!("{} ({why})", none()))?;
    supported
        .iter()
        .copied()
        .filter(|&a| a >= PORTABLE_MIN && a <= want)
        .max()
        .map(|a| format!("compute_{a}"))
        .ok_or_else(none)
}

/// The virtual architectures (`compute_XY` as XY) this NVRTC can compile for.
pub fn nvrtc_supported_archs() -> Result<Vec<i32>, String> {
    use cudarc::nvrtc::sys;
    if !nvrtc_present() {
        return Err(
            "libnvrtc (CUDA 13 NVRTC, libnvrtc.so.13) was not found on the library path".into(),
        );
    }
    let mut n: c_int = 0;
    // SAFETY: plain out-parameter, then a buffer of the size NVRTC reported.
    unsafe {
        let rc = sys::nvrtcGetNumSupportedArchs(&mut n);
        if rc as i32 != 0 || n <= 0 {
            return Err(format!("nvrtcGetNumSupportedArchs failed: {rc:?}"));
        }
        let mut v = vec![0 as c_int; n as usize];
        let rc = sys::nvrtcGetSupportedArchs(v.as_mut_ptr());
        if rc as i32 != 0 {
            return Err(format!("nvrtcGetSupportedArchs failed: {rc:?}"));
        }
        Ok(v)
    }
}

/// NVRTC options for `arch` (`sm_90a`: a cubin; `compute_XY`: PTX), plus the `-D` words of
/// `MXHOST_NVRTC_DEFINES` (for timing a kernel variant a header selects by a macro: they enter
/// the cache key like every option; other words are ignored).
pub fn options(arch: &str) -> Vec<String> {
    let mut o = vec![
        format!("--gpu-architecture={arch}"),
        "-std=c++17".into(),
        "-default-device".into(),
    ];
    if let Ok(d) = std::env::var("MXHOST_NVRTC_DEFINES") {
        let defines: Vec<String> = d
            .split_whitespace()
            .filter(|w| w.starts_with("-D") && w.len() > 2)
            .map(str::to_owned)
            .collect();
        if !defines.is_empty() {
            // Once per process: a timing variant (some, like -DMXQB_KO, leave outputs
            // unwritten) must not pass for the default build in anyone's log.
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| {
                eprintln!(
                    "mxhost-plugin-mxfp8: MXHOST_NVRTC_DEFINES adds {} to every kernel compile (a timing variant, not the default build)",
                    defines.join(" ")
                )
            });
        }
        o.extend(defines);
    }
    o
}

/// Whether `libnvrtc` can be loaded (probe before any NVRTC call: a missing library
/// panics inside cudarc).
pub use mxhost_plugin_common::cuda::nvrtc_present;

/// NVRTC's version as (major, minor).
pub fn nvrtc_version() -> Result<(i32, i32), String> {
    if !nvrtc_present() {
        return Err(
            "libnvrtc (CUDA 13 NVRTC, libnvrtc.so.13) was not found on the library path".into(),
        );
    }
    let (mut major, mut minor) = (0 as c_int, 0 as c_int);
    // SAFETY: plain out-parameters.
    let rc = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
    if rc as i32 != 0 {
        return Err(format!("nvrtcVersion failed: {rc:?}"));
    }
    Ok((major, minor))
}

/// Compile `unit` for `arch` with NVRTC; returns the cubin, or the log on failure.
pub fn compile(unit: Unit, arch: &str) -> Result<Vec<u8>, String> {
    compile_with_log(unit, arch, &[]).map(|(cubin, _)| cubin)
}

/// [`compile`] with `extra` NVRTC options appended (e.g. `--ptxas-options=-v`, whose
/// report the spill gate in tests/nvrtc.rs reads); returns the cubin and NVRTC's log.
pub fn compile_with_log(
    unit: Unit,
    arch: &str,
    extra: &[&str],
) -> Result<(Vec<u8>, String), String> {
    use cudarc::nvrtc::sys;
    if !nvrtc_present() {
        return Err(
            "libnvrtc (CUDA 13 NVRTC, libnvrtc.so.13) was not found on the library path".into(),
        );
    }
    let (name, src) = unit.source();
    let c_src = CString::new(src).map_err(|e| e.to_string())?;
    let c_name = CString::new(name.clone()).unwrap();
    let hdr_src: Vec<CString> = HEADERS.iter().map(|h| CString::new(h.1).unwrap()).collect();
    let hdr_name: Vec<CString> = HEADERS.iter().map(|h| CString::new(h.0).unwrap()).collect();
    let hdr_src_p: Vec<*const c_char> = hdr_src.iter().map(|c| c.as_ptr()).collect();
    let hdr_name_p: Vec<*const c_char> = hdr_name.iter().map(|c| c.as_ptr()).collect();
    let opts: Vec<CString> = options(arch)
        .into_iter()
        .chain(extra.iter().map(|o| o.to_string()))
        .map(|o| CString::new(o).unwrap())
        .collect();
    let opts_p: Vec<*const c_char> = opts.iter().map(|c| c.as_ptr()).collect();
    let mut prog: sys::nvrtcProgram = std::ptr::null_mut();
    // SAFETY: every pointer is a live NUL-terminated string for the duration of the calls;
    // the program is destroyed before returning.
    unsafe {
        let rc = sys::nvrtcCreateProgram(
            &mut prog,
            c_src.as_ptr(),
            c_name.as_ptr(),
            hdr_src_p.len() as c_int,
            hdr_src_p.as_ptr(),
            hdr_name_p.as_ptr(),
        );
        if rc as i32 != 0 {
            return Err(format!("nvrtcCreateProgram({name}) failed: {rc:?}"));
        }
        let rc = sys::nvrtcCompileProgram(prog, opts_p.len() as c_int, opts_p.as_ptr());
        let mut log_size = 0usize;
        sys::nvrtcGetProgramLogSize(prog, &mut log_size);
        let mut log = vec![0u8; log_size.max(1)];
        sys::nvrtcGetProgramLog(prog, log.as_mut_ptr() as *mut c_char);
        let log = String::from_utf8_lossy(&log)
            .trim_end_matches('\0')
            .trim()
            .to_string();
        let result = if rc as i32 != 0 {
            Err(format!(
                "NVRTC failed to compile {} ({name}) for {arch}: {rc:?}\n{log}",
                unit.label()
            ))
        } else {
            // A cubin, or for a virtual architecture PTX text with its NUL, as
            // cuModuleLoadData takes it (the driver JIT-compiles PTX).
            type SizeFn = unsafe fn(sys::nvrtcProgram, *mut usize) -> sys::nvrtcResult;
            type GetFn = unsafe fn(sys::nvrtcProgram, *mut c_char) -> sys::nvrtcResult;
            let (what, get_size, get): (&str, SizeFn, GetFn) = if arch.starts_with("compute_") {
                ("PTX", sys::nvrtcGetPTXSize, sys::nvrtcGetPTX)
            } else {
                ("CUBIN", sys::nvrtcGetCUBINSize, sys::nvrtcGetCUBIN)
            };
            let mut size = 0usize;
            let rc = get_size(prog, &mut size);
            if rc as i32 != 0 || size == 0 {
                Err(format!("nvrtcGet{what}Size({name}) failed: {rc:?}"))
            } else {
                let mut image = vec![0u8; size];
                let rc = get(prog, image.as_mut_ptr() as *mut c_char);
                if rc as i32 != 0 {
                    Err(format!("nvrtcGet{what}({name}) failed: {rc:?}"))
                } else {
                    Ok((image, log))
                }
            }
        };
        sys::nvrtcDestroyProgram(&mut prog);
        result
    }
}

/// FNV-1a 64 over `parts`, with a seed (two seeds give a 128-bit key): the cache key's
/// hash, also what `examples/kernel_fingerprints.rs` prints.
pub fn fnv(seed: u64, parts: &[&[u8]]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ seed;
    for p in parts {
        for &b in *p {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        h ^= 0xff;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Cache key of `unit` compiled for `arch` (hash of sources, options, versions).
pub fn cache_key(unit: Unit, arch: &str, driver_version: i32) -> Result<String, String> {
    let (major, minor) = nvrtc_version()?;
    let (name, src) = unit.source();
    let opts = options(arch).join(" ");
    let ver = format!("nvrtc {major}.{minor} driver {driver_version}");
    let mut parts: Vec<&[u8]> = vec![
        name.as_bytes(),
        src.as_bytes(),
        opts.as_bytes(),
        ver.as_bytes(),
    ];
    for (n, s) in HEADERS.iter() {
        parts.push(n.as_bytes());
        parts.push(s.as_bytes());
    }
    Ok(format!(
        "{}-{:016x}{:016x}",
        unit.label(),
        fnv(0, &parts),
        fnv(0x9e37_79b9_7f4a_7c15, &parts)
    ))
}

/// The kernel cache directory, if one can be named.
pub fn cache_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("MXHOST_KERNEL_CACHE") {
        return Some(PathBuf::from(d));
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return Some(PathBuf::from(d).join("mxhost/kernels"));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/mxhost/kernels"))
}

/// The module image of `unit` for `arch` (a cubin, or NUL-terminated PTX for
/// `compute_XY`): from the disk cache, else compiled (and cached). Returns the image and
/// whether it came from the cache.
pub fn cubin(unit: Unit, arch: &str, driver_version: i32) -> Result<(Vec<u8>, bool), String> {
    let key = cache_key(unit, arch, driver_version)?;
    let ext = if arch.starts_with("compute_") {
        "ptx"
    } else {
        "cubin"
    };
    let path = cache_dir().map(|d| d.join(format!("{key}.{ext}")));
    if let Some(p) = &path {
        if let Ok(bytes) = std::fs::read(p) {
            if !bytes.is_empty() {
                return Ok((bytes, true));
            }
        }
    }
    let bin = compile(unit, arch)?;
    if let Some(p) = &path {
        // Best effort: a read-only cache only costs compile time.
        if let Some(dir) = p.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let tmp = p.with_extension(format!("tmp{}", std::process::id()));
        if std::fs::write(&tmp, &bin).is_ok() {
            let _ = std::fs::rename(&tmp, p);
        }
    }
    Ok((bin, false))
}

#[cfg(test)]
mod tests {
    use super::Unit;

    fn tgemm(w2d: bool, out_bf16: bool) -> Unit {
        Unit::TGemm {
            fa: 0,
            fb: 0,
            w2d,
            out_bf16,
        }
    }

    /// Which main loop and epilogue each TMA unit instantiates: the TMA-store v2t for 32×32
    /// weights with bf16 output only (it needs `TGemmParamsO` and its own shared-memory size,
    /// so the launch side must agree with `tma_store`).
    #[test]
    fn tma_units_pick_their_instantiation() {
        let inst = |u: Unit| u.source().1;
        assert!(tgemm(true, true).tma_store());
        assert!(inst(tgemm(true, true))
            .contains("MXT_INST_V2T(mx_tgemm_e4m3e4m3_w2d_bf16, 0, 0, 1, 1)"));
        for (w2d, bf, want) in [
            (true, false, "MXT_INST_V2U("),
            (false, true, "MXT_INST("),
            (false, false, "MXT_INST("),
        ] {
            let u = tgemm(w2d, bf);
            assert!(!u.tma_store(), "{u:?}");
            let src = inst(u);
            let last = src.lines().rev().find(|l| !l.is_empty()).unwrap();
            assert!(last.starts_with(want), "{u:?}: {last}");
        }
        assert!(!Unit::Quantize.tma_store());
    }

    /// Which build each device gets: Hopper the sm_90a fast path unless forced portable;
    /// other GPUs the newest supported compute_XY not above them; clear errors otherwise.
    #[test]
    fn select_arch_picks_the_build() {
        use super::select_arch;
        let nvrtc = [75, 80, 86, 87, 88, 89, 90, 100, 103, 110, 120, 121];
        let ok = |cc, f| select_arch(cc, f, || Ok(nvrtc.to_vec())).unwrap();
        // Hopper's fast path never asks NVRTC; a portable build says why NVRTC could not.
        let no_nvrtc = || Err("libnvrtc not found".to_string());
        assert_eq!(select_arch((9, 0), None, no_nvrtc).unwrap(), "sm_90a");
        let e = select_arch((8, 6), None, no_nvrtc).unwrap_err();
        assert!(
            e.contains("no virtual architecture") && e.contains("libnvrtc not found"),
            "{e}"
        );
        assert_eq!(ok((9, 0), None), "sm_90a");
        assert_eq!(ok((9, 0), Some("")), "sm_90a");
        assert_eq!(ok((9, 0), Some("0")), "sm_90a");
        assert_eq!(ok((9, 0), Some("1")), "compute_80");
        assert_eq!(ok((9, 0), Some("compute_89")), "compute_89");
        assert_eq!(ok((8, 0), None), "compute_80");
        assert_eq!(ok((8, 6), None), "compute_86");
        assert_eq!(ok((8, 9), Some("1")), "compute_80");
        assert_eq!(ok((10, 0), None), "compute_100");
        assert_eq!(ok((12, 0), None), "compute_120");
        // A device newer than NVRTC knows: the newest NVRTC has.
        assert_eq!(ok((13, 0), None), "compute_121");
        assert_eq!(
            select_arch((10, 1), None, || Ok(vec![80, 90])).unwrap(),
            "compute_90"
        );
        let err = |cc, f, s: &[i32]| select_arch(cc, f, || Ok(s.to_vec())).unwrap_err();
        assert!(err((7, 5), None, &nvrtc).contains("8.0 or newer"));
        assert!(err((9, 0), Some("compute_75"), &nvrtc).contains("MXHOST_MX_PORTABLE"));
        assert!(err((8, 6), Some("compute_90"), &nvrtc).contains("MXHOST_MX_PORTABLE"));
        assert!(err((9, 0), Some("yes"), &nvrtc).contains("MXHOST_MX_PORTABLE"));
        assert!(err((8, 6), None, &[75]).contains("no virtual architecture"));
        assert!(super::is_portable("compute_80") && !super::is_portable("sm_90a"));
        let names = Unit::Quantize.kernel_names_for("compute_80");
        assert!(!names.iter().any(|n| n.contains("t32")));
        assert!(Unit::Quantize
            .kernel_names()
            .iter()
            .any(|n| n.contains("t32")));
    }
}
