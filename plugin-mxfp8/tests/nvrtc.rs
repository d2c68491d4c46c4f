//! Every CUDA kernel unit of the plugin compiles through NVRTC for sm_90a (no GPU
//! needed, only libnvrtc.so.13 on the library path, e.g. the CUDA 13.0 wheels'
//! `site-packages/nvidia/cu13/lib` in `LD_LIBRARY_PATH`), and ptxas's resource report
//! of every kernel is checked.
//!
//! NVRTC can crash on degenerate code, so each unit compiles in a child process (this
//! test binary re-run with `MXHOST_NVRTC_CHILD=<index>`; up to 4 children at a time,
//! `MXHOST_NVRTC_JOBS` overrides). The children get
//! `LD_LIBRARY_PATH` extended with the first of these directories holding
//! `libnvrtc.so.13`: `$MXHOST_NVRTC_LIB_DIR`, `$CUDA_HOME/lib64`, `/usr/local/cuda/lib64`,
//! and the CUDA 13.0 wheels of the development machine
//! (`/work/cuda-venv/lib/python3.11/site-packages/nvidia/cu13/lib`). Without libnvrtc the
//! test prints a visible skip message, or fails under `MXHOST_REQUIRE_NVRTC=1`.
//!
//! ## ptxas gate
//!
//! Each child compiles its unit twice: once through the backend's own
//! [`kernels::compile`], and once with the same source, headers and
//! [`kernels::options`] plus `--ptxas-options=-v`. NVRTC 13.0 runs ptxas in-process and
//! puts ptxas's verbose report (per function: registers, stack frame, spill stores and
//! loads) and its `(C75xx)` wgmma notes into the program log (checked by hand: the same
//! lines `nvcc -Xptxas -v` prints), so no separate ptxas binary is needed. The parent
//! parses each log ([`parse_ptxas_log`]), prints a table of every kernel straight to
//! stderr (so it shows in CI logs even without `--nocapture`), and fails if a **hot**
//! kernel has spill stores or spill loads > 0, or any "wgmma.mma_async instructions are
//! serialized" note (C7514, and its siblings C7510–C7516 with other causes).
//!
//! Hot kernels are what the backend launches by default or on request: every `mx_tgemm_*`
//! (TMA) GEMM unit, the quantizer unit (`mx_quantize_*`, `mx_scales_to_f32`), the aux unit
//! (`mx_dequantize`, `mx_transpose_u8`, ...) and the chained GEMM unit (`mx_chain_gemm.cu`,
//! `MXHOST_MX_CHAIN`). The older cp.async `mx_gemm_*` units are a fallback only: they are
//! reported in the table but do not fail the gate.
//! A unit whose log holds no report for its kernels (an NVRTC that ignored `-v`) fails.
//!
//! ## Portable build
//!
//! The units of the portable build ([`Unit::PORTABLE`]: quantizer, aux) are also compiled
//! the way the backend compiles them for a non-Hopper GPU (`compute_80` PTX, the oldest
//! target, where every software fallback is in), and for `sm_80` with ptxas -v, so that
//! ptxas proves the PTX assembles for sm_80 and reports every kernel the backend looks
//! up there ([`Unit::kernel_names_for`]). Their spills are reported, not gated.
#![cfg(feature = "cuda")]

use mxhost_plugin_common::testing::{ld_library_path_with, nvrtc_lib_dir};
use mxhost_plugin_mxfp8::kernels::{self, Unit};
use std::io::Write;
use std::process::Command;

const CHILD_ENV: &str = "MXHOST_NVRTC_CHILD";
const LOG_BEGIN: &str = "MXHOST-PTXAS-LOG-BEGIN";
const LOG_END: &str = "MXHOST-PTXAS-LOG-END";
const ARCH: &str = "sm_90a";
/// The portable build's ptxas check target, and the backend's target for it.
const PORTABLE_SM: &str = "sm_80";
const PORTABLE_COMPUTE: &str = "compute_80";

/// One child's work: a unit and the architecture its ptxas report is for.
#[derive(Clone, Copy)]
struct Job {
    unit: Unit,
    arch: &'static str,
}

