"""Clock and power while a GEMM runs: is the MX kernel held back by the card's power limit?

Runs each phase (our MX forward kernels, torch BF16 `_grouped_mm`, torch FP8 rowwise
`_scaled_grouped_mm`) back to back for a few seconds on shape a while `nvidia-smi -lms 100`
samples SM clock, power draw and the active clock-event (throttle) reasons, and prints per
phase: achieved TFLOP/s, mean SM clock, mean power, the reasons seen, and TFLOP/s per GHz
(the rate the phase would have at a fixed clock). Usage, on the GPU machine after run.sh has
built libmxbench.so: `python3 plugin-mxfp8/cuda/bench/power.py [--seconds 4] [--variants _v2u,_v5]`.
"""
import argparse, os, subprocess, sys, threading, time
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (loads libmxbench.so)

# nvidia-smi clocks_event_reasons bits (nvml.h, NVML_CLOCKS_EVENT_REASON_*)
REASONS = {0x1: "idle", 0x2: "app-clocks", 0x4: "sw-power-cap", 0x8: "hw-slowdown", 0x20: "sw-thermal",
           0x40: "hw-thermal", 0x80: "hw-power-brake", 0x100: "display-clocks"}


def sampler(out):
    cmd = ["nvidia-smi", "--query-gpu=clocks.sm,power.draw,clocks_event_reasons.active,temperature.gpu",
           "--format=csv,noheader,nounits", "-lms", "100"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)

    def read():
        for line in p.stdout:
            try:
                clk, pw, rs, tc = [x.strip() for x in line.split(",")]
                out.append((time.time(), float(clk), float(pw), int(rs, 16), float(tc)))
            except ValueError:
                pass
    threading.Thread(target=read, daemon=True).start()
    return p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--variants", default="_v2u", help="MX kernel suffixes to run (comma-separated)")
    a = ap.parse_args()
    E, Mg, K, N = bench.SHAPES["a"]
    M = E * Mg
    offs = torch.tensor([Mg * (i + 1) for i in range(E)], dtype=torch.int32, device=bench.DEV)
    X = torch.randn(M, K, device=bench.DEV, dtype=torch.bfloat16)
    W = torch.randn(E, N, K, device=bench.DEV, dtype=torch.bfloat16) * 0.05
    qx, qw = bench.quantize(X, bench.ROWS), bench.quantize(W, bench.TILE | bench.TILE_T)
    o = torch.empty(M, N, dtype=torch.bfloat16, device=bench.DEV)
    fl = 2.0 * M * N * K

    def mx(sfx):
        def f():
            bench.SUFFIX = sfx
            bench.fwd_call(qx["qa"], qx["sa"], qw["qa"], qw["sa"], offs, E, M, N, K, True, o)
        return f
    Wt = W.transpose(-2, -1)
    phases = [(f"mx fwd 1x32 x 32x32 [{v}]", mx(v)) for v in a.variants.split(",") if v]
    phases.append(("torch BF16 _grouped_mm fwd", lambda: torch._grouped_mm(X, Wt, offs=offs)))
    sgm = getattr(torch, "_scaled_grouped_mm", None)
    if sgm is not None:
        Xq = X.to(torch.float8_e4m3fn)
        Wq = W.to(torch.float8_e4m3fn)
        sa = torch.ones(M, device=bench.DEV, dtype=torch.float32)
        sb = torch.ones(E, N, device=bench.DEV, dtype=torch.float32)
        phases.append(("torch FP8 rowwise _scaled_grouped_mm fwd",
                       lambda: sgm(Xq, Wq.transpose(-2, -1), sa, sb, offs=offs, out_dtype=torch.bfloat16)))
    phases.append(phases[0])  # the first MX phase again, last (drift check)
    samples = []
    proc = sampler(samples)
    time.sleep(1.0)
    spans = []
    for name, fn in phases:
        fn(); torch.cuda.synchronize()
        t0, n = time.time(), 0
        while time.time() - t0 < a.seconds:
            for _ in range(4):
                fn()
            n += 4
            torch.cuda.synchronize()
        t1 = time.time()
        spans.append((name, t0, t1, n))
        time.sleep(0.7)
    proc.terminate()
    print(f"{torch.cuda.get_device_name()}  shape a (E8 M4096 K4096 N4096), {a.seconds:.0f} s per phase, "
          f"nvidia-smi every 100 ms (first second of each phase skipped)")
    print("phase | TFLOP/s | SM MHz (mean, min) | W (mean, max) | °C | clock-event reasons | TFLOP/s per GHz")
    for name, t0, t1, n in spans:
        ss = [s for s in samples if t0 + 1.0 < s[0] < t1]
        tf = fl * n / (t1 - t0) / 1e12
        if not ss:
            print(f"{name} | {tf:.0f} | - | - | - | no samples | -")
            continue
        clk = sum(s[1] for s in ss) / len(ss)
        pw = sum(s[2] for s in ss) / len(ss)
        bits = 0
        for s in ss:
            bits |= s[3]
        rs = ",".join(v for k, v in REASONS.items() if bits & k) or "none"
        print(f"{name} | {tf:.0f} | {clk:.0f}, {min(s[1] for s in ss):.0f} | {pw:.0f}, {max(s[2] for s in ss):.0f} | "
              f"{ss[-1][4]:.0f} | {rs} | {tf / (clk / 1000):.0f}")


if __name__ == "__main__":
    main()
