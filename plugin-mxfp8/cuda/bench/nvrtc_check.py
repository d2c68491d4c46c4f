#!/usr/bin/env python3
"""Compile every kernel file through NVRTC (libnvrtc.so.13) for sm_90a, as the Rust plugin
will, and print the log. Proves the .cu files are NVRTC-clean (no host code, no missing
headers). Usage: python3 nvrtc_check.py [path/to/libnvrtc.so.13]. Each file compiles in a
child process (an NVRTC crash cannot take the checker with it)."""
import ctypes, os, subprocess, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
CUDA = os.path.dirname(HERE)


def compile_one(lib_path, fname, defines=()):
    nv = ctypes.CDLL(lib_path)
    src = open(os.path.join(CUDA, fname), "rb").read()
    if defines and fname == "mx_grouped_gemm.cu":  # the opt-in harness kernels live in bench/
        src += b"\n" + open(os.path.join(HERE, "mx_gemm_variants.cuh"), "rb").read()
    # Headers passed in memory, by the names the .cu files include (what the Rust side does).
    hdr_names = sorted(f for f in os.listdir(os.path.join(CUDA, "include")) if f.endswith(".cuh"))
    hdrs = [open(os.path.join(CUDA, "include", h), "rb").read() for h in hdr_names]
    prog = ctypes.c_void_p()
    H = len(hdrs)
    rc = nv.nvrtcCreateProgram(ctypes.byref(prog), src, fname.encode(), H,
                               (ctypes.c_char_p * H)(*hdrs), (ctypes.c_char_p * H)(*[h.encode() for h in hdr_names]))
    assert rc == 0, rc
    opts = [b"--gpu-architecture=sm_90a", b"-std=c++17", b"-default-device"] + [b"-D" + d.encode() for d in defines]
    t0 = time.time()
    rc = nv.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    dt = time.time() - t0
    n = ctypes.c_size_t()
    nv.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
    log = ctypes.create_string_buffer(n.value)
    nv.nvrtcGetProgramLog(prog, log)
    size = ctypes.c_size_t()
    if rc == 0:
        nv.nvrtcGetCUBINSize(prog, ctypes.byref(size))
    print(f"{fname}{' ' + ' '.join('-D' + d for d in defines) if defines else ''}: rc={rc} ({dt:.2f}s) cubin={size.value} bytes")
    if log.value.strip():
        print(log.value.decode())
    return rc


if __name__ == "__main__":
    if len(sys.argv) > 2:
        sys.exit(compile_one(sys.argv[1], sys.argv[2], sys.argv[3:]))
    lib = sys.argv[1] if len(sys.argv) > 1 else "libnvrtc.so.13"
    bad = 0
    # The second grouped-GEMM compile adds the opt-in harness kernels (MXT_INSTANTIATE_V2 to _V7).
    for f, defs in (("mx_quantize.cu", []), ("mx_grouped_gemm.cu", []),
                    ("mx_grouped_gemm.cu", ["MXT_INSTANTIATE_V2", "MXT_INSTANTIATE_V3", "MXT_INSTANTIATE_V4", "MXT_INSTANTIATE_V5", "MXT_INSTANTIATE_V6", "MXT_INSTANTIATE_V7"])):
        # NVRTC loads libnvrtc-builtins from the library path: the children get the folder of
        # the libnvrtc given here on it.
        env = dict(os.environ)
        if os.path.dirname(lib):
            env["LD_LIBRARY_PATH"] = os.path.dirname(os.path.abspath(lib)) + ":" + env.get("LD_LIBRARY_PATH", "")
        r = subprocess.run([sys.executable, __file__, lib, f] + defs, env=env)
        bad |= r.returncode != 0
    sys.exit(1 if bad else 0)
