"""A stored launch is data from a store: the execution check runs a program-level capture's source with the launch
sizes the store holds, and a corrupted one (a size of 0 or 2**31, too many dims, a Variable the job does not name, a
work-group larger than the device allows) must become a verdict that says why, never a launch (a crash, or garbage
called `wrong`). Plants: the checks taken away, the corrupted size reaches the device."""
from __future__ import annotations
import io, json, sys
import pytest
from tinysched import Tensor
from tinysched.ops import Ops
from tinysched.device import Device
from replay.execute import launch as L
from replay.execute.launch import BadLaunch, stored_launch
from tests.tinysched.kernels import needs_cl

GOOD = {"name": "k", "global": [1024], "local": None, "vars": [], "var_bits": [], "dtypes": ["float", "float"]}

@pytest.mark.parametrize("change,why", [
  ({"global": [0]}, "global size \\[0\\] has a dim below 1"), ({"global": [-5]}, "below 1"), ({"global": [1024, 1, 1, 1]}, "1 to 3 global dims"),
  ({"global": []}, "1 to 3 global dims"), ({"global": "1024"}, "1 to 3 global dims"), ({"global": [1024.5]}, "neither an integer"),
  ({"global": [True]}, "neither an integer"), ({"global": [{"uop": "{}"}]}, "cannot be evaluated"), ({"local": [0]}, "local size \\[0\\]"),
  ({"local": [8, 8]}, "one integer of at least 1 per global dim"), ({"local": ["8"]}, "one integer"),
  ({"vars": ["n"], "var_bits": [32]}, "Variables \\['n'\\], which the job does not name"),
  ({"vars": ["m"], "var_bits": [32, 64]}, "Variable widths"), ({"vars": ["m"], "var_bits": [16]}, "Variable widths"),
  ({"dtypes": "float"}, "buffer dtypes"), ({"vars": "m"}, "not a list of names")])
def test_a_malformed_stored_launch_is_refused_with_its_reason(change, why):
  with pytest.raises(BadLaunch, match=f"the stored launch of kernel k cannot be run: .*{why}"): stored_launch("k", {**GOOD, **change}, {"m": 3})
  assert stored_launch("k", GOOD, {}) == ((1024,), None, [], 2)
  with pytest.raises(BadLaunch, match="not a launch"): stored_launch("k", ["global", 1024], {})

def test_a_symbolic_size_is_evaluated_and_a_zero_is_an_empty_launch():
  from tinysched import Variable
  from replay.store.encode import encode_graph
  n = Variable("n", 0, 64)
  g = {"uop": encode_graph([n * 4]).decode()}
  assert stored_launch("k", {**GOOD, "global": [g], "vars": ["n"], "var_bits": [32]}, {"n": 5})[0] == (20,)
  assert stored_launch("k", {**GOOD, "global": [g], "vars": ["n"], "var_bits": [32]}, {"n": 0})[0] == (0,)  # nothing to run
  with pytest.raises(BadLaunch, match="below 0"): stored_launch("k", {**GOOD, "global": [g], "vars": ["n"], "var_bits": [32]}, {"n": -1})

# *** through the worker, on OpenCL ***

def _job(launch_of) -> dict:
  """A program-level job for `x + 1` over 1024 floats: the old side's launch is launch_of(the right one), the new side's right."""
  from replay.levels.program import launch_json
  from replay.execute.jobs import ast_text
  ast = next(si.ast for si in (Tensor.empty(1024) + 1).schedule_with_vars()[0] if si.ast.op is Ops.SINK)
  prg = Device["OPENCL"].dev.program(ast, None)  # type: ignore[attr-defined]
  good = launch_json(prg)
  return {"id": 7, "level": "program", "specs": None, "size": 2048, "ast": ast_text(ast), "names": {}, "seed": 3, "domains": {},
          "reference": {"kind": "kernels", "side": "ast"}, "old": [["src", prg.name, prg.src, launch_of(dict(good))]],
          "new": [["src", prg.name, prg.src, good]]}

def _verdict(job: dict, monkeypatch) -> dict:
  """What a worker process answers for the job (its loop, in this process)."""
  from replay.execute import worker as W
  monkeypatch.setenv("TINYSCHED_PROGRAM_CACHE", "0")
  monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(job) + "\n"))
  monkeypatch.setattr(sys, "stdout", out := io.StringIO())
  W._worker_main("OPENCL", 0, 0.1)
  got = json.loads(out.getvalue())
  assert got["id"] == job["id"]
  return got

