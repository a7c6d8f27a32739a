# Peer figure for `gpubench seqlen`'s decode: PyTorch's fastest route for one sequence's decode
# step. A Llama-family decoder (RMSNorm, RoPE, grouped-query attention, SwiGLU) written in plain
# torch over a static KV cache, its step compiled with torch.compile(mode="reduce-overhead",
# fullgraph=True): Inductor's fused kernels replayed from a CUDA graph, no Python per kernel. Random
# bf16 weights shaped from config/models/<preset>.json; the cache holds random keys and values
# below the context, and a step at context c attends to c + 1 keys (the cache is sized for the
# steps timed, as gpubench's engine is). Before timing, the compiled step's logits are checked
# against the same step in fp32 (as close as the eager bf16 step is). CUDA-event times: the median
# step timed alone, and the mean of the steps replayed back to back.
# Usage: python3 scripts/peers/torch_compiled_decode.py [preset] [contexts] [steps]
import json, os, sys, time
import torch
import torch.nn.functional as F

preset = sys.argv[1] if len(sys.argv) > 1 else "llama-2-7b"
contexts = [int(c) for c in (sys.argv[2] if len(sys.argv) > 2 else "512,2048,8192").split(",")]
steps = int(sys.argv[3]) if len(sys.argv) > 3 else 30
here = os.path.dirname(os.path.abspath(__file__))
cfg = json.load(open(os.path.join(here, "..", "..", "config", "models", preset + ".json")))
if cfg.get("model_type") not in ("llama", "qwen2", "mistral"):
    sys.exit(f"torch_compiled_decode.py: {preset} is not a Llama-family model")

torch._dynamo.config.automatic_dynamic_shapes = False  # one static graph per context
torch._inductor.config.coordinate_descent_tuning = True
dev, dt = "cuda", torch.bfloat16
H, I = cfg["hidden_size"], cfg["intermediate_size"]
heads = cfg["num_attention_heads"]
kv_heads = cfg.get("num_key_value_heads", heads)
D = cfg.get("head_dim") or H // heads
layers, vocab = cfg["num_hidden_layers"], cfg["vocab_size"]
eps, theta = cfg.get("rms_norm_eps", 1e-6), cfg.get("rope_theta", 10000.0)
qkv_bias = cfg.get("attention_bias", cfg["model_type"] == "qwen2")


def rand(*shape, scale=0.02):
    return (torch.randn(*shape, device=dev, dtype=torch.float32) * scale).to(dt)


def rms(x, w):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w


def rotate(x, cos, sin):  # x [1, 1, h, D]: halves rotated (the HF Llama layout)
    x1, x2 = x.float().chunk(2, -1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), -1).to(x.dtype)


class Decoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        P = torch.nn.Parameter
        self.emb = P(rand(vocab, H), requires_grad=False)
        self.lm_head = P(rand(vocab, H), requires_grad=False)
        self.final_norm = P(torch.ones(H, device=dev, dtype=dt), requires_grad=False)
        self.wqkv = torch.nn.ParameterList(
            [P(rand((heads + 2 * kv_heads) * D, H), requires_grad=False) for _ in range(layers)])
        self.bqkv = torch.nn.ParameterList(
            [P(rand((heads + 2 * kv_heads) * D), requires_grad=False) for _ in range(layers)]
            if qkv_bias else [])
        self.wo = torch.nn.ParameterList([P(rand(H, heads * D), requires_grad=False) for _ in range(layers)])
        self.w13 = torch.nn.ParameterList([P(rand(2 * I, H), requires_grad=False) for _ in range(layers)])
        self.w2 = torch.nn.ParameterList([P(rand(H, I), requires_grad=False) for _ in range(layers)])
        self.n1 = torch.nn.ParameterList(
            [P(1 + rand(H, scale=0.1), requires_grad=False) for _ in range(layers)])
        self.n2 = torch.nn.ParameterList(
            [P(1 + rand(H, scale=0.1), requires_grad=False) for _ in range(layers)])

    def size_cache(self, length):  # random keys and values: what a prefill would have left there
        for l in range(layers):  # buffers: the compiled graph updates them in place
            for name in (f"k{l}", f"v{l}"):
                self.register_buffer(name, None)
        torch.cuda.empty_cache()
        self.length = length
        for l in range(layers):
            for name in (f"k{l}", f"v{l}"):
                self.register_buffer(name, rand(1, kv_heads, length, D, scale=1.0))
        inv = 1.0 / theta ** (torch.arange(0, D, 2, device=dev, dtype=torch.float32) / D)
        ang = torch.arange(length, device=dev, dtype=torch.float32)[:, None] * inv[None, :]
        self.register_buffer("cos", ang.cos())
        self.register_buffer("sin", ang.sin())

    def forward(self, tok, pos, fp32=False):
        # tok [1, 1] int64, pos [1] int64: the new token's position. fp32: the reference, every
        # weight and activation in fp32 (eager only; the cache keeps its bf16 rows).
        W = (lambda p: p.float()) if fp32 else (lambda p: p)
        x = F.embedding(tok, W(self.emb))
        cos, sin = self.cos[pos].view(1, 1, 1, D // 2), self.sin[pos].view(1, 1, 1, D // 2)
        mask = (torch.arange(self.length, device=dev) <= pos).view(1, 1, 1, self.length)
        for l in range(layers):
            qkv = F.linear(rms(x, W(self.n1[l])), W(self.wqkv[l]), W(self.bqkv[l]) if qkv_bias else None)
            q, k, v = qkv.split((heads * D, kv_heads * D, kv_heads * D), -1)
            q = rotate(q.view(1, 1, heads, D), cos, sin).transpose(1, 2)
            k = rotate(k.view(1, 1, kv_heads, D), cos, sin).transpose(1, 2)
            kc, vc = getattr(self, f"k{l}"), getattr(self, f"v{l}")
            kc.index_copy_(2, pos, k.to(dt))
            vc.index_copy_(2, pos, v.view(1, 1, kv_heads, D).transpose(1, 2).to(dt))
            y = F.scaled_dot_product_attention(q, W(kc), W(vc), attn_mask=mask,
                                               enable_gqa=kv_heads != heads)
            x = x + F.linear(y.transpose(1, 2).reshape(1, 1, heads * D), W(self.wo[l]))
            g, u = F.linear(rms(x, W(self.n2[l])), W(self.w13[l])).chunk(2, -1)
            x = x + F.linear(F.silu(g) * u, W(self.w2[l]))
        return F.linear(rms(x, W(self.final_norm)), W(self.lm_head))


print("torch", torch.__version__, torch.cuda.get_device_name(), preset, flush=True)
model = Decoder()
weights = sum(p.numel() * p.element_size() for p in model.parameters())
print(f"weights {weights / 1e9:.2f} GB", flush=True)
with torch.inference_mode():
    for ctx in contexts:
        torch._dynamo.reset()
        model.size_cache(ctx + steps + 8)
        tok = torch.randint(0, vocab, (1, 1), device=dev)
        pos = torch.tensor([ctx], device=dev)
        ref = model(tok, pos, fp32=True)  # the step in fp32, then eagerly in bf16
        eager = model(tok, pos).float()  # both rewrite the same cache row, as the compiled step does
        step = torch.compile(model, mode="reduce-overhead", fullgraph=True)
        t0 = time.time()
        for _ in range(3):  # compile, then record the CUDA graph
            got = step(tok, pos).float().clone()
        compile_s = time.time() - t0

        def off(a, b):  # largest difference, as a share of the largest logit of b
            return ((a - b).abs().max() / b.abs().max()).item()

        # bf16 roundings over a deep random model move the logits by a few percent of the largest
        # (eager against fp32): the compiled step must be about as close to fp32 as eager is.
        e_ref, c_ref, c_eager = off(eager, ref), off(got, ref), off(got, eager)
        ok = c_ref <= 1.5 * e_ref + 0.005
        print(f"check ctx={ctx}: max logit difference, share of the largest: eager bf16 vs fp32 "
              f"{100 * e_ref:.2f}%, compiled vs fp32 {100 * c_ref:.2f}%, compiled vs eager "
              f"{100 * c_eager:.2f}%: {'ok' if ok else 'FAILED'}", flush=True)
        if not ok:
            sys.exit(1)
        positions = [torch.tensor([ctx + i], device=dev) for i in range(steps)]
        times = []
        for p in positions:  # contexts ctx .. ctx + steps - 1
            s = torch.cuda.Event(enable_timing=True)
            e = torch.cuda.Event(enable_timing=True)
            s.record()
            step(tok, p)
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e))
        times.sort()
        # The same steps again back to back (no wait for each): what the host adds per replay is
        # hidden, as in gpubench's replayed decode graphs.
        s = torch.cuda.Event(enable_timing=True)
        e = torch.cuda.Event(enable_timing=True)
        s.record()
        for p in positions:
            step(tok, p)
        e.record()
        e.synchronize()
        chained = s.elapsed_time(e) / steps
        cache = 2 * layers * kv_heads * D * (ctx + 1) * 2
        med = times[len(times) // 2]
        print(f"torch.compile decode ctx={ctx}: {med:.3f} ms/token each timed alone (min "
              f"{times[0]:.3f}), {chained:.3f} ms/token back to back ({(weights + cache) / chained / 1e6:.0f} "
              f"GB/s of weights + cache); compile {compile_s:.0f} s", flush=True)
