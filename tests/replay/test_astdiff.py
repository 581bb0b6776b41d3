"""The structural diff (replay/levels/astdiff.py) walks only where two kernel ASTs differ (nodes are interned: an
unchanged subtree is one object) and reports exactly what deepdiff reports on the two whole trees, which it did before
(its cost on a check with hundreds of changes was most of the check: issue 41). The oracle here is that deepdiff run."""
from __future__ import annotations
import pytest
from deepdiff import DeepDiff
from tinysched import Tensor
from tinysched.dtype import dtypes
from tinysched.ops import Ops
from tinysched.uop import UOp
from replay.levels import astdiff as D

def oracle(old: UOp, new: UOp, limit: int = 50) -> list[dict]:
  dd = DeepDiff(D.ast_tree(old), D.ast_tree(new), verbose_level=2, cache_size=0)
  out = []
  for kind in D._KINDS:
    for path, change in (dd.get(kind) or {}).items():
      if isinstance(change, dict) and "old_value" in change: o, n = change.get("old_value"), change.get("new_value")
      elif kind.endswith("added"): o, n = None, change
      else: o, n = change, None
      out.append({"kind": kind, "path": D.pretty_path(path), "old": D._brief(o), "new": D._brief(n)})
  out.sort(key=lambda c: (c["path"], c["kind"]))
  return out[:limit]

def kernels() -> list[UOp]:
  a, b = Tensor.empty(8, 16), Tensor.empty(16, 4)
  progs = [(a @ b).relu(), (a.exp() + 1).sum(1), (a * 2 - a.max(1, keepdim=True)).softmax(1), a.pad(((1, 1), (0, 2))).cumsum(1)]
  return [si.ast for t in progs for si in t.schedule() if si.ast.op is Ops.SINK]

def mutations(ast: UOp) -> list[UOp]:
  """Each kind of edit at each place it applies: sources swapped, a constant changed, an op changed (deepdiff's own
  pairing then), a source dropped (a list that shrinks), a dtype changed."""
  out = []
  for u in ast.toposort():
    if len(u.src) == 2 and u.src[0] is not u.src[1] and u.op in (Ops.ADD, Ops.MUL, Ops.MAX):
      out.append(ast.substitute({u: u.replace(src=u.src[::-1])}))
    if u.op is Ops.CONST and isinstance(u.arg, float): out.append(ast.substitute({u: u.replace(arg=u.arg + 1.5)}))
    if u.op is Ops.ADD: out.append(ast.substitute({u: u.replace(op=Ops.MUL)}))
    if u.op is Ops.SINK and len(u.src) > 1: out.append(u.replace(src=u.src[1:]))
    if u.op is Ops.CAST: out.append(ast.substitute({u: u.replace(dtype=dtypes.half)}))
  return out

def test_the_walk_reports_what_deepdiff_reports():
  pairs = 0
  for ast in kernels():
    for new in mutations(ast):
      assert D.structural_diff(ast, new) == oracle(ast, new), new.pretty()[:400]
      assert D.structural_diff(ast, new) and D.structural_diff(ast, ast) == []
      pairs += 1
  assert pairs > 20

@pytest.mark.parametrize("limit", [1, 3])
def test_the_limit_keeps_the_first_changes_by_path(limit):
  ast = kernels()[0]
  new = mutations(ast)[0]
  assert D.structural_diff(ast, new, limit) == oracle(ast, new, limit)
