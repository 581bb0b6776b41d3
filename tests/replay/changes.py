"""What the replay tests capture and the changes they plant in the scheduler (shared by test_replay and test_execcheck;
the `db` fixture in conftest.py captures `workload`)."""
import sqlite3
import replay
from tinysched import Tensor, Variable, UOp, Ops
from tinysched.rewrite import graph_rewrite, PatternMatcher, UPat
import tinysched.schedule as S

def workload():
  Tensor.manual_seed(3)
  x, w = Tensor.rand(4, 8), Tensor.rand(8, 3)
  for _ in range(2): (x @ w).relu().sum(1).realize()   # repeated: the same captures replay once
  e = (x - x.max(1, keepdim=True)).exp()
  (e / e.sum(1, keepdim=True)).realize()
  (x * 2 + 1).realize()
  (x.pad(((1, 1), (0, 0))) * 3).sum(1).realize()
  v = Variable("n", 1, 4)
  (x.shrink(((0, v.bind(3)), None)) + 1).sum(0).realize()

def opencl_here() -> bool:
  """Whether this machine has an OpenCL platform (tests of compiled kernels, timings and peaks skip without one)."""
  try:
    from tinysched.runtime.opencl import opencl_available  # (pyopencl may be missing: then no OpenCL)
    return opencl_available()
  except Exception: return False

# planted changes: wrap full_ast_rewrite and post-process the AST it returns
def patch_ast(monkeypatch, fn):
  orig = S.full_ast_rewrite
  def patched(pre, var_vals, assigned, memo=None):
    ast, ctx = orig(pre, var_vals, assigned, memo)
    return fn(ast), ctx
  monkeypatch.setattr(S, "full_ast_rewrite", patched)

def plant_no_fusion(monkeypatch):
  """A planted grouping change: fuse nothing, every intermediate buffer becomes its own kernel."""
  orig = S.group_stores
  def no_fusion(facts, stores, fuse_arange):
    for b in facts.writer: stores[b] = b
    return orig(facts, stores, fuse_arange)
  monkeypatch.setattr(S, "group_stores", no_fusion)

swap_commutative = PatternMatcher([(UPat((Ops.ADD, Ops.MUL), name="x"),
                                    lambda x: x.replace(src=x.src[::-1]) if x.src[0].key < x.src[1].key else None, "swap_commutative")],
                                  name="swap")
def double_consts(ast: UOp) -> UOp:
  pm = PatternMatcher([(UPat(Ops.CONST, name="c"), lambda c: c.replace(arg=c.arg * 2) if isinstance(c.arg, float) and c.arg not in (0.0,)
                        and not c.arg != c.arg else None)], name="double")
  return graph_rewrite(ast, pm)

def capture_store(path, run, label: str):
  """A store holding what `run()` makes the scheduler and codegen do, at every level, in rollback-journal mode (a plain
  file to copy and hash)."""
  with replay.capture(path, label=label): run()
  c = sqlite3.connect(path); c.execute("PRAGMA journal_mode=DELETE"); c.close()
  return path
