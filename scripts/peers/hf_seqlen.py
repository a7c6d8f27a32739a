# Peer figures for `gpubench seqlen`: HuggingFace transformers (eager, attn_implementation="sdpa")
# on a randomly initialised model built from the same config/models/*.json, bf16, batch 1, on the
# same GPU; and torch's scaled_dot_product_attention alone per backend (causal, the model's heads).
# Median of CUDA-event times. Usage: python3 scripts/peers/hf_seqlen.py [preset] [lengths]
import json, os, sys, torch
from torch.nn.attention import SDPBackend, sdpa_kernel

preset = sys.argv[1] if len(sys.argv) > 1 else "llama-2-7b"
lengths = [int(x) for x in (sys.argv[2] if len(sys.argv) > 2 else "512,2048,8192").split(",")]
here = os.path.dirname(os.path.abspath(__file__))
cfg = json.load(open(os.path.join(here, "..", "..", "config", "models", preset + ".json")))


def median_ms(fn, iters, warmup=2):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        s = torch.cuda.Event(enable_timing=True)
        e = torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e))
    ts.sort()
    return ts[len(ts) // 2]


print("torch", torch.__version__, torch.cuda.get_device_name(), flush=True)
heads, d = cfg["num_attention_heads"], cfg["hidden_size"] // cfg["num_attention_heads"]
kv_heads = cfg.get("num_key_value_heads", heads)
for L in lengths:
    q = torch.randn(1, heads, L, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, kv_heads, L, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(1, kv_heads, L, d, device="cuda", dtype=torch.bfloat16)
    flops = 4.0 * d * heads * L * (L + 1) / 2
    for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
                          ("efficient", SDPBackend.EFFICIENT_ATTENTION), ("default", None)):
        try:
            if backend is None:
                fn = lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                                              enable_gqa=kv_heads != heads)
                t = median_ms(fn, 20)
            else:
                with sdpa_kernel(backend):
                    fn = lambda: torch.nn.functional.scaled_dot_product_attention(
                        q, k, v, is_causal=True, enable_gqa=kv_heads != heads)
                    t = median_ms(fn, 20)
            print(f"sdpa {name} L={L}: {t:.3f} ms {flops / t / 1e9:.1f} TFLOP/s", flush=True)
        except Exception as e:  # a backend that refuses the shapes
            print(f"sdpa {name} L={L}: not run ({type(e).__name__}: {str(e).splitlines()[0][:100]})")
    del q, k, v

try:
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM
except ImportError:
    print("transformers: not installed")
    sys.exit(0)
print("transformers", transformers.__version__, flush=True)
hf = AutoConfig.for_model(**{k: v for k, v in cfg.items() if not k.startswith("_")})
hf._attn_implementation = "sdpa"
torch.set_default_dtype(torch.bfloat16)
with torch.device("cuda"):
    model = AutoModelForCausalLM.from_config(hf, attn_implementation="sdpa", torch_dtype=torch.bfloat16)
model.eval()
vocab = cfg["vocab_size"]


def prefill(ids):  # logits of the last position only, where this transformers version allows it
    try:
        return model(ids, use_cache=True, logits_to_keep=1)
    except TypeError:
        return model(ids, use_cache=True)


with torch.inference_mode():
    for L in lengths:
        ids = torch.randint(0, vocab, (1, L), device="cuda")
        t = median_ms(lambda: prefill(ids), 5)
        print(f"hf prefill L={L}: {t:.2f} ms", flush=True)
        out = prefill(ids)
        cache = out.past_key_values
        nxt = torch.randint(0, vocab, (1, 1), device="cuda")
        steps = []
        for i in range(12):  # context L, L+1, ...: the cache grows by one per step
            s = torch.cuda.Event(enable_timing=True)
            e = torch.cuda.Event(enable_timing=True)
            s.record()
            o = model(nxt, past_key_values=cache, use_cache=True)
            e.record()
            e.synchronize()
            cache = o.past_key_values
            if i >= 2:
                steps.append(s.elapsed_time(e))
        steps.sort()
        print(f"hf decode ctx={L}: {steps[len(steps) // 2]:.2f} ms/token (eager)", flush=True)
        del cache, out
        torch.cuda.empty_cache()
