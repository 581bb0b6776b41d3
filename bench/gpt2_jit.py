"""GPT-2 small (12 x 768, vocab 50257, random weights), one 1 x 64 forward with full logits: unjitted vs TinyJit on the
current device, and torch eager on CUDA when torch with CUDA is installed (the same architecture and
weights: the functional GPT-2 below, so the logits are compared too).

  TINYSCHED_DEVICE=OPENCL python bench/gpt2_jit.py [--runs 10] [--dtype float16] [--torch-graph]

--dtype float16 runs both sides in half (our weights cast once; torch's the same values): the model whose matmuls the
tensor-core kernels take on an NVIDIA GPU (TINYSCHED_TC=0 turns them off, for the side-by-side). --torch-graph also
times torch's forward replayed as one CUDA graph and compiled by torch.compile (inductor, default mode).

Per call: median of --runs after warm-up, each call synchronized. The jitted output is checked against the unjitted
one (max abs difference) every call.
"""
from __future__ import annotations
import argparse, os, statistics, sys, time
import numpy as np
_HERE = os.path.dirname(os.path.abspath(__file__))
# bench/profile.py is named like the standard library's profile, which torch.compile imports: keep this folder off the path
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))
from bench.jit_timing import unjitted_vs_jit  # noqa: E402

def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--runs", type=int, default=10)
  ap.add_argument("--decode", type=int, default=32, help="greedy decode steps with the KV cache after a 16-token prompt (0: skip)")
  ap.add_argument("--dtype", default="float32", choices=("float32", "float16"))
  ap.add_argument("--torch-graph", action="store_true", help="also time torch's forward as a CUDA graph and through torch.compile")
  a = ap.parse_args()
  from tinysched import Tensor, TinyJit, Device, dtypes
  from tinysched.models.gpt2 import GPT2, GPT2Config, random_gpt2_weights
  c = GPT2Config()
  model = GPT2(c, random_gpt2_weights(c, seed=0), **({"dtype": dtypes.float16} if a.dtype == "float16" else {}))
  dev = Device[Device.DEFAULT]
  def fwd(tok: Tensor) -> Tensor:
    model.cache = []  # fresh KV caches: every call is the same full forward from position 0
    return model._head(model._hidden(tok, 0)).realize()
  jit = TinyJit(fwd)
  rng = np.random.default_rng(7)
  def tokens() -> Tensor: return Tensor(rng.integers(0, c.vocab_size, (1, 64)).astype(np.int32), dtype=dtypes.int32).realize()
  tc = os.environ.get("TINYSCHED_TC", "1") != "0" and bool(getattr(dev, "target", None) and dev.target.tensor_cores)
  outs = unjitted_vs_jit(dev, fwd, jit, tokens, a.runs, f"GPT-2 small 1 x 64 forward in {a.dtype}, full logits, device {Device.DEFAULT}"
                                                           f" (tensor cores {'on' if tc else 'off'})")
  ids0, ours0 = outs[0]
  prompt = [int(t) for t in rng.integers(0, c.vocab_size, 16)]
  ours_ids = _decode_ours(model, prompt, a.decode, dev) if a.decode else None
  try:
    import torch
    if not torch.cuda.is_available(): raise ImportError("no CUDA")
  except ImportError as e:
    print(f"torch CUDA: not measured ({type(e).__name__}: {str(e)[:80]})")
    return
  torch.backends.cuda.matmul.allow_tf32 = False  # fp32 as fp32, as ours
  tf = torch_gpt2(torch, model.sd, c, "cuda", getattr(torch, a.dtype))
  with torch.no_grad():
    ref = tf(torch.tensor(ids0.numpy(), device="cuda").long()).cpu().numpy()[0]
    ids = torch.randint(0, c.vocab_size, (1, 64), device="cuda")
    ts = _torch_per_call(torch, tf, ids, a.runs)
  err = float(np.abs(ours0.reshape(ref.shape).astype(np.float32) - ref.astype(np.float32)).max())
  print(f"torch {torch.__version__} CUDA eager (same weights, functional GPT-2): median {statistics.median(ts) * 1e3:.2f} ms; "
        f"max |ours - torch| logits = {err:.2e} (logits up to {float(np.abs(ref).max()):.2e})")
  if a.torch_graph:
    with torch.no_grad():
      for name, run in _torch_graph_and_compile(torch, tf, ids):
        if isinstance(run, str): print(f"torch {name}: not measured ({run})")
        else: print(f"torch {name}: median {statistics.median(_torch_per_call(torch, run, ids, a.runs)) * 1e3:.2f} ms")
  if ours_ids is not None:
    with torch.no_grad():
      past: list = []
      logits = tf(torch.tensor([prompt], device="cuda"), past)
      tids = [int(logits[0, -1].argmax())]
      torch.cuda.synchronize(); t0 = time.perf_counter()
      for _ in range(a.decode - 1):
        logits = tf(torch.tensor([[tids[-1]]], device="cuda"), past)
        tids.append(int(logits[0, -1].argmax()))
      dt = time.perf_counter() - t0
    print(f"torch decode: {(a.decode - 1) / dt:.0f} tokens/s ({dt / (a.decode - 1) * 1e3:.2f} ms per token); "
          f"greedy tokens equal to ours: {tids == ours_ids}")

