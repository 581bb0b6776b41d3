"""Baseline members beside the model suite: `replay accept` captures them after the models (EXTRAS names them).

  tests       this project's Tensor and scheduler tests (TEST_PATHS) captured with `pytest --replay-capture` on
              OPENCL, every level, then distilled against the model stores (replay/baseline/distill.py, PER_RULE captures
              per rule): what no model does (a pad over exp, a bitcast, a COPY source, an arange kept stored) enters
              the baseline through the tests that exercise it, a few rows per rule instead of thousands
  gpu_target  program-level captures of GPU_MODELS rendered for TARGET (an NVIDIA-like GPU description from
              tinysched/codegen/target.py) on this machine, with no such device: local memory, barriers and the GPU
              work-group choice are replayed (with --reoptimize, re-chosen) on every change. Execution runs them
              wherever an OpenCL device can take their work-group sizes
  frontend    the model level: every model call of tinysched/models/calls.py (float16 and bfloat16 forward and backward,
              optimizer steps, normalizations, a CNN training step with the fusion switches on and off, a KV-cache decode step), each
              with the big graphs it builds, its host data digests and its numbers on this machine's default device
              (replay/record/calls.py): a change to the Tensor API, autograd, nn or the optimizers is judged by its numbers
  index_past_2_31  kernels whose indices pass 2**31 (a 4 GiB int8 buffer read through a Variable-sized shrink, a read at
              the last element of a 2.5 GiB buffer), scheduled and not run: the
              real sizes users have, so the index proofs (replay prove) check int64 indexing and narrowing on the
              baseline itself. Their buffers are past what the execution check may allocate here: it skips them, saying so

All are made with the current checkout's code, like the model stores; a failing test run or a model that fails
stops the accept before any store is replaced.
"""
from __future__ import annotations
import os, subprocess, sys, time
from pathlib import Path
from typing import Callable
from replay.errors import HintedError
from replay.baseline.checkouts import subprocess_env
from replay.baseline.distill import distill, summary
from replay.baseline.suite import run_model

Log = Callable[[str], None]
EXTRAS = ("gpu_target", "index_past_2_31", "frontend", "tests")
TEST_PATHS = ("tests/tinysched",)
GPU_MODELS = ("cnn_train", "gpt2_tiny", "mlp_digits")
TARGET = "nvidia-like-gpu"
PER_RULE = 3

class BaselineError(HintedError):
  """A baseline member that cannot be made (failing tests, a failed model): the message and what to do next."""

def _serial() -> list[str]:
  # one process, in file order: a test's captured inputs depend on what the tests before it in its process left (buffers
  # realized, buffer numbers, memo state), so workers that take tests in whatever order they come (pytest-xdist) capture
  # other inputs in every run, and the distilled store would change on an unchanged main
  try: import xdist  # noqa: F401 (installed: switched off for this run)
  except ImportError: return []
  return ["-p", "no:xdist"]

def capture_tests(out: Path, root: Path, model_stores: list[Path], timeout: float | None, log: Log) -> dict:
  """The `tests` member: capture the test run into a scratch store beside `out`, distill it into `out`."""
  raw = out.with_name(f".{out.name}.raw-{os.getpid()}.db")
  for suffix in ("", "-wal", "-shm"): Path(f"{raw}{suffix}").unlink(missing_ok=True)
  env = {**subprocess_env(root), "TINYSCHED_DEVICE": "OPENCL"}  # capture variables stripped: only --replay-capture records
  # (one order, and hypothesis' examples derandomized by tests/conftest.py's profile: the same inputs in every run)
  cmd = [sys.executable, "-m", "pytest", *TEST_PATHS, "-q", "-x", "-p", "no:cacheprovider", "-p", "replay.baseline.pytest_plugin", *_serial(),
         "--hypothesis-profile=replay-capture",
         "--replay-capture", str(raw)]
  t0 = time.perf_counter()
  try:
    log(f"    {' '.join(cmd[2:])}")
    try: r = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired: raise BaselineError(f"the test run for the `tests` store took over {timeout}s", "raise --timeout") from None
    if r.returncode != 0:
      tail = "\n      ".join((r.stdout + r.stderr).strip().splitlines()[-12:])
      raise BaselineError(f"the test run for the `tests` store failed (exit {r.returncode}):\n      {tail}",
                          "a baseline is captured from passing tests: fix them first")
    log(f"    tests passed in {time.perf_counter() - t0:.0f}s; distilling against {len(model_stores)} model store(s)")
    res = distill([str(raw)], str(out), against=[str(p) for p in model_stores], per_rule=PER_RULE, log=lambda s: log(f"    {s}"))
    log("    " + summary(res, PER_RULE).replace("\n", "\n    "))
    return {"model": "tests", "ok": True, "seconds": round(time.perf_counter() - t0, 2), "kept": len(res.kept)}
  finally:
    for suffix in ("", "-wal", "-shm"): Path(f"{raw}{suffix}").unlink(missing_ok=True)

