# Peer figures for `gpubench matmul`: torch.matmul (and torch._scaled_mm for fp8) TFLOP/s on the same
# GPU, randn inputs reused (hot), median of CUDA-event times. Usage: python3 scripts/peers/torch_matmul.py
import sys, torch
torch.backends.cuda.matmul.allow_tf32 = False
def bench(fn, flops, iters=50):
    for _ in range(10): fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        s = torch.cuda.Event(enable_timing=True); e = torch.cuda.Event(enable_timing=True)
        s.record(); fn(); e.record(); e.synchronize(); ts.append(s.elapsed_time(e) / 1e3)
    ts.sort()
    return flops / ts[len(ts) // 2] / 1e12
print("torch", torch.__version__, torch.cuda.get_device_name())
for dt, sizes in (("bf16", (2048, 4096, 8192, 16384)), ("fp16", (4096, 8192)), ("tf32", (4096, 8192)), ("fp32", (8192, 16384)), ("fp8", (4096, 8192))):
    for n in sizes:
        if dt == "fp8":
            a = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
            b = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn).t()
            one = torch.ones((), device="cuda")
            fn = lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        else:
            t = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32, "fp32": torch.float32}[dt]
            torch.backends.cuda.matmul.allow_tf32 = dt == "tf32"
            a = torch.randn(n, n, device="cuda", dtype=t); b = torch.randn(n, n, device="cuda", dtype=t)
            fn = lambda: torch.matmul(a, b)
        print(f"{dt} {n}: {bench(fn, 2.0 * n ** 3, 20 if n >= 16384 else 50):.1f} TFLOP/s", flush=True)
