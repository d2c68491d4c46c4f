# Run 159 (docs/perf.md): cuBLAS bf16 batched GEMMs through torch.bmm at the anchor shapes'
# forward and dgrad dimensions, with the weight operand in each layout: which layout is slow?
#   fwd:      out[M,N] = X[M,K] . W[N,K]^T       (W K-major, "TN")
#   dgrad_t:  dX[M,K]  = dY[M,N] . Wt[K,N]^T     (the transposed copy, K-major, "TN")
#   dgrad_n:  dX[M,K]  = dY[M,N] . W[N,K]        (W as stored, reduction-major, "NN")
import torch, sys
torch.manual_seed(0)
shapes = {"a": (8, 4096, 4096, 4096), "b": (8, 4096, 2048, 8192), "c": (32, 1024, 2880, 2880)}
def t(f, reps=30):
    for _ in range(5): f()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(reps): f()
    e.record(); torch.cuda.synchronize()
    return s.elapsed_time(e) * 1000 / reps
for key in sys.argv[1].split(","):
    E, M, K, N = shapes[key]
    x = torch.randn(E, M, K, device="cuda", dtype=torch.bfloat16)
    dy = torch.randn(E, M, N, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(E, N, K, device="cuda", dtype=torch.bfloat16)
    wt = w.transpose(1, 2).contiguous()
    res = {}
    for rnd in range(2):
        res.setdefault("fwd", []).append(t(lambda: torch.bmm(x, w.transpose(1, 2))))
        res.setdefault("dgrad_t", []).append(t(lambda: torch.bmm(dy, wt.transpose(1, 2))))
        res.setdefault("dgrad_n", []).append(t(lambda: torch.bmm(dy, w)))
    print(key, " ".join(f"{k} {min(v):.1f}/{max(v):.1f} us" for k, v in res.items()), flush=True)
    del x, dy, w, wt
    torch.cuda.empty_cache()