def capture_gpu_target(out: Path, root: Path, timeout: float | None, log: Log) -> dict:
  """The `gpu_target` member: GPU_MODELS' kernels rendered for TARGET, program level, into one store `out`."""
  t0 = time.perf_counter()
  # NUMPY: realize renders nothing for the host device, so every program row is the target's
  env = {"TINYSCHED_DEVICE": "NUMPY", "TINYSCHED_CAPTURE_TARGET": TARGET}
  for m in GPU_MODELS:
    r = run_model(m, out, quick=True, levels=("program",), cwd=str(root), timeout=timeout, env=env)
    if not r.get("ok") or r.get("skipped"):
      raise BaselineError(f"gpu_target: model {m} {'was skipped: ' + r['skipped'] if r.get('skipped') else 'failed: ' + str(r.get('error'))}",
                          "fix the model, or accept the others with --models")
    log(f"    {m} for {TARGET}: done in {r['seconds']}s")
  _run_code("gpu_target", TC_CODE, "tensor_cores", out, root, timeout, {"TINYSCHED_CAPTURE_LEVELS": "program", "TINYSCHED_DEVICE": "NUMPY",
                                                                       "TINYSCHED_CAPTURE_TARGET": TARGET})
  log(f"    tensor-core matmuls for {TARGET}: done")
  return {"model": "gpu_target", "ok": True, "seconds": round(time.perf_counter() - t0, 2)}

# fp16 and bf16 matmuls the tensor-core kernels take (tinysched/codegen/tensor_core.py): each operand layout (A and B
# contiguous along k or along m / n), a batched product, a float32 result, epilogues after the sum (a bias, a scale and
# ReLU in bfloat16, a residual, exp, GELU), and one they refuse (a comparison: the heuristic's other choice); edge tiles: M and
# N that no tile divides (84 x 70, both layouts transposed: too small for a tile; a 1001-wide head with a bias, a vocabulary in
# small; 120 x 1001 and 116 x 256 whose last 16-byte chunk is partly past the edge, rows aligned for cp.async). Small,
# so the NUMPY interpreter that captures them and the execution check stay fast.
TC_CODE = """
import numpy as np
from tinysched import Tensor
from tinysched.dtype import dtypes
rng = np.random.default_rng(0)
def t(*shape, dt=dtypes.float16): return Tensor(rng.standard_normal(shape).astype(np.float32)).cast(dt).realize()
a, b, w = t(128, 96), t(96, 256), t(192, 96)
(a @ b).realize()
(a @ w.T).realize()
(t(64, 128).T @ t(64, 128)).realize()
(t(64, 128, dt=dtypes.bfloat16) @ t(128, 64, dt=dtypes.bfloat16)).realize()
(t(4, 64, 32) @ t(4, 32, 128)).realize()
(a.float() @ b.float()).realize()
(a.cast(dtypes.float16) @ b).float().realize()
(a @ b + t(256)).realize()
((t(64, 128, dt=dtypes.bfloat16) @ t(128, 64, dt=dtypes.bfloat16)) * 0.5 + 1).relu().realize()
x = t(64, 128)
(x + x @ t(128, 128)).realize()
(a @ b).exp().realize()
(a @ b + t(256)).gelu().realize()
(a @ b > 0).where(a @ b, 0).realize()
(t(84, 64) @ t(64, 70)).realize()
(t(64, 84).T @ t(70, 64).T).realize()
(t(64, 128) @ t(1001, 128).T + t(1001)).realize()
(t(120, 64) @ t(64, 1008)[:, :1001]).realize()
(t(64, 128)[:, :116].T @ t(64, 256)).realize()
"""