@pytest.fixture
def enqueues(monkeypatch):
  """Every kernel enqueued, recorded and not run."""
  import pyopencl as cl
  calls: list = []
  monkeypatch.setattr(cl, "enqueue_nd_range_kernel", lambda q, k, gs, ls, *a, **kw: calls.append((tuple(gs), ls)))
  return calls

def _with(**kw):
  return lambda launch: {**launch, **kw}

BAD = [("2**31", _with(**{"global": [2**31]}), "LaunchError", "made for a global size of 1024"),
       ("twice", _with(**{"global": [2048]}), "LaunchError", "made for a global size of 1024"),
       ("zero", _with(**{"global": [0]}), "BadLaunch", "has a dim below 1"),
       ("negative", _with(**{"global": [-1024]}), "BadLaunch", "has a dim below 1"),
       ("four_dims", _with(**{"global": [1024, 1, 1, 1]}), "BadLaunch", "1 to 3 global dims"),
       ("not_divisible", _with(local=[3]), "LaunchError", "not multiples of the local sizes"),
       ("unnamed_variable", _with(vars=["n"], var_bits=[32]), "BadLaunch", "which the job does not name"),
       ("more_buffers", _with(dtypes=["float"] * 3), "BadLaunch", "names 3 buffers, the job has 2"),
       ("fewer_arguments", _with(dtypes=["float"]), "LaunchError", "takes 2 arguments, the launch passes 1")]

@needs_cl
def test_the_right_launch_runs_and_is_equivalent(monkeypatch):
  assert _verdict(_job(lambda launch: launch), monkeypatch)["verdict"] == "equivalent"

@needs_cl
@pytest.mark.parametrize("name,launch_of,error,why", BAD, ids=[b[0] for b in BAD])
def test_a_corrupted_stored_launch_fails_the_job_with_its_reason_before_any_launch(monkeypatch, enqueues, name, launch_of, error, why):
  got = _verdict(_job(launch_of), monkeypatch)
  assert got["verdict"] == "failed" and got["error"].startswith(f"{error}: ") and why in got["error"], got
  assert enqueues == []

@needs_cl
def test_a_work_group_larger_than_the_device_allows_is_skipped_with_the_reason(monkeypatch, enqueues):
  """Captured for a device with larger work-groups: not a failure of the code under test (test_execcheck.py), and not run."""
  t = Device["OPENCL"].target  # type: ignore[attr-defined]
  got = _verdict(_job(_with(**{"global": [t.max_work_group_size * 2], "local": [t.max_work_group_size * 2]})), monkeypatch)
  assert got["verdict"] == "skipped" and "more than OPENCL allows" in got["reason"] and enqueues == []

def _unchecked(monkeypatch) -> None:
  """Planted: stored launches taken as they are, and the device's check gone."""
  from tinysched.runtime import opencl as clrt
  monkeypatch.setattr(L, "stored_launch", lambda n, launch, names: (tuple(launch["global"]), None, [], len(launch["dtypes"])))
  monkeypatch.setattr(clrt, "launch_bounds", lambda *a: (2**64,) * 3)

@needs_cl
@pytest.mark.parametrize("name", ["2**31", "twice", "negative", "four_dims"])
def test_plant_without_the_checks_the_corrupted_size_is_launched(monkeypatch, enqueues, name):
  _, launch_of, _, _ = next(b for b in BAD if b[0] == name)
  _unchecked(monkeypatch)
  _verdict(_job(launch_of), monkeypatch)
  assert enqueues and enqueues[0][0] == tuple(launch_of({"global": [1024]})["global"])

@needs_cl
def test_plant_without_the_checks_a_zero_size_is_called_wrong(monkeypatch):
  """A stored size of 0 taken as an empty launch: the kernel never runs, and the right code is called `wrong` (and a mismatch)."""
  _unchecked(monkeypatch)
  got = _verdict(_job(_with(**{"global": [0]})), monkeypatch)
  assert got["verdict"] == "mismatch" and "wrong" in {f["kind"] for f in got["findings"]}, got