def _decode_ours(model, prompt: list[int], n: int, dev) -> list[int]:
  """Greedy decode with the KV cache: a prefill, then n - 1 jitted one-token steps at start_pos = Variable.bind(pos),
  each step's token read back (what a generation loop does); prints tokens/s over the steps after the jit's two."""
  from tinysched import Tensor, TinyJit, dtypes
  model.cache = []
  logits, tok = model.forward(prompt, 0)
  ids = [int(tok.numpy()[0])]
  step = TinyJit(model.forward)
  t0, host = None, 0.0
  for i in range(n - 1):
    if i == 2: dev.synchronize(); t0, host = time.perf_counter(), 0.0
    x = Tensor(np.array([[ids[-1]]], np.int32), dtype=dtypes.int32)
    h0 = time.perf_counter()
    _, tok = step(x, model.start_pos_var.bind(len(prompt) + i))
    host += time.perf_counter() - h0
    ids.append(int(tok.numpy()[0]))
  if t0 is not None:
    dt = time.perf_counter() - t0
    print(f"decode with the KV cache (TinyJit, {n - 3} steps timed): {(n - 3) / dt:.0f} tokens/s ({dt / (n - 3) * 1e3:.2f} ms per token, "
          f"{host / (n - 3) * 1e3:.2f} ms of it the host enqueueing the step's {len(step.recording.launches)} launches)")
  return ids

def _torch_per_call(torch, f, ids, runs: int) -> list[float]:
  """Seconds per call of f(ids), each call synchronized, after three warm-up calls."""
  for _ in range(3): f(ids)
  ts = []
  for _ in range(runs):
    torch.cuda.synchronize(); t0 = time.perf_counter(); f(ids); torch.cuda.synchronize(); ts.append(time.perf_counter() - t0)
  return ts

def _torch_graph_and_compile(torch, tf, ids):
  """(name, callable or why not) for torch's two launch-overhead cutters on the same forward: the call captured once in
  a CUDA graph and replayed (its input a static tensor, as a graph needs), and torch.compile (inductor, default mode;
  its first calls compile, outside the timing)."""
  try:
    static = ids.clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
      for _ in range(3): tf(static)  # warm-up on a side stream, as capture requires
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g): out = tf(static)
    def graphed(x):
      static.copy_(x)
      g.replay()
      return out
    yield "CUDA graph", graphed
  except Exception as e:  # noqa: BLE001 (a bench reports what it could not measure)
    yield "CUDA graph", f"{type(e).__name__}: {str(e)[:120]}"
  try:
    cf = torch.compile(tf)
    t0 = time.perf_counter()
    cf(ids); torch.cuda.synchronize()
    yield f"compile (inductor, default mode; compiled in {time.perf_counter() - t0:.0f} s)", cf
  except Exception as e:  # noqa: BLE001
    yield "compile", f"{type(e).__name__}: {str(e)[:120]}"

def torch_gpt2(torch, sd: dict, c, dev: str, dtype=None):
  """GPT-2 in torch.nn.functional on our weights (HF names and Conv1D layouts: x @ W), logits for every position."""
  F = torch.nn.functional
  W = {k: torch.tensor(v, device=dev).to(dtype or torch.float32) for k, v in sd.items()}
  H, d, eps = c.n_head, c.n_embd, c.layer_norm_epsilon
  def fwd(ids, past: list | None = None):
    """Logits (1, T, vocab). `past`: a list of per-layer (k, v) the call extends (empty: a prefill), or None."""
    T = ids.shape[1]
    p0 = past[0][0].shape[2] if past else 0
    x = W["transformer.wte.weight"][ids] + W["transformer.wpe.weight"][p0:p0 + T]
    mask = torch.full((T, p0 + T), float("-inf"), device=dev, dtype=x.dtype).triu(p0 + 1)
    for i in range(c.n_layer):
      p = f"transformer.h.{i}."
      h = F.layer_norm(x, (d,), W[p + "ln_1.weight"], W[p + "ln_1.bias"], eps)
      q, k, v = (t.view(1, T, H, d // H).transpose(1, 2) for t in (h @ W[p + "attn.c_attn.weight"] + W[p + "attn.c_attn.bias"]).split(d, dim=-1))
      if past is not None:
        if len(past) > i: k, v = torch.cat([past[i][0], k], 2), torch.cat([past[i][1], v], 2)
        if len(past) > i: past[i] = (k, v)
        else: past.append((k, v))
      att = F.softmax(q @ k.transpose(-1, -2) / (d // H) ** 0.5 + mask, dim=-1) @ v
      x = x + att.transpose(1, 2).reshape(1, T, d) @ W[p + "attn.c_proj.weight"] + W[p + "attn.c_proj.bias"]
      h = F.layer_norm(x, (d,), W[p + "ln_2.weight"], W[p + "ln_2.bias"], eps)
      h = F.gelu(h @ W[p + "mlp.c_fc.weight"] + W[p + "mlp.c_fc.bias"], approximate="tanh")
      x = x + h @ W[p + "mlp.c_proj.weight"] + W[p + "mlp.c_proj.bias"]
    return F.layer_norm(x, (d,), W["transformer.ln_f.weight"], W["transformer.ln_f.bias"], eps) @ W["transformer.wte.weight"].T
  return fwd

if __name__ == "__main__": main()
