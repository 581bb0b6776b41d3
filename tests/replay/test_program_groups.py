"""Program-level grouping: a codegen change is grouped by its normalized token edits (names and constants without
their particulars), so one rename in every kernel is one group, and two different changes stay two groups."""
import re
import pytest
import replay
from replay.check.pool import check
from replay.levels.program import source_signature
from tinysched import Tensor
from tinysched.codegen import program as P
from tinysched.codegen.target import GENERIC_GPU

def _asts():
  Tensor.manual_seed(5)
  x, w = Tensor.rand(4, 8), Tensor.rand(8, 3)
  outs = [(x @ w).relu().sum(1), (x - x.max(1, keepdim=True)).exp(), x * 2 + 1, (x.pad(((1, 1), (0, 0))) * 3).sum(1),
          (x * 0.5 - 0.25).sqrt(), x.sum(0) / 3]
  return [si.ast for o in outs for si in o.schedule()]

@pytest.fixture(scope="module")
def prog_db(tmp_path_factory):
  db = tmp_path_factory.mktemp("prog") / "prog.db"
  asts = _asts()
  with replay.capture(db, label="p", levels=("program",)):
    for ast in asts: P.to_program(ast, None, GENERIC_GPU)
  assert check([str(db)], jobs=1).exit_code() == 0
  return str(db)

def _plant_render(monkeypatch, edit):
  orig = P.render
  monkeypatch.setattr(P, "render", lambda lw, t: edit(orig(lw, t)))

def test_rename_is_one_group(prog_db, monkeypatch):
  _plant_render(monkeypatch, lambda src: re.sub(r"\bval(\d+)", r"v\1", src))  # rename a variable prefix, nothing else
  rep = check([prog_db], jobs=1)
  changed = [r for r in rep.results if r.outcome == "changed"]
  # the rename changes kernels of different sizes, names and constants; their diffs' lines all differ
  assert len(changed) >= 5 and len({r.text_diff.split("@@", 1)[-1] for r in changed}) == len(changed)
  groups = rep.groups()
  assert len(groups) == 1 and groups[0]["count"] == len(changed), [g["signature"] for g in groups]
  assert groups[0]["signature"] == "program: rename val#->v#"

def test_different_changes_stay_apart(prog_db, monkeypatch):
  # the rename in every kernel, and a constant change in those that scale by 2: two kinds of change, two groups
  _plant_render(monkeypatch, lambda src: re.sub(r"\bval(\d+)", r"v\1", src).replace("2.0f", "3.0f"))
  groups = check([prog_db], jobs=1).groups()
  sigs = sorted(g["signature"] for g in groups)
  assert len(groups) == 2 and "program: rename val#->v#" in sigs and "program: const #f->#f; rename val#->v#" in sigs, sigs

def test_signature_edits():
  src = ("__kernel void E_4(__global float* restrict data0, __global const float* restrict data1) {\n"
         "  int gidx0 = get_global_id(0); /* 4 */\n  float4 val0 = *((__global float4*)(data1+(gidx0*4)));\n"
         "  data0[gidx0] = ((val0.s0*0.5f)+val0.s1);\n}\n")
  assert source_signature(src, src.replace("val0", "val1")) == "names renumbered only"  # the same program
  assert source_signature(src, src.replace(".s1", ".s2")) == "member .s1->.s2"         # a vector component is no counter
  assert source_signature(src, src.replace("(val0.s0*0.5f)", "(0.5f*val0.s0)")) != "names renumbered only"
  assert source_signature(src, src.replace("+val0.s1", "-val0.s1")) == "+->-"
  added = src.replace("  data0", "  float val1 = data1[gidx0];\n  data0")
  assert source_signature(src, added) == "+ float val# = data# [ gidx# ] ;"