def _run_code(member: str, code: str, label: str, out: Path, root: Path, timeout: float | None, env: dict[str, str]) -> None:
  env = {**subprocess_env(root), "TINYSCHED_CAPTURE": str(out.resolve()), "TINYSCHED_CAPTURE_LABEL": label, "TINYSCHED_CAPTURE_STRICT": "1", **env}
  try: r = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, timeout=timeout)
  except subprocess.TimeoutExpired: raise BaselineError(f"{member}: {label} timed out after {timeout}s", "raise --timeout") from None
  if r.returncode != 0:
    raise BaselineError(f"{member}: {label} failed: {(r.stderr.strip().splitlines() or ['?'])[-1]}",
                        "fix the code it runs (the error above), or accept the others with --models")

# scheduled only (Tensor.empty holds no data): capture records the kernel and schedule levels without allocating anything
BIG_INDEX_CODE = """
from tinysched import Tensor
from tinysched.dtype import dtypes
from tinysched.uop import Variable
n = Variable("n", 1, 2**20)
(Tensor.empty(2**20, 4096, dtype=dtypes.int8).shrink(((0, n.bind(7)), None)) + 1).schedule_with_vars()
Tensor.empty(5, 2**29, dtype=dtypes.int8)[4, 2**29 - 1].contiguous().schedule_with_vars()
"""

def capture_index_past_2_31(out: Path, root: Path, timeout: float | None, log: Log) -> dict:
  """The `index_past_2_31` member: BIG_INDEX_CODE scheduled with capture on (kernel and schedule levels) into `out`."""
  t0 = time.perf_counter()
  _run_code("index_past_2_31", BIG_INDEX_CODE, "index_past_2_31", out, root, timeout, {"TINYSCHED_CAPTURE_LEVELS": "kernel,schedule"})
  log(f"    scheduled in {time.perf_counter() - t0:.1f}s")
  return {"model": "index_past_2_31", "ok": True, "seconds": round(time.perf_counter() - t0, 2)}

def capture_frontend(out: Path, root: Path, timeout: float | None, log: Log) -> dict:
  """The `frontend` member: every registered model call captured at the model level into `out`."""
  t0 = time.perf_counter()
  try: r = subprocess.run([sys.executable, "-m", "replay.record.calls", str(out)], cwd=root, env=subprocess_env(root), capture_output=True,
                          text=True, timeout=timeout)
  except subprocess.TimeoutExpired: raise BaselineError(f"frontend: timed out after {timeout}s", "raise --timeout") from None
  if r.returncode != 0:
    raise BaselineError(f"frontend: a model call could not be captured: {(r.stderr.strip().splitlines() or ['?'])[-1]}",
                        "fix the model call (tinysched/models/calls.py) or the front end, or accept the others with --models")
  for line in r.stdout.splitlines()[:-1]: log(f"  {line}")
  return {"model": "frontend", "ok": True, "seconds": round(time.perf_counter() - t0, 2)}

def capture_extra(name: str, out: Path, root: Path, model_stores: list[Path], timeout: float | None, log: Log) -> dict:
  if name == "tests": return capture_tests(out, root, model_stores, timeout, log)
  if name == "gpu_target": return capture_gpu_target(out, root, timeout, log)
  if name == "index_past_2_31": return capture_index_past_2_31(out, root, timeout, log)
  if name == "frontend": return capture_frontend(out, root, timeout, log)
  raise BaselineError(f"no baseline member {name!r}", f"the members beside the models are {', '.join(EXTRAS)}")

__all__ = ["EXTRAS", "TEST_PATHS", "GPU_MODELS", "TARGET", "PER_RULE", "BaselineError", "capture_extra"]
