"""Host time of a jitted GPT-2 call, per launch: TinyJit's prepared replay (the default) against the general path (every
launch through realize.exec_item and the backend's exec_ast: `jit.per_launch = True`), alternating call by call in one
process; and against the code of another tree (an earlier commit exported to a folder: --baseline DIR), alternating
round by round, one child process per tree and round.

  TINYSCHED_DEVICE=OPENCL python bench/jit_host.py [--model tiny|small] [--dtype float32|float16] [--calls 20]
      [--rounds 3] [--baseline DIR]

Per call: "host" is the time from the call to its return, the device queue drained before it (what the host spends
enqueueing the launches); "wall" runs to the end of the device queue. Prefill: one 1 x 64 forward with full logits.
Decode: one token with the KV cache at start_pos = Variable.bind(position), the token read back (a generation loop's
step; its launches with Variables set them per call). The outputs of the two paths are compared bit for bit.
To export a baseline: `git archive <commit> | tar -x -C DIR`.
"""
from __future__ import annotations
import argparse, json, os, statistics, subprocess, sys, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

def child(model: str, dtype: str, calls: int) -> dict:
  import numpy as np
  from tinysched import Tensor, TinyJit, Device, dtypes
  from tinysched.models.gpt2 import GPT2, GPT2Config, GPT2_TINY, random_gpt2_weights
  c = GPT2Config() if model == "small" else GPT2_TINY
  sd = random_gpt2_weights(c, seed=0)
  kw = {"dtype": dtypes.float16} if dtype == "float16" else {}
  dev = Device[Device.DEFAULT]
  general = hasattr(TinyJit(lambda: None), "per_launch")  # a tree before the prepared path has no general switch
  paths = ["prepared", "general"] if general else ["prepared"]
  out: dict = {"paths": {}}
  rng = np.random.default_rng(7)
  # prefill: one model, a jit per path
  m = GPT2(c, sd, **kw)
  def fwd(tok: Tensor) -> Tensor:
    m.cache = []
    return m._head(m._hidden(tok, 0)).realize()
  jits = {p: TinyJit(fwd) for p in paths}
  if general: jits["general"].per_launch = True
  toks = [Tensor(rng.integers(0, c.vocab_size, (1, 64)).astype(np.int32), dtype=dtypes.int32).realize() for _ in range(calls + 3)]
  res: dict = {p: {"host": [], "wall": []} for p in paths}
  last: dict = {}
  for i, tok in enumerate(toks):
    for p in paths:
      dev.synchronize()
      t0 = time.perf_counter()
      o = jits[p](tok)
      t1 = time.perf_counter()
      dev.synchronize()
      t2 = time.perf_counter()
      if i >= 3:
        res[p]["host"].append(t1 - t0)
        res[p]["wall"].append(t2 - t0)
      last[p] = o.numpy().tobytes()
    if general and last["prepared"] != last["general"]: raise SystemExit(f"prefill call {i}: the two paths' logits differ")
  n_prefill = len(jits["prepared"].recording.launches)
  # decode: a model per path (each has its KV cache)
  models = {p: GPT2(c, sd, **kw) for p in paths}
  prompt = [int(t) for t in rng.integers(0, c.vocab_size, 16)]
  steps, ids = {}, {}
  for p, mm in models.items():
    mm.cache = []
    ids[p] = int(mm.forward(prompt, 0)[1].numpy()[0])
    steps[p] = TinyJit(mm.forward)
    if p == "general": steps[p].per_launch = True
  dres: dict = {p: {"host": [], "wall": []} for p in paths}
  for i in range(calls + 3):
    for p in paths:
      mm = models[p]
      x = Tensor(np.array([[ids[p]]], np.int32), dtype=dtypes.int32).realize()
      dev.synchronize()
      t0 = time.perf_counter()
      _, tok = steps[p](x, mm.start_pos_var.bind(len(prompt) + i))
      t1 = time.perf_counter()
      ids[p] = int(tok.numpy()[0])
      t2 = time.perf_counter()
      if i >= 3:
        dres[p]["host"].append(t1 - t0)
        dres[p]["wall"].append(t2 - t0)
    if general and ids["prepared"] != ids["general"]: raise SystemExit(f"decode step {i}: the two paths chose other tokens")
  n_decode = len(steps["prepared"].recording.launches)
  for p in paths:
    out["paths"][p] = {k: {"launches": n, **{m_: statistics.median(v[m_]) for m_ in ("host", "wall")}}
                       for k, n, v in (("prefill", n_prefill, res[p]), ("decode", n_decode, dres[p]))}
  return out

def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--model", choices=("tiny", "small"), default="tiny")
  ap.add_argument("--dtype", choices=("float32", "float16"), default="float32")
  ap.add_argument("--calls", type=int, default=20)
  ap.add_argument("--rounds", type=int, default=3)
  ap.add_argument("--baseline", help="a folder holding another tree's code (git archive <commit> | tar -x -C DIR)")
  ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
  a = ap.parse_args()
  if a.child:
    print(json.dumps(child(a.model, a.dtype, a.calls)))
    return
  trees = {"this tree": ROOT} | ({"baseline": Path(a.baseline).resolve()} if a.baseline else {})
  got: dict = {t: [] for t in trees}
  for r in range(a.rounds):
    for name, tree in trees.items():
      env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])}
      p = subprocess.run([sys.executable, str(ROOT / "bench" / "jit_host.py"), "--child", "--model", a.model, "--dtype", a.dtype,
                          "--calls", str(a.calls)], env=env, cwd=tree, capture_output=True, text=True)
      if p.returncode != 0: raise SystemExit(f"{name}, round {r}: {p.stderr[-2000:]}")
      got[name].append(json.loads(p.stdout.strip().splitlines()[-1]))
  from tinysched import Device
  print(f"# jitted GPT-2 {a.model} ({a.dtype}) on {Device.DEFAULT}, {time.strftime('%Y-%m-%d %H:%M')}, load {os.getloadavg()[0]:.2f}; "
        f"{a.rounds} rounds x {a.calls} calls, medians of the rounds' medians")
  print("| tree | path | call | launches | host ms | host us/launch | wall ms |")
  print("|---|---|---|---:|---:|---:|---:|")
  for name, runs in got.items():
    for path in runs[0]["paths"]:
      for call in ("prefill", "decode"):
        rows = [r["paths"][path][call] for r in runs]
        n = rows[0]["launches"]
        host, wall = statistics.median(x["host"] for x in rows), statistics.median(x["wall"] for x in rows)
        print(f"| {name} | {path} | {call} | {n} | {host * 1e3:.2f} | {host / n * 1e6:.1f} | {wall * 1e3:.2f} |")

if __name__ == "__main__": main()
