"""Planted bugs for the execution check's tests, applied in *every* Python process that starts with this folder on
PYTHONPATH and TINYSCHED_TEST_PLANT set (the `replay` CLI and its exec workers alike), as a user's change would be.

Each plant is a small monkeypatch of one layer; tests/replay/test_exec_plants.py shows each one caught (`set_order`:
tests/replay/test_determinism.py; `bf16_truncate`: tests/replay/test_exec_bf16.py).
"""
import os

def _launch_drops_last_group():
  # runtime: every NDRange launch loses the last work-group of axis 0 (the last element when the driver picks)
  import pyopencl as cl
  orig = cl.enqueue_nd_range_kernel
  def launch(queue, kernel, gs, ls, *a, **kw):
    gs = list(gs)
    step = ls[0] if ls else 1
    if gs[0] > step: gs[0] -= step
    return orig(queue, kernel, tuple(gs), ls, *a, **kw)
  cl.enqueue_nd_range_kernel = launch

def _max_renders_fmin():
  # codegen: float MAX rendered as fmin (relu([-1, 2, -3]) gives [-1, 0, -3])
  from tinysched.codegen import opencl as R
  from tinysched.dtype import dtypes
  from tinysched.ops import Ops
  orig = R.render_alu
  def alu(op, dt, a, srcs):
    if op is Ops.MAX and dtypes.is_float(dt): return f"fmin({a[0]},{a[1]})"
    return orig(op, dt, a, srcs)
  R.render_alu = alu

def _mask_lower_bound_off_by_one():
  # shared index code: a masked dim's lower bound is one too low (view -> index expression), so padding reads one
  # element of garbage; codegen uses this code, the reference does not
  from tinysched import shape as SH
  from tinysched.dtype import dtypes
  from tinysched.uop import UOp
  orig = SH.View.to_indexed_uops
  def patched(self, idxs, vexpr=None):
    if self.mask is None or self.all_masked: return orig(self, idxs, vexpr)
    iexpr, _ = orig(SH.View(self.shape, self.strides, self.offset, None), idxs, vexpr)
    valid = vexpr
    for i, sh, (b, e) in zip(idxs, self.shape, self.mask):
      conds = []
      if not (type(b) is int and b == 0): conds.append((b - 2 if type(b) is int else b - 2) < i)
      if not (type(e) is int and type(sh) is int and e == sh): conds.append(i < e)
      for c in conds: valid = c if valid is None else valid & c
    return iexpr, (valid if valid is not None else UOp.const(dtypes.bool, True))
  SH.View.to_indexed_uops = patched

def _pad_over_unsafe_ops():
  # scheduler: a padded view over an unsafe op (exp, reciprocal, ...) is no longer stored first
  from tinysched.scheduling import stores as ST
  ST.zero_preserving = lambda u: True

def _after_ast_rewrite(pm_of):
  """Wrap the scheduler's full_ast_rewrite so every AST it returns goes through one more matcher (a user's rule change)."""
  from tinysched import schedule as S
  from tinysched.rewrite import graph_rewrite
  pm, orig = pm_of(), S.full_ast_rewrite
  def patched(pre, var_vals, assigned, memo=None):
    ast, ctx = orig(pre, var_vals, assigned, memo)
    return graph_rewrite(ast, pm), ctx
  S.full_ast_rewrite = patched

def _double_constants():
  # scheduler: the AST rewrite doubles every non-zero float constant (different numbers)
  def pm():
    from tinysched.ops import Ops
    from tinysched.rewrite import PatternMatcher, UPat
    return PatternMatcher([(UPat(Ops.CONST, name="c"), lambda c: c.replace(arg=c.arg * 2) if isinstance(c.arg, float) and c.arg == c.arg
                            and c.arg not in (0.0, float("inf"), float("-inf")) else None)], name="double")
  _after_ast_rewrite(pm)

def _swap_commutative():
  # scheduler: commutative sources swapped (a different AST, the same numbers)
  def pm():
    from tinysched.ops import Ops
    from tinysched.rewrite import PatternMatcher, UPat
    return PatternMatcher([(UPat((Ops.ADD, Ops.MUL), name="x"), lambda x: x.replace(src=x.src[::-1]) if x.src[0].key < x.src[1].key else None)],
                          name="swap")
  _after_ast_rewrite(pm)

