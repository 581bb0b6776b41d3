"""ResNet-18 (bench/models.py resnet18: eval-mode BatchNorm folded as running statistics, random weights), one
1 x 3 x 224 x 224 forward: unjitted vs TinyJit on the current device, and torch eager on CUDA with the *same* weights
when torch with CUDA is installed (the functional forward below), so the logits are compared, not only timed.

  TINYSCHED_DEVICE=OPENCL python bench/resnet18_jit.py [--runs 10]

Per call: median of --runs after warm-up, each call synchronized; torch's fp32 convolutions without TF32.
"""
from __future__ import annotations
import argparse, os, statistics, sys, time
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import numpy as np
from bench.jit_timing import unjitted_vs_jit  # noqa: E402

def _torch_forward(torch, s_np: dict, dev: str):
  """The same network as bench/models.py resnet18's forward, in torch.nn.functional, on the numpy weights."""
  F = torch.nn.functional
  t = lambda a: torch.tensor(a, device=dev)  # noqa: E731
  def cbn_w(p): return {k: t(v) for k, v in p.items()}
  stem, fc = cbn_w(s_np["stem"]), t(s_np["fc"])
  blocks = [{"c1": cbn_w(b["c1"]), "c2": cbn_w(b["c2"]), "down": cbn_w(b["down"]) if b["down"] is not None else None, "stride": b["stride"]}
            for b in s_np["blocks"]]
  def cbn(x, p, stride=1, pad=0):
    x = F.conv2d(x, p["w"], stride=stride, padding=pad)
    sh = (1, -1, 1, 1)
    return (x - p["m"].reshape(sh)) * (p["v"].reshape(sh) + 1e-5).rsqrt() * p["g"].reshape(sh) + p["b"].reshape(sh)
  def fwd(x):
    x = F.max_pool2d(cbn(x, stem, 2, 3).relu(), 3, 2, 1)
    for b in blocks:
      out = cbn(cbn(x, b["c1"], b["stride"], 1).relu(), b["c2"], 1, 1)
      x = (out + (cbn(x, b["down"], b["stride"]) if b["down"] is not None else x)).relu()
    return x.mean((2, 3)) @ fc
  return fwd

def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--runs", type=int, default=10)
  a = ap.parse_args()
  from tinysched import Tensor, TinyJit, Device
  from tinysched.nn.optim import Adam
  from bench.models import resnet18
  Tensor.manual_seed(0)
  setup, forward = resnet18(Tensor, Adam)
  s = setup()
  # bench/models.py draws weights uniform in [0, 1) (it measures scheduling only): through 20 convolutions the activations
  # would overflow, so the convolutions get He-normal weights and the head 1/sqrt(fan_in), as a trained network's scale
  for p in [s["stem"], *(q for b in s["blocks"] for q in (b["c1"], b["c2"], b["down"]) if q is not None)]:
    co, ci, kh, kw = p["w"].shape
    p["w"] = (Tensor.randn(co, ci, kh, kw) * (2 / (ci * kh * kw)) ** 0.5).realize()
  s["fc"] = (Tensor.randn(512, 1000) * 512 ** -0.5).realize()
  dev = Device[Device.DEFAULT]
  def fwd(x: Tensor) -> Tensor: return forward({**s, "x": x})[0].realize()
  jit = TinyJit(fwd)
  rng = np.random.default_rng(7)
  def image() -> Tensor: return Tensor(rng.random((1, 3, 224, 224), dtype=np.float32)).realize()
  outs = unjitted_vs_jit(dev, fwd, jit, image, a.runs, f"ResNet-18 1 x 3 x 224 x 224 forward, eval BN, random weights, device {Device.DEFAULT}")
  try: import torch
  except ImportError:
    print("torch eager: not run (torch is not installed)")
    return
  tdev = "cuda" if torch.cuda.is_available() else "cpu"  # on CPU: the logits check, and a CPU time for scale
  sync = torch.cuda.synchronize if tdev == "cuda" else (lambda: None)
  torch.backends.cudnn.allow_tf32 = False
  torch.backends.cuda.matmul.allow_tf32 = False
  def np_of(p): return {k: v.numpy() for k, v in p.items() if k in ("w", "g", "b", "m", "v")}
  s_np = {"stem": np_of(s["stem"]), "fc": s["fc"].numpy(),
          "blocks": [{"c1": np_of(b["c1"]), "c2": np_of(b["c2"]), "down": np_of(b["down"]) if b["down"] else None, "stride": b["stride"]}
                     for b in s["blocks"]]}
  tf = _torch_forward(torch, s_np, tdev)
  x0, o0 = outs[0]
  with torch.no_grad():
    ref = tf(torch.tensor(x0.numpy(), device=tdev)).cpu().numpy()
    tx = torch.tensor(rng.random((1, 3, 224, 224), dtype=np.float32), device=tdev)
    for _ in range(3): tf(tx)
    sync()
    tt = []
    for _ in range(a.runs):
      t0 = time.perf_counter(); tf(tx); sync(); tt.append(time.perf_counter() - t0)
  scale = float(np.abs(ref).max())
  print(f"torch {torch.__version__} {tdev} eager (same weights): median {statistics.median(tt) * 1e3:.2f} ms; "
        f"max |ours - torch| = {float(np.abs(o0 - ref).max()):.2e} (logits up to {scale:.2e}, relative {float(np.abs(o0 - ref).max()) / scale:.1e})")

if __name__ == "__main__":
  main()
