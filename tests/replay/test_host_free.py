"""Program-level inputs name no host (issue 37): what a device reports beyond what code generation can use (PoCL's 2 MiB
of local memory on one build, 1 MiB on another; 4096 work-items or 8192; the CPU's name, the driver) never reaches a
capture's key, so a capture made on another machine replays `identical` here, and its rows are the rows this machine
makes. Planted: codegen for the device as reported (device_class the identity) makes every such row another input."""
from __future__ import annotations
import dataclasses, json
from pathlib import Path
import pytest
from click.testing import CliRunner
import replay
from replay.cli.app import main as cli
from replay.store.sqlite import Store
from tinysched import Tensor
from tinysched.codegen import program as P, program_cache as PC, target as T
from tinysched.codegen.target import Target

# this machine's PoCL as it reports itself, and another host's: another CPU, driver, core count and local memory size
HERE = Target(name="cpu-haswell-AMD EPYC 7B13", vendor="The pocl project", driver_version="6.0+debian", max_work_group_size=4096,
              max_work_item_sizes=(4096, 4096, 4096), local_mem_size=2 << 20, has_fp16=False, has_fp64=True, max_alloc=1 << 33,
              is_gpu=False, compute_units=2)
THERE = dataclasses.replace(HERE, name="cpu-skylake-avx512-Intel(R) Xeon(R) Platinum 8375C", driver_version="5.0+debian", local_mem_size=1 << 20,
                            max_work_group_size=8192, max_work_item_sizes=(8192, 8192, 8192), max_alloc=1 << 32, compute_units=2)
# a GPU's facts beyond the class limits, and a smaller GPU within them (its limits are its own: code differs there)
BIG_GPU = dataclasses.replace(T.NVIDIA_LIKE_GPU, name="H200", local_mem_size=228 << 10, driver_version="570.1")

def _work():
  Tensor.manual_seed(7)
  a, b = Tensor.rand(64, 128), Tensor.rand(128, 32)
  (a @ b).relu().realize()
  (a.sum(1) * 2).realize()
  (a.half() + 1).exp().float().realize()

def _capture(path: Path, target: Target) -> Path:
  with replay.capture(path, label="host", levels=("program",), target=target): _work()
  return path

def _rows(path: Path) -> dict[str, dict]:
  s = Store(path, readonly=True)
  try: return {r["input_key"]: {"output": r["output_key"], "host": json.loads(r["extra"])["host"]} for r in s.captures(level="program")}
  finally: s.close()

@pytest.fixture
def planted(request, monkeypatch):
  if request.param:
    for mod in (P, PC): monkeypatch.setattr(mod, "device_class", lambda t: t)
  return request.param

@pytest.mark.parametrize("planted", [False, True], indirect=True)
def test_a_capture_made_on_another_host_is_the_capture_made_here(tmp_path, planted):
  here, there = _rows(_capture(tmp_path / "here.db", HERE)), _rows(_capture(tmp_path / "there.db", THERE))
  assert len(here) >= 3
  if planted:
    assert not set(here) & set(there)  # every row "only in" one capture: the change list of an accept is unreviewable
    return
  assert set(here) == set(there) and all(here[k]["output"] == there[k]["output"] for k in here)
  # the host is remembered beside the key (for --reoptimize), not in it
  assert {r["host"]["name"] for r in there.values()} == {THERE.name} and {r["host"]["name"] for r in here.values()} == {HERE.name}

def test_another_hosts_capture_replays_identical_here(tmp_path):
  """Replayed here (this process renders for its own view of the stored target), with the stored opts and with the
  heuristic choosing again (--reoptimize reads the capture's host facts); a big GPU's capture likewise."""
  for target in (THERE, BIG_GPU):
    db = _capture(tmp_path / f"{target.name[:8]}.db", target)
    for extra in ((), ("--reoptimize",)):
      r = CliRunner().invoke(cli, ["check", str(db), "-j", "1", "--report-json", str(tmp_path / "r.json"), *extra])
      outcomes = {x["outcome"] for x in json.loads((tmp_path / "r.json").read_text())["results"]}
      assert r.exit_code == 0 and outcomes == {"identical"}, r.output

def _kernels():
  from tinysched.ops import Ops
  ts = [Tensor.empty(64, 768) @ Tensor.empty(768, 2304), Tensor.empty(512, 512) @ Tensor.empty(512, 512), Tensor.empty(4096, 1024).sum(1),
        Tensor.empty(2, 16, 32, 32).conv2d(Tensor.empty(32, 16, 3, 3)), (Tensor.empty(64, 50257).softmax(1) * 3).sum(0),
        Tensor.empty(1, 50257).half().float().max(1)]
  return [si.ast for t in ts for si in t.schedule() if si.ast.op is Ops.SINK]

def test_the_heuristic_never_asks_for_more_than_the_class(monkeypatch):
  """Why clamping changes no code: for matmuls, reductions, a convolution and a 50k-wide softmax, code generation for
  each device as it reports itself (the plant: no class) renders what it renders for the device's class."""
  asts = _kernels()
  classed = {t.name: [P.to_program(a, None, t) for a in asts] for t in (HERE, BIG_GPU)}
  monkeypatch.setattr(P, "device_class", lambda t: t)
  for t in (HERE, BIG_GPU):
    raw = [P.to_program(a, None, t) for a in asts]
    assert [(p.src, p.opts, p.global_size, p.local_size) for p in raw] == [(p.src, p.opts, p.global_size, p.local_size) for p in classed[t.name]]
    assert max(p.local_mem for p in raw) <= T.CLASS_LIMITS["local_mem_size"]

def test_the_class_clamps_only_what_code_generation_cannot_use():
  c = T.device_class(THERE)
  assert (c.local_mem_size, c.max_work_group_size, c.max_work_item_sizes) == (64 << 10, 1024, (1024, 1024, 1024))
  assert T.device_class(c) == c and T.device_class(T.NVIDIA_LIKE_GPU) is T.NVIDIA_LIKE_GPU  # idempotent; within limits: as is
  small = dataclasses.replace(T.NVIDIA_LIKE_GPU, local_mem_size=16 << 10, max_work_group_size=256, max_work_item_sizes=(256, 256, 64))
  assert T.device_class(small) is small  # a smaller device keeps its limits: its code may differ, and its key says so
  for f in ("name", "vendor", "driver_version", "compute_units", "max_alloc", "has_fp16", "has_fp64", "is_gpu"):
    assert getattr(c, f) == getattr(THERE, f)  # host facts (kept out of the key by the program level) and capabilities kept