impl Job {
    /// The architecture the backend itself compiles this job's unit for.
    fn backend_arch(&self) -> &'static str {
        if self.arch == PORTABLE_SM {
            PORTABLE_COMPUTE
        } else {
            self.arch
        }
    }

    fn label(&self) -> String {
        format!("{} ({})", self.unit.label(), self.arch)
    }
}

fn jobs() -> Vec<Job> {
    let hopper = Unit::all().into_iter().map(|unit| Job { unit, arch: ARCH });
    let portable = Unit::PORTABLE.into_iter().map(|unit| Job {
        unit,
        arch: PORTABLE_SM,
    });
    hopper.chain(portable).collect()
}

/// Written straight to the process's stderr, past the test harness's output capture,
/// so that CI logs (plain `cargo test`) show it.
fn visible(msg: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{msg}");
}

#[test]
fn every_kernel_compiles_with_nvrtc_for_sm_90a() {
    let units = jobs();
    if let Ok(idx) = std::env::var(CHILD_ENV) {
        // Child: compile one unit (backend path, then with ptxas -v), report, exit.
        let job = units[idx.parse::<usize>().unwrap()];
        let t0 = std::time::Instant::now();
        let image = match kernels::compile(job.unit, job.backend_arch()) {
            Ok(image) => image,
            Err(log) => panic!("{log}"),
        };
        let t_compile = t0.elapsed().as_secs_f64();
        let log = match compile_verbose(job.unit, job.arch) {
            Ok(log) => log,
            Err(log) => panic!("{log}"),
        };
        println!("{LOG_BEGIN}\n{log}\n{LOG_END}");
        println!(
            "NVRTC-OK {} {} {} bytes in {:.2} s",
            job.label(),
            if job.backend_arch().starts_with("compute_") {
                "PTX"
            } else {
                "cubin"
            },
            image.len(),
            t_compile
        );
        return;
    }
    let extra_dir = nvrtc_lib_dir();
    if !kernels::nvrtc_present() && extra_dir.is_none() {
        let msg = "SKIPPED: libnvrtc.so.13 not found (set LD_LIBRARY_PATH to a CUDA 13 NVRTC, e.g. <venv>/site-packages/nvidia/cu13/lib); the CUDA kernels were NOT compile-checked";
        if std::env::var("MXHOST_REQUIRE_NVRTC").as_deref() == Ok("1") {
            panic!("MXHOST_REQUIRE_NVRTC=1 but {msg}");
        }
        visible(msg);
        println!("{msg}");
        return;
    }
    let t_all = std::time::Instant::now();
    let exe = std::env::current_exe().unwrap();
    if let Some(d) = &extra_dir {
        eprintln!("NVRTC from {}", d.display());
    }
    let ld_path = ld_library_path_with(extra_dir.as_deref());

    // Children, a few at a time (each is one NVRTC compile, ~0.2–1 s).
    let jobs = std::env::var("MXHOST_NVRTC_JOBS")
        .ok()
        .and_then(|s| s.parse::<usize>().ok())
        .unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
                .min(4)
        })
        .max(1);
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Vec<std::sync::Mutex<Option<std::process::Output>>> =
        units.iter().map(|_| std::sync::Mutex::new(None)).collect();
    std::thread::scope(|s| {
        for _ in 0..jobs {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= units.len() {
                    break;
                }
                let out = Command::new(&exe)
                    .args([
                        "--exact",
                        "every_kernel_compiles_with_nvrtc_for_sm_90a",
                        "--nocapture",
                        "--test-threads=1",
                    ])
                    .env(CHILD_ENV, i.to_string())
                    .env("LD_LIBRARY_PATH", &ld_path)
                    .output()
                    .expect("re-running the test binary");
                *results[i].lock().unwrap() = Some(out);
            });
        }
    });

    let mut failures = Vec::new();
    let mut rows: Vec<(bool, KernelReport)> = Vec::new();
    for (job, out) in units.iter().zip(results) {
        let out = out.into_inner().unwrap().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let ok_line = stdout
            .lines()
            .find_map(|l| l.find("NVRTC-OK").map(|i| &l[i..]));
        let log = stdout
            .split_once(LOG_BEGIN)
            .and_then(|(_, rest)| rest.split_once(LOG_END))
            .map(|(log, _)| log);
        let (Some(line), Some(log), true) = (ok_line, log, out.status.success()) else {
            failures.push(format!(
                "{} (exit {:?}):\n{stdout}\n{stderr}",
                job.label(),
                out.status
            ));
            continue;
        };
        eprintln!("{line}");
        let reports = parse_ptxas_log(log);
        if let Some(missing) = missing_report(*job, &reports) {
            failures.push(format!(
                "{}: the unit's kernels and ptxas's verbose report disagree: {missing} \
                 (a listed kernel missing from the report: NVRTC ignored \
                 --ptxas-options=-v?); log:\n{log}",
                job.label()
            ));
        }
        let hot = job.arch == ARCH && is_hot(job.unit);
        rows.extend(reports.into_iter().map(|mut r| {
            if job.arch != ARCH {
                r.name = format!("{} [{}]", r.name, job.arch);
            }
            (hot, r)
        }));
    }

    visible(&format_table(&rows));
    visible(&format!(
        "NVRTC+ptxas check of {} units ({} kernels/functions) took {:.1} s with {jobs} job(s)",
        units.len(),
        rows.len(),
        t_all.elapsed().as_secs_f64()
    ));
    assert!(
        failures.is_empty(),
        "NVRTC failed on {} unit(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
    let bad: Vec<String> = rows
        .iter()
        .filter(|(hot, r)| *hot && r.fails_gate())
        .map(|(_, r)| r.describe())
        .collect();
    assert!(
        bad.is_empty(),
        "ptxas gate: {} hot kernel(s) spill or have wgmma serialized (C7514 family); \
         hot = mx_tgemm_*, quantizer, aux:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

/// Whether a unit's kernels are gated, see the module docs: every unit but the cp.async
/// GEMMs (the fallback). The chained GEMM (`MXHOST_MX_CHAIN`) is gated like the default
/// kernels: its builds have 0 spills since the corrections moved to shared memory (run 100).
fn is_hot(unit: Unit) -> bool {
    !matches!(unit, Unit::Gemm { .. })
}

/// The kernel names a job's unit must report (`None` if all are there).
fn missing_report(job: Job, reports: &[KernelReport]) -> Option<String> {
    let has = |name: &str| {
        reports
            .iter()
            .any(|r| r.name == name && r.registers.is_some() && r.has_properties)
    };
    // Every kernel the backend looks up (`Unit::kernel_names`) must be in the unit.
    let listed = job.unit.kernel_names_for(job.arch);
    let mut missing: Vec<String> = listed
        .iter()
        .filter(|n| !has(n))
        .map(|n| format!("{n} (listed, not reported)"))
        .collect();
    // And every kernel of a many-kernel unit must be listed: the backend loads a module's
    // functions by that list, so an unlisted kernel compiles here and fails at its first launch
    // on a GPU ("not in module", docs/perf.md run 176). (A GEMM unit builds one kernel of its
    // file's several per job.)
    if !matches!(job.unit, Unit::Gemm { .. } | Unit::TGemm { .. }) {
        missing.extend(
            reports
                .iter()
                .filter(|r| r.entry && !listed.contains(&r.name))
                .map(|r| format!("{} (compiled but not in the unit's kernel list)", r.name)),
        );
    }
    (!missing.is_empty()).then(|| missing.join(", "))
}

/// ptxas's verbose report of one function (entry kernel or non-inlined device function).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct KernelReport {
    name: String,
    /// ptxas said "Compiling entry function" for it (a `__global__` kernel).
    entry: bool,
    /// A "Function properties for" block (stack, spill stores, spill loads) was seen.
    has_properties: bool,
    registers: Option<u32>,
    stack_bytes: u64,
    spill_store_bytes: u64,
    spill_load_bytes: u64,
    /// ptxas's "wgmma.mma_async instructions are serialized" notes (C7514 and family).
    wgmma_serialized: Vec<String>,
    /// Other ptxas warnings naming this function (reported, not gated).
    warnings: Vec<String>,
    /// ptxas's own lines for this function (properties, registers), for messages.
    lines: Vec<String>,
}

impl KernelReport {
    fn fails_gate(&self) -> bool {
        self.spill_store_bytes > 0 || self.spill_load_bytes > 0 || !self.wgmma_serialized.is_empty()
    }

    fn describe(&self) -> String {
        let regs = self
            .registers
            .map_or_else(|| "?".to_string(), |r| r.to_string());
        let mut s = format!(
            "  {}: {regs} registers, {} bytes stack frame, {} bytes spill stores, {} bytes spill loads",
            self.name, self.stack_bytes, self.spill_store_bytes, self.spill_load_bytes
        );
        for l in self
            .lines
            .iter()
            .chain(&self.wgmma_serialized)
            .chain(&self.warnings)
        {
            s.push_str("\n    ");
            s.push_str(l);
        }
        s
    }
}

/// The number written just before `suffix` in `line` (e.g. `"16 bytes spill stores"`).
fn number_before(line: &str, suffix: &str) -> Option<u64> {
    let head = line[..line.find(suffix)?].trim_end();
    let start = head
        .rfind(|c: char| !c.is_ascii_digit())
        .map_or(0, |i| i + 1);
    head[start..].parse().ok()
}

/// The text between the last pair of single quotes of `line`.
fn last_quoted(line: &str) -> Option<&str> {
    let end = line.rfind('\'')?;
    let start = line[..end].rfind('\'')?;
    Some(&line[start + 1..end])
}

/// Parses ptxas's `-v` report (as NVRTC's program log or `ptxas -v` print it) into one
/// report per function, in order of first mention.
fn parse_ptxas_log(log: &str) -> Vec<KernelReport> {
    let mut out: Vec<KernelReport> = Vec::new();
    fn slot(out: &mut Vec<KernelReport>, name: &str) -> usize {
        if let Some(i) = out.iter().position(|r| r.name == name) {
            return i;
        }
        out.push(KernelReport {
            name: name.to_string(),
            ..Default::default()
        });
        out.len() - 1
    }
    let mut current: Option<usize> = None;
    for line in log.lines() {
        let line = line.trim_end();
        if line.contains("Compiling entry function '") {
            if let Some(name) = line
                .split_once("Compiling entry function '")
                .and_then(|(_, rest)| rest.split_once('\''))
                .map(|(name, _)| name)
            {
                let i = slot(&mut out, name);
                out[i].entry = true;
                out[i].lines.push(line.trim().to_string());
                current = Some(i);
            }
        } else if let Some((_, name)) = line.split_once("Function properties for ") {
            let i = slot(&mut out, name.trim());
            out[i].has_properties = true;
            out[i].lines.push(line.trim().to_string());
            current = Some(i);
        } else if line.contains("bytes stack frame") {
            if let Some(i) = current {
                let r = &mut out[i];
                r.stack_bytes = number_before(line, "bytes stack frame").unwrap_or(0);
                r.spill_store_bytes = number_before(line, "bytes spill stores").unwrap_or(0);
                r.spill_load_bytes = number_before(line, "bytes spill loads").unwrap_or(0);
                r.lines.push(line.trim().to_string());
            }
        } else if line.contains(" registers") && line.contains("Used ") {
            if let Some(i) = current {
                out[i].registers = number_before(line, " registers").map(|n| n as u32);
                out[i].lines.push(line.trim().to_string());
            }
        } else if (line.contains("wgmma") && line.contains("serialized"))
            || line.contains("(C7514)")
        {
            // "... (C7514) Potential Performance Loss: wgmma.mma_async instructions are
            // serialized due to ... in the function 'NAME'"
            let i = match last_quoted(line) {
                Some(name) => slot(&mut out, name),
                None => slot(&mut out, "<unnamed>"),
            };
            out[i].wgmma_serialized.push(line.trim().to_string());
        } else if line.contains("ptxas warning") {
            if let Some(name) = last_quoted(line) {
                let i = slot(&mut out, name);
                out[i].warnings.push(line.trim().to_string());
            }
        }
    }
    out
}

/// The table of every function: name, hot, registers, stack, spill stores/loads, C7514.
fn format_table(rows: &[(bool, KernelReport)]) -> String {
    let w = rows
        .iter()
        .map(|(_, r)| r.name.len())
        .max()
        .unwrap_or(6)
        .max(6);
    let mut s = format!(
        "ptxas -v (sm_90a, NVRTC) per function; gate: hot kernels need 0 spill and no C7514 \
         (mx_gemm_* cp.async fallback: reported only, `warn`)\n\
         {:<w$}  hot  gate  regs  stack  spill st/ld  C7514 (wgmma serialized)\n",
        "kernel"
    );
    for (hot, r) in rows {
        let regs = r
            .registers
            .map_or_else(|| "-".to_string(), |n| n.to_string());
        let ser = if r.wgmma_serialized.is_empty() {
            "no".to_string()
        } else {
            let codes: Vec<&str> = r
                .wgmma_serialized
                .iter()
                .filter_map(|l| l.split_once("(C").and_then(|(_, t)| t.split_once(')')))
                .map(|(code, _)| code)
                .collect();
            format!("yes (C{})", codes.join(", C"))
        };
        let gate = match (hot, r.fails_gate()) {
            (true, true) => "FAIL",
            (true, false) => "ok",
            (false, true) => "warn",
            (false, false) => "-",
        };
        s.push_str(&format!(
            "{:<w$}  {:<3}  {:<4}  {:>4}  {:>5}  {:>5}/{:<5}  {}\n",
            r.name,
            if *hot { "yes" } else { "no" },
            gate,
            regs,
            r.stack_bytes,
            r.spill_store_bytes,
            r.spill_load_bytes,
            ser
        ));
    }
    s
}

/// NVRTC-compiles `unit` exactly as [`kernels::compile`] does (same source, headers and
/// options) plus `--ptxas-options=-v`; returns the program log (ptxas's report).
fn compile_verbose(unit: Unit, arch: &str) -> Result<String, String> {
    kernels::compile_with_log(unit, arch, &["--ptxas-options=-v"]).map(|(_, log)| log)
}

/// Real NVRTC 13.0 logs (sm_90a, `--ptxas-options=-v`), captured on the development
/// machine from throwaway kernels built to trip the gate: `spill` holds a 256-float
/// array indexed at run time, `K` reads a wgmma accumulator between two wgmmas of one
/// pipeline stage, `wg_ser` redefines one (ptxas: C7511, same family).
mod parser {
    use super::*;

    const SPILL_LOG: &str = "\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'ok' for 'sm_90a'
ptxas info    : Function properties for ok
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, used 0 barriers
ptxas info    : Compile time = 2.133 ms
ptxas info    : Compiling entry function 'spill' for 'sm_90a'
ptxas info    : Function properties for spill
ptxas         .     1136 bytes stack frame, 108 bytes spill stores, 108 bytes spill loads
ptxas info    : Used 255 registers, used 0 barriers, 1136 bytes cumulative stack size
ptxas info    : Compile time = 121.193 ms
";

    const C7514_LOG: &str = "\
ptxas info    : (C7514) Potential Performance Loss: wgmma.mma_async instructions are serialized due to non wgmma instructions reading accumulator registers of  a wgmma between start and end of the pipeline stage in the function 'K'
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'K' for 'sm_90a'
ptxas info    : Function properties for K
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 30 registers, used 0 barriers
ptxas info    : Compile time = 2.895 ms
";

    const C7511_LOG: &str = "\
ptxas info    : (C7519) warpgroup.arrive is injected in around line 118 by compiler to allow use of registers in GMMA in function 'wg_call'
ptxas info    : (C7519) warpgroup.arrive is injected in around line 43 by compiler to allow use of registers in GMMA in function 'wg_ser'
ptxas info    : (C7517) warpgroup.wait is injected in around line 41 by compiler to allow use of registers defined by GMMA in function 'wg_ser'
ptxas info    : (C7511) Potential Performance Loss: wgmma.mma_async instructions are serialized due to insufficient register resources for the wgmma pipeline in the function 'wg_ser'
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'wg_call' for 'sm_90a'
ptxas info    : Function properties for wg_call
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 30 registers, used 0 barriers
ptxas info    : Compile time = 2.598 ms
ptxas info    : Function properties for _Z3extPf
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compiling entry function 'wg_ser' for 'sm_90a'
ptxas info    : Function properties for wg_ser
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 30 registers, used 0 barriers
ptxas info    : Compile time = 1.180 ms
";

    #[test]
    fn spills_are_parsed_and_fail_the_gate() {
        let r = parse_ptxas_log(SPILL_LOG);
        assert_eq!(r.len(), 2);
        assert_eq!(
            (
                r[0].name.as_str(),
                r[0].entry,
                r[0].registers,
                r[0].fails_gate()
            ),
            ("ok", true, Some(10), false)
        );
        let s = &r[1];
        assert_eq!(s.name, "spill");
        assert!(s.entry && s.has_properties);
        assert_eq!(s.registers, Some(255));
        assert_eq!(
            (s.stack_bytes, s.spill_store_bytes, s.spill_load_bytes),
            (1136, 108, 108)
        );
        assert!(s.wgmma_serialized.is_empty());
        assert!(s.fails_gate());
        assert!(s.describe().contains("255 registers"));
        assert!(s.describe().contains("108 bytes spill stores"));
        assert!(s
            .describe()
            .contains("1136 bytes stack frame, 108 bytes spill stores, 108 bytes spill loads"));
        let table = format_table(&[(true, r[0].clone()), (true, s.clone())]);
        assert!(table
            .lines()
            .any(|l| l.starts_with("spill") && l.contains("FAIL")));
        assert!(table
            .lines()
            .any(|l| l.starts_with("ok ") && !l.contains("FAIL")));
    }

    #[test]
    fn c7514_is_parsed_and_fails_the_gate() {
        let r = parse_ptxas_log(C7514_LOG);
        assert_eq!(r.len(), 1);
        let k = &r[0];
        assert_eq!(k.name, "K");
        assert_eq!(k.registers, Some(30));
        assert_eq!((k.spill_store_bytes, k.spill_load_bytes), (0, 0));
        assert_eq!(k.wgmma_serialized.len(), 1);
        assert!(k.wgmma_serialized[0].contains("(C7514)"));
        assert!(k.fails_gate());
        assert!(k.describe().contains("(C7514) Potential Performance Loss"));
        let table = format_table(&[(true, k.clone())]);
        assert!(table.contains("yes (C7514)"), "{table}");
    }

    #[test]
    fn other_serialization_codes_count_and_injected_arrive_wait_notes_do_not() {
        let r = parse_ptxas_log(C7511_LOG);
        let names: Vec<&str> = r.iter().map(|k| k.name.as_str()).collect();
        assert_eq!(names, ["wg_ser", "wg_call", "_Z3extPf"]);
        let ser = &r[0];
        assert!(ser.entry && ser.has_properties);
        assert_eq!(ser.registers, Some(30));
        assert_eq!(ser.wgmma_serialized.len(), 1);
        assert!(ser.wgmma_serialized[0].contains("(C7511)"));
        assert!(ser.fails_gate());
        // C7519/C7517 (arrive/wait injected) are informational.
        assert!(!r[1].fails_gate());
        assert!(r[1].wgmma_serialized.is_empty());
        // A non-inlined device function: properties but no entry, no register line.
        assert!(!r[2].entry && r[2].has_properties && r[2].registers.is_none());
    }

    #[test]
    fn a_unit_without_a_report_is_caught() {
        // What an NVRTC that ignored -v would give: no function properties.
        let unit = Unit::TGemm {
            fa: 0,
            fb: 0,
            w2d: false,
            out_bf16: false,
        };
        let unit = Job { unit, arch: ARCH };
        assert!(missing_report(unit, &parse_ptxas_log("")).is_some());
        let log = "\
ptxas info    : Compiling entry function 'mx_tgemm_e4m3e4m3_w1d_f32' for 'sm_90a'
ptxas info    : Function properties for mx_tgemm_e4m3e4m3_w1d_f32
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 168 registers, used 1 barriers
";
        assert_eq!(missing_report(unit, &parse_ptxas_log(log)), None);
        let quant = Job {
            unit: Unit::Quantize,
            arch: ARCH,
        };
        assert!(missing_report(quant, &parse_ptxas_log(log)).is_some());
    }
}