def _swap_pair():
  # scheduler: two rules, ADD's sources swapped and MUL's: a kernel with both changes only goes back to its stored
  # AST with both rules off (replay's cause search names the pair), one with an ADD only with swap_add off
  def pm():
    from tinysched.ops import Ops
    from tinysched.rewrite import PatternMatcher, UPat
    def swap(x): return x.replace(src=x.src[::-1]) if x.src[0].key < x.src[1].key else None
    return PatternMatcher([(UPat(Ops.ADD, name="x"), swap, "swap_add"), (UPat(Ops.MUL, name="x"), swap, "swap_mul")], name="swap_pair")
  _after_ast_rewrite(pm)

def _stores_twice():
  # codegen: every global store is written twice (different source, the same numbers, more memory traffic)
  import re
  from tinysched.codegen import program as P
  orig = P.render
  def render(lw, target):
    src = orig(lw, target)
    return re.sub(r"^(\s*)(data0\[[^\n]*\] = [^\n]*;)$", r"\1\2\n\1\2", src, flags=re.M)
  P.render = render

def _set_order():
  # nondeterminism (replay check --twice): a rewrite orders ADD/MUL sources by iterating a set of their keys. str hashes
  # are salted by PYTHONHASHSEED, so the order (and the AST) is reproducible under one seed and differs between seeds
  def pm():
    from tinysched.ops import Ops
    from tinysched.rewrite import PatternMatcher, UPat
    def in_set_order(x):
      keys = set(sorted(s.key for s in x.src))  # inserted in one order: the iteration order depends on the hashes alone
      if len(keys) != len(x.src): return None  # a repeated source: nothing to order
      by_key = {s.key: s for s in x.src}
      n = x.replace(src=tuple(by_key[k] for k in keys))
      return None if n is x else n
    return PatternMatcher([(UPat((Ops.ADD, Ops.MUL), name="x"), in_set_order, "set_order")], name="set_order")
  _after_ast_rewrite(pm)

def _heuristic_drops_last_opt():
  # codegen heuristic: the CPU choice loses its last optimization (a tiling/upcast change; the rendering is unchanged)
  from tinysched.codegen import heuristic as H
  orig = H._cpu
  H._cpu = lambda k, t: (lambda opts: opts[:-1] if opts else opts)(orig(k, t))

def _gpu_half_work_group():
  # codegen heuristic: the GPU work-group choice gets half the budget (LOCAL(0,256) -> LOCAL(0,128)); only GPU targets change
  from tinysched.codegen import heuristic as H
  orig = H._locals
  H._locals = lambda k, opts, t, budget: orig(k, opts, t, budget // 2)

def _bf16_store_truncates():
  # codegen: a bfloat16 store drops the low 16 bits (truncation toward zero) instead of rounding to nearest even; casts
  # and bitcasts still round. At most one ULP off, in about half the elements
  import re
  from tinysched.codegen import program as P
  trunc = "".join(f"#define ts_bf16_trunc{n}(f) convert_ushort{n}(as_uint{n}(f) >> 16)\n" for n in ("", "2", "4", "8", "16"))
  orig = P.render
  def render(lw, target):
    src = orig(lw, target)
    # global stores only: `dataN[i] = ...` and vector `*((__global ushortN*)(dataN+i)) = ...` (a bitcast's variable keeps rounding)
    new = re.sub(r"(\] = |\)\) = )ts_bf16_bits(\d*)\(", r"\1ts_bf16_trunc\2(", src)
    return src if new == src else trunc + new
  P.render = render

def _renders_twice():
  # codegen (perf only): the renderer emits one kernel's work twice, a loop of two rounds around its body: the same
  # numbers where the kernel never reads what it writes (the second round repeats the first's stores). Only the kernel
  # TINYSCHED_TEST_PLANT_KERNEL names: an in-place update reads its output through another argument (an alias) that
  # no look at the source can tell, and would compute something else the second time. TINYSCHED_TEST_PLANT_ROUNDS: how
  # many times (default 2)
  import re
  from tinysched.codegen import program as P
  only, rounds = os.environ["TINYSCHED_TEST_PLANT_KERNEL"], int(os.environ.get("TINYSCHED_TEST_PLANT_ROUNDS", "2"))
  orig = P.render
  def render(lw, target):
    src = orig(lw, target)
    head, brace, body = src.partition("{\n")
    name = re.search(r"void (\w+)\(", head)
    if not brace or not body.endswith("}\n") or name is None or name.group(1) != only: return src
    written = re.findall(r"__global (?!const)\w+\* (data\d+)", head)
    lines = body[:-2].splitlines()
    reads = [ln for ln in lines for d in written if re.search(rf"(?<![\w]){d}\b", ln.split("] = ", 1)[-1] if "] = " in ln else ln)
             and not re.match(rf"\s*(if \(.*\) \{{ )?{d}\[[^=]*\] = ", ln)]
    if reads: return src  # (a kernel that reads its output would compute something else the second time)
    decl = [ln for ln in lines if ln.lstrip().startswith("__local")]
    rest = [ln for ln in lines if not ln.lstrip().startswith("__local")]
    return head + brace + "\n".join(decl + [f"  for (int ts_twice = 0; ts_twice < {rounds}; ts_twice++) {{"] + rest + ["  }"]) + "\n}\n"
  P.render = render

def _flops_inflated():
  # the cost model (perf only): every lowered kernel's FLOP count is 10^6 times what it executes; its GFLOP/s figures
  # then exceed the device's measured peak, which the execution check refuses
  from tinysched import cost as C
  from tinysched.codegen import program as P
  orig = C.program_cost
  def inflated(uops, global_size, nbufs):
    c = orig(uops, global_size, nbufs)
    return C.ProgramCost(c.flops * 10**6, c.accesses)
  C.program_cost = inflated
  P.program_cost = inflated

def _lt_edge():
  # codegen's index simplifier, an edge value: x + c1 < c2 becomes x < c2 - c1 + 1, one too many (a padded view's upper
  # edge admits one more element). Captured with this code, old and new agree on it and both are wrong: replay's
  # triage against the reference (replay/triage/reference.py) names the rule
  from tinysched import symbolic as SYM
  from tinysched.rewrite import PatternMatcher
  from tinysched.uop import UOp
  orig = SYM.lt_move_const
  def lt_move_const(x, c1, c2):
    r = orig(x, c1, c2)
    return None if r is None else r.replace(src=(r.src[0], UOp.const(r.src[1].dtype, r.src[1].arg + 1)))
  SYM.symbolic = PatternMatcher([(p, lt_move_const if f is orig else f, n) for p, f, n, _ in SYM.symbolic.rules], name="symbolic")

def _mul_one_doubles():
  # a value identity of the simplifier (float, so no z3 proof states it): x * 1.0 becomes x + x. Captured with this code,
  # old and new agree; replay's triage against the reference finds the rule by turning rules off
  from tinysched import symbolic as SYM
  from tinysched.ops import Ops
  from tinysched.rewrite import PatternMatcher
  from tinysched.uop import UOp
  SYM.symbolic = PatternMatcher([(p, (lambda x: UOp(Ops.ADD, x.dtype, (x, x))) if n == "mul_one_float" else f, n)
                                 for p, f, n, _ in SYM.symbolic.rules], name="symbolic")

def _tc_fragment_swapped():
  # codegen, tensor cores: A's fragments read with the wrong ldmatrix mode for their local layout, so each 8x8 block of A
  # reaches mma with its rows and columns swapped (issue 44's planted layout bug). Renders and builds; wrong numbers
  from tinysched.codegen import tensor_core as TC
  TC.a_ldmatrix_trans = lambda rows_k: not rows_k

PLANTS = {"heuristic": _heuristic_drops_last_opt, "gpu_local": _gpu_half_work_group, "launch": _launch_drops_last_group, "fmin": _max_renders_fmin,
          "mask": _mask_lower_bound_off_by_one, "can_pad": _pad_over_unsafe_ops,
          "double": _double_constants, "swap": _swap_commutative, "swap_pair": _swap_pair, "stores_twice": _stores_twice,
          "set_order": _set_order, "bf16_truncate": _bf16_store_truncates,
          "renders_twice": _renders_twice, "flops_inflated": _flops_inflated, "lt_edge": _lt_edge, "mul_one": _mul_one_doubles,
          "tc_fragment": _tc_fragment_swapped}

if (_name := os.environ.get("TINYSCHED_TEST_PLANT")):
  PLANTS[_name]()
