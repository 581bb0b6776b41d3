"""Index arithmetic past 2**31 elements and closed-form reduces.

- value ranges (UOp.vmin/vmax) are sound: brute force over small intervals;
- lowered programs compute every index node in a type that holds its exact range: an independent interval analysis
  and an exact-integer evaluation of the lowered program (checked against the view's index computed straight from
  shape/strides/offset/mask) on random views whose indices pass 2**31;
- on OpenCL: arange exact for sizes around 2**15 and up to 2**24, a reduction whose offsets pass 2**31;
- arange's reduce folds to a count (no loop over n);
- planted bugs: always-int32 decisions, 32-bit index arithmetic and a disabled fold each make a check fail.
"""
from __future__ import annotations
import itertools, random
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st, HealthCheck
from tinysched import Tensor, dtypes, Variable
from tinysched.dtype import DType
from tinysched.ops import Ops
from tinysched.uop import UOp, exec_alu
from tinysched.shape import ShapeTracker
from tinysched.helpers import cdiv, cmod
from tinysched import rewrite
from tinysched.rewrite import PatternMatcher
from tinysched.codegen import Kernel, GENERIC_GPU, GENERIC_CPU, to_program, default_opts
from tinysched.codegen import lowerer
from tinysched.codegen.lowerer import lower
from tests.tinysched.kernels import HAS_CL, _kernels, _glob

needs_cl = pytest.mark.skipif(not HAS_CL, reason="no OpenCL device (install pocl-opencl-icd)")

# *** value ranges are sound ***

def _wrap(v: int, dt: DType) -> int: return exec_alu(Ops.ADD, dt, [v, 0])

@settings(max_examples=300, deadline=None)
@given(st.sampled_from([Ops.ADD, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.CMPLT, Ops.CMPNE]),
       st.integers(-128, 127), st.integers(0, 12), st.integers(-128, 127), st.integers(0, 12), st.sampled_from([dtypes.int8, dtypes.int64]))
def test_binary_ranges_are_sound(op, a0, aw, b0, bw, dt):
  a1, b1 = min(a0 + aw, 127), min(b0 + bw, 127)
  a, b = Variable("a", a0, a1, dt), Variable("b", b0, b1, dt)
  u = a.alu(op, b)
  for x in range(a0, a1 + 1):
    for y in range(b0, b1 + 1):
      got = exec_alu(op, u.dtype, [x, y])  # the IR's semantics: C division, wrap-around in the dtype
      assert u.vmin <= got <= u.vmax, f"{op} [{a0},{a1}] x [{b0},{b1}] in {dt}: {x},{y} -> {got} outside [{u.vmin}, {u.vmax}]"

@settings(max_examples=200, deadline=None)
@given(st.integers(-50, 50), st.integers(0, 10), st.integers(-50, 50), st.integers(0, 10), st.integers(-50, 50), st.integers(0, 10))
def test_where_neg_cast_ranges_are_sound(a0, aw, b0, bw, c0, cw):
  a, b, c = Variable("a", a0, a0 + aw), Variable("b", b0, b0 + bw), Variable("c", c0, c0 + cw)
  w = (a < c).where(a, b)
  n, m = -a, (a * b).cast(dtypes.int8)
  for x, y, z in itertools.product(range(a0, a0 + aw + 1), range(b0, b0 + bw + 1), range(c0, c0 + cw + 1)):
    assert w.vmin <= (x if x < z else y) <= w.vmax
    assert n.vmin <= -x <= n.vmax
    assert m.vmin <= _wrap(x * y, dtypes.int8) <= m.vmax

# *** an independent model of the lowered program ***

def _ints(u: UOp) -> bool: return dtypes.is_int(u.dtype)

def exact_intervals(uops: list[UOp], var_ranges: dict[UOp, tuple[int, int]] | None = None) -> dict[UOp, tuple[int, int] | None]:
  """Exact-integer interval of every integer node of a lowered program (None: no bound known), from thread-id counts,
  loop bounds and Variable bounds; ops are exact (no wrap-around), so a range that leaves a dtype means an overflow there."""
  iv: dict[UOp, tuple[int, int] | None] = {}
  def get(s: UOp):
    if s.op is Ops.CONST: return (int(s.arg), int(s.arg))
    return iv.get(s)
  for u in uops:
    if not (_ints(u) or u.dtype == dtypes.bool): continue
    op, r = u.op, None
    srcs = [get(s) for s in u.src]
    if op is Ops.SPECIAL: r = (0, u.arg[1] - 1)
    elif op is Ops.RANGE and srcs[0] and srcs[1]: r = (srcs[0][0], srcs[1][1] - 1)
    elif op is Ops.DEFINE_VAR: r = (var_ranges or {}).get(u, (u.arg[1], u.arg[2]))
    elif op is Ops.CAST and _ints(u.src[0]): r = srcs[0]
    elif op is Ops.CAST and u.src[0].dtype == dtypes.bool: r = (0, 1)
    elif op in (Ops.CMPLT, Ops.CMPNE) and all(srcs): r = (0, 1)
    elif u.dtype == dtypes.bool: r = (0, 1)
    elif op is Ops.WHERE and srcs[1] and srcs[2]: r = (min(srcs[1][0], srcs[2][0]), max(srcs[1][1], srcs[2][1]))
    elif all(srcs) and len(srcs) == 2:
      (a0, a1), (b0, b1) = srcs
      if op is Ops.ADD: r = (a0 + b0, a1 + b1)
      elif op is Ops.MUL: r = (min(p := [a0*b0, a0*b1, a1*b0, a1*b1]), max(p))
      elif op is Ops.MAX: r = (max(a0, b0), max(a1, b1))
      elif op is Ops.IDIV and b0 == b1 and b0 > 0: r = (cdiv(a0, b0), cdiv(a1, b0))
      elif op is Ops.MOD and b0 == b1 and b0 > 0 and a0 >= 0: r = (a0, a1) if a1 < b0 else (0, min(a1, b0 - 1))
    elif op is Ops.NEG and srcs[0]: r = (-srcs[0][1], -srcs[0][0])
    iv[u] = r
  return iv

def check_widths(uops: list[UOp], var_ranges=None) -> None:
  """(a): every integer node whose exact range leaves int32 is 64-bit (int64 only: the lowerer's index dtype)."""
  iv = exact_intervals(uops, var_ranges)
  for u in uops:
    if not _ints(u) or (r := iv.get(u)) is None: continue
    if u.op is Ops.RANGE: r = (r[0], r[1] + 1)  # the counter is incremented once past the last value
    if not (dtypes.min(u.dtype) <= r[0] and r[1] <= dtypes.max(u.dtype)):
      raise AssertionError(f"{u.op} {u.dtype} has exact range [{r[0]}, {r[1]}], outside its type")

def evaluate(uops: list[UOp], leaves: dict[UOp, int], c_semantics: bool) -> dict[UOp, int]:
  """Values of the scalar integer/bool nodes at given thread ids / loop counters / Variables. Exact integers, or with
  c_semantics every result wrapped to its node's dtype (what the compiled C computes)."""
  env: dict[UOp, int] = {}
  def get(s: UOp) -> int: return int(s.arg) if s.op is Ops.CONST else env[s]
  for u in uops:
    if u in leaves: env[u] = leaves[u]; continue
    if not (_ints(u) or u.dtype == dtypes.bool) or u.dtype.count > 1: continue
    if u.op in (Ops.LOAD, Ops.DEFINE_ACC, Ops.ASSIGN, Ops.GEP, Ops.SPECIAL, Ops.RANGE, Ops.DEFINE_VAR): continue
    try: xs = [get(s) for s in u.src]
    except KeyError: continue  # depends on memory
    op = u.op
    if op is Ops.CAST: v = xs[0]
    elif op is Ops.ADD: v = xs[0] + xs[1]
    elif op is Ops.MUL: v = xs[0] * xs[1]
    elif op is Ops.IDIV: v = cdiv(xs[0], xs[1]) if xs[1] else 0
    elif op is Ops.MOD: v = cmod(xs[0], xs[1]) if xs[1] else 0
    elif op is Ops.MAX: v = max(xs)
    elif op is Ops.NEG: v = -xs[0] if u.dtype != dtypes.bool else int(not xs[0])
    elif op is Ops.CMPLT: v = int(xs[0] < xs[1])
    elif op is Ops.CMPNE: v = int(xs[0] != xs[1])
    elif op is Ops.AND: v = xs[0] & xs[1]
    elif op is Ops.OR: v = xs[0] | xs[1]
    elif op is Ops.WHERE: v = xs[1] if xs[0] else xs[2]
    else: continue
    env[u] = _wrap(v, u.dtype) if c_semantics and _ints(u) else v
  return env

def direct_index(stt: ShapeTracker, coords: tuple[int, ...]) -> tuple[bool, int]:
  """A view stack at logical coordinates, straight from shapes, strides, offsets and masks (outermost view first)."""
  valid, idx = True, 0
  for k, v in enumerate(reversed(stt.views)):
    if k > 0:  # unravel the outer view's flat index in this view's shape (C order)
      cs, rem = [], idx
      for sz in reversed(v.shape): cs.append(rem % sz); rem //= sz
      coords = tuple(reversed(cs))
    if v.mask is not None and not all(b <= c < e for c, (b, e) in zip(coords, v.mask)): valid = False
    idx = v.offset + sum(c * s for c, s in zip(coords, v.strides))
    if not valid: return False, 0
  return valid, idx

def _unravel(p: int, shape: tuple[int, ...]) -> tuple[int, ...]:
  out = []
  for sz in reversed(shape): out.append(p % sz); p //= sz
  return tuple(reversed(out))

def _sample_leaves(uops: list[UOp], rng: random.Random, n_random: int = 40) -> list[dict[UOp, int]]:
  specials = [u for u in uops if u.op is Ops.SPECIAL]
  ranges = [u for u in uops if u.op is Ops.RANGE and u.src[1].op is Ops.CONST]
  leaves = specials + ranges
  hi = [u.arg[1] - 1 if u.op is Ops.SPECIAL else u.src[1].arg - 1 for u in leaves]
  pts = [dict(zip(leaves, c)) for c in itertools.product(*[(0, h) for h in hi])][:256] if leaves else [{}]
  pts += [{u: rng.randint(0, h) for u, h in zip(leaves, hi)} for _ in range(n_random)]
  return pts

def check_exact(uops: list[UOp], rng: random.Random) -> None:
  """At sampled thread ids and loop counters, every integer node's C value (wrapped to its type) is the exact value."""
  for leaves in _sample_leaves(uops, rng):
    ex, cv = evaluate(uops, leaves, c_semantics=False), evaluate(uops, leaves, c_semantics=True)
    for u, v in ex.items():
      assert cv[u] == v, f"{u.op} {u.dtype} computes {cv[u]} in C but the exact value is {v} at {leaves}"

def check_against_views(ast: UOp, uops: list[UOp], in_st: ShapeTracker, out_shape: tuple[int, ...], rng: random.Random) -> int:
  """(b): at sampled thread ids, every store's index (exact) says which output element it writes; the load feeding it
  must read exactly the element (and validity) the input view gives there. Also every node's C value is exact."""
  checked = 0
  stores = [u for u in uops if u.op is Ops.STORE and u.src[0].src[0].op is Ops.DEFINE_GLOBAL]
  for leaves in _sample_leaves(uops, rng):
    ex = evaluate(uops, leaves, c_semantics=False)
    cv = evaluate(uops, leaves, c_semantics=True)
    for u, v in ex.items():
      assert cv[u] == v, f"{u.op} {u.dtype} computes {cv[u]} in C but the exact value is {v} at {leaves}"
    for s in stores:
      if len(s.src) > 2 and not ex[s.src[2]]: continue
      p = ex[s.src[0].src[1]] if s.src[0].src[1].op is not Ops.CONST else s.src[0].src[1].arg
      assert 0 <= p < int(np.prod(out_shape))
      want_valid, want_idx = direct_index(in_st, _unravel(p, out_shape))
      val = s.src[1]
      if val.op is Ops.CONST:  # the lowerer proved the load masked out
        assert not want_valid and val.arg == 0
      else:
        assert val.op is Ops.LOAD, val.op
        got_valid = all(ex[x] if x.op is not Ops.CONST else x.arg for x in val.src[1:])
        assert bool(got_valid) == want_valid, f"validity at output {p}: lowered {got_valid}, view {want_valid}"
        if want_valid:
          gi = val.src[0].src[1]
          assert (gi.arg if gi.op is Ops.CONST else ex[gi]) == want_idx, f"index at output {p}"
      checked += 1
  return checked

# *** random views whose indices pass 2**31 ***

@st.composite
def big_views(draw):
  ndim = draw(st.integers(1, 3))
  small = [draw(st.sampled_from([1, 2, 3, 5, 7, 16, 255, 256, 1000, 4099])) for _ in range(ndim - 1)]
  total = draw(st.integers(2**31 - 2**16, 2**34))
  shape = tuple(small) + (-(-total // max(1, int(np.prod(small)))),)
  stt = ShapeTracker.from_shape(shape)
  for _ in range(draw(st.integers(0, 5))):
    sh = stt.shape
    kind = draw(st.sampled_from(["permute", "merge", "split", "expand", "pad", "shrink", "flip", "flatten"]))
    ax = draw(st.integers(0, len(sh) - 1))
    if kind == "permute": stt = stt.permute(tuple(draw(st.permutations(range(len(sh))))))
    elif kind == "merge" and len(sh) > 1 and ax + 1 < len(sh): stt = stt.reshape(sh[:ax] + (sh[ax] * sh[ax+1],) + sh[ax+2:])
    elif kind == "split":
      d = draw(st.sampled_from([2, 3, 4, 7, 16]))
      if sh[ax] % d == 0 and sh[ax] > d: stt = stt.reshape(sh[:ax] + (d, sh[ax] // d) + sh[ax+1:])
    elif kind == "expand" and len(sh) < 4:
      stt = stt.reshape(sh[:ax] + (1,) + sh[ax:]).expand(sh[:ax] + (draw(st.sampled_from([2, 3, 1024])),) + sh[ax:])
    elif kind == "pad":
      stt = stt.pad(tuple((draw(st.integers(0, 3)), draw(st.integers(0, 3))) if i == ax else (0, 0) for i in range(len(sh))))
    elif kind == "shrink" and sh[ax] > 2:
      b = draw(st.integers(0, sh[ax] // 2))
      stt = stt.shrink(tuple((b, draw(st.integers(b + 1, sh[ax]))) if i == ax else (0, s) for i, s in enumerate(sh)))
    elif kind == "flip": stt = stt.flip((ax,))
    elif kind == "flatten":  # after a permute or a pad this needs a second view
      stt = stt.reshape((int(np.prod(sh)),))
      if (d := draw(st.sampled_from([1, 3, 1000, 4096]))) > 1 and stt.shape[0] % d == 0: stt = stt.reshape((stt.shape[0] // d, d))
  return shape, stt

def _copy_ast(in_st: ShapeTracker) -> UOp:
  # bool buffers: never vectorized, so every store's value is its own load
  out = ShapeTracker.from_shape(in_st.shape).to_uop()
  return UOp.sink_of(UOp.store(_glob(0, dtypes.bool), out, UOp(Ops.LOAD, dtypes.bool, (_glob(1, dtypes.bool), in_st.to_uop()))))

@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(big_views(), st.sampled_from(["none", "gpu", "cpu"]), st.integers(0, 2**30))
def test_random_big_views_lower_exactly(view, opts_kind, seed):
  shape, stt = view
  ast = _copy_ast(stt)
  target = GENERIC_GPU if opts_kind == "gpu" else GENERIC_CPU
  opts = () if opts_kind == "none" else default_opts(ast, target)
  uops = list(lower(Kernel(ast, opts), target).uops)
  check_widths(uops)
  assert check_against_views(ast, uops, stt, tuple(stt.shape), random.Random(seed)) > 0
  to_program(ast, opts, target)  # and it renders

@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(big_views(), st.sampled_from(["none", "gpu", "cpu"]), st.integers(0, 2**30))
def test_random_big_reduces_have_sound_widths(view, opts_kind, seed):
  # the same views summed over their last axis: loop counters, accumulators, GROUP/UNROLL opts
  _, stt = view
  red = UOp(Ops.LOAD, dtypes.int32, (_glob(1, dtypes.int32), stt.to_uop())).r(Ops.ADD, (len(stt.shape) - 1,))
  out = ShapeTracker.from_shape(stt.shape[:-1] + (1,)).to_uop()
  ast = UOp.sink_of(UOp.store(_glob(0, dtypes.int32), out, red))
  target = GENERIC_GPU if opts_kind == "gpu" else GENERIC_CPU
  opts = () if opts_kind == "none" else default_opts(ast, target)
  uops = list(lower(Kernel(ast, opts), target).uops)
  check_widths(uops)
  check_exact(uops, random.Random(seed))
  to_program(ast, opts, target)

def test_random_views_reach_past_int32():
  # the strategy is meant to make 64-bit indices: most examples must have some
  from hypothesis import find
  find(big_views(), lambda v: any(u.dtype == dtypes.int64 for u in lower(Kernel(_copy_ast(v[1])), GENERIC_CPU).uops
                                  if u.op not in (Ops.DEFINE_GLOBAL,)), settings=settings(max_examples=50, deadline=None))

def test_variable_strides_past_int32():
  v = Variable("n", 1, 2**20)
  x = Tensor.empty(2**20, 4096, dtype=dtypes.int8).shrink(((0, v.bind(7)), None)) + 1
  sched, _ = x.schedule_with_vars()
  ast = [si.ast for si in sched if si.ast.op is Ops.SINK][0]
  uops = list(lower(Kernel(ast), GENERIC_CPU).uops)
  check_widths(uops)
  src = to_program(ast, (), GENERIC_CPU).src
  assert "const int n" in src and "long" in src, src
  # small Variable bounds: no long at all
  w = Variable("m", 1, 64)
  y = Tensor.empty(64, 4096, dtype=dtypes.int8).shrink(((0, w.bind(7)), None)) + 1
  ast2 = [si.ast for si in y.schedule_with_vars()[0] if si.ast.op is Ops.SINK][0]
  assert "long" not in to_program(ast2, (), GENERIC_CPU).src

def test_scalar_read_past_int32():
  # a 0-d view: its whole index is the offset constant
  ast = _kernels(Tensor.empty(5, 2**29, dtype=dtypes.int8)[4, 2**29 - 1].contiguous())[0].ast
  assert "data1[2684354559l]" in to_program(ast, (), GENERIC_CPU).src

def test_small_kernels_stay_32_bit():
  for t in [Tensor.empty(64, 64) @ Tensor.empty(64, 64), Tensor.empty(1000, 3).sum(0), Tensor.empty(30, 40).permute(1, 0).pad(((1, 2), (0, 3))) + 1]:
    for si in _kernels(t):
      for tg in (GENERIC_GPU, GENERIC_CPU):
        assert "long" not in to_program(si.ast, None, tg).src

# the count of a padded, reshaped constant: 65536 outputs, but the closed form multiplies thread ids into 2**32
def _count_kernel_tensor(device=None) -> Tensor:
  A, B = 2**16, 2**16 + 1
  return Tensor.ones(A * B - 5, dtype=dtypes.int32, device=device).pad(((0, 5),)).reshape(A, B).sum(1)
def _count_expected() -> np.ndarray:
  e = np.full(2**16, 2**16 + 1, dtype=np.int32)
  e[-1] -= 5
  return e

def test_count_kernel_needs_long():
  ast = [si.ast for si in _kernels(_count_kernel_tensor())][0]
  uops = list(lower(Kernel(ast, default_opts(ast, GENERIC_CPU)), GENERIC_CPU).uops)
  check_widths(uops)
  assert any(u.dtype == dtypes.int64 for u in uops)

# *** planted: always int32 ***

def test_planted_always_int32_is_caught(monkeypatch):
  ast = [si.ast for si in _kernels(_count_kernel_tensor())][0]
  monkeypatch.setattr(lowerer, "PICK32", lambda u, ok: True)
  uops = list(lower(Kernel(ast, default_opts(ast, GENERIC_CPU)), GENERIC_CPU).uops)
  with pytest.raises(AssertionError, match="outside its type"): check_widths(uops)

@needs_cl
def test_planted_always_int32_gives_wrong_values_on_opencl(monkeypatch):
  from tinysched.device import Device
  assert (_count_kernel_tensor("OPENCL").numpy() == _count_expected()).all()
  monkeypatch.setattr(lowerer, "PICK32", lambda u, ok: True)
  monkeypatch.setattr(Device["OPENCL"].dev, "programs", {})  # compile again, with the planted decision
  assert not (_count_kernel_tensor("OPENCL").numpy() == _count_expected()).all()

# *** OpenCL: exact values ***

@needs_cl
@pytest.mark.parametrize("n", [32767, 32769, 40000, 50257, 2**20, 2**24])
def test_arange_exact_on_opencl(n):
  got = Tensor.arange(n, device="OPENCL").numpy()
  assert got.dtype == np.int32 and got.shape == (n,)
  np.testing.assert_array_equal(got, np.arange(n, dtype=np.int32))

@needs_cl
def test_count_kernel_on_opencl():
  np.testing.assert_array_equal(_count_kernel_tensor("OPENCL").numpy(), _count_expected())

@needs_cl
def test_planted_32bit_index_arithmetic_breaks_arange(monkeypatch):
  """The old lowering (index expressions built and simplified in int32) overflows in arange(50257)'s split reduce."""
  from tinysched.device import Device
  monkeypatch.setattr(lowerer, "IDX", dtypes.int32)
  monkeypatch.setattr(lowerer, "_WIDE_CACHE", {})
  monkeypatch.setattr(Device["OPENCL"].dev, "programs", {})
  got = Tensor.arange(50257, device="OPENCL").numpy()
  assert not (got == np.arange(50257)).all(), "the planted 32-bit index arithmetic should give wrong values"

@needs_cl
@pytest.mark.slow
def test_reduction_past_2_31_on_opencl():
  # (5, 2**29) int8 = 2.7 GB: rows 4 and 5 start past 2**31. Values repeat with period 1024 along a row and differ per row.
  P = 1024
  base = ((np.arange(5)[:, None] * 31 + np.arange(P)[None, :]) % 101 - 50).astype(np.int8)
  t = Tensor(base, device="OPENCL").reshape(5, 1, P).expand(5, 2**29 // P, P).reshape(5, 2**29).contiguous().realize()
  got = t.sum(axis=1).numpy()
  want = base.astype(np.int64).sum(axis=1) * (2**29 // P)
  np.testing.assert_array_equal(got, want)
  # and a read at the very end of the buffer
  assert t[4, 2**29 - 1].numpy() == base[4, P - 1]
  del t

# *** arange folds to a count ***

def _arange_uops(n: int, target=GENERIC_CPU):
  out = []
  for si in _kernels(Tensor.arange(n)):
    out.append((si.ast, list(lower(Kernel(si.ast, default_opts(si.ast, target)), target).uops)))
  return out

def test_arange_has_no_loop_over_n():
  n = 2**20
  for ast, uops in _arange_uops(n):
    assert not any(u.op is Ops.RANGE for u in uops), [u.src[1] for u in uops if u.op is Ops.RANGE]
    assert "for (" not in to_program(ast, None, GENERIC_CPU).src

def test_arange_split_kernel_folds():
  # 50257 is split by the scheduler into partial counts and a small sum: the partial counts need no loop
  kernels = _arange_uops(50257)
  ranges = [max((u.src[1].arg for u in uops if u.op is Ops.RANGE and u.src[1].op is Ops.CONST), default=0) for _, uops in kernels]
  assert ranges[0] == 0 and all(r <= 256 for r in ranges), ranges

def test_fold_rule_is_named_in_the_trace(monkeypatch):
  trace: list = []
  monkeypatch.setattr(rewrite, "TRACE", trace)
  _arange_uops(1000)
  assert "reduce_masked_const_to_count" in [name for name, _, _ in trace]

def test_planted_no_fold_keeps_the_loop(monkeypatch):
  n = 2**20
  kept = [r for r in lowerer.reduce_folds.rules if r[2] != "reduce_masked_const_to_count"]
  monkeypatch.setattr(lowerer, "reduce_folds", PatternMatcher([(p, f, nm) for p, f, nm, _ in kept], name="no_masked_const"))
  loops = [u for _, uops in _arange_uops(n) for u in uops if u.op is Ops.RANGE]
  # without the rule the reduce over n is a loop again (O(n) per output: O(n^2) in all)
  assert loops and sum(int(u.src[1].arg) for u in loops if u.src[1].op is Ops.CONST) * 4 >= n

@pytest.mark.parametrize("make", [
  lambda: Tensor.arange(7, 300, 3), lambda: Tensor.arange(100, 0, -7), lambda: Tensor.arange(0.0, 64.0, 0.5),
  lambda: Tensor.arange(2000, dtype=dtypes.int8), lambda: Tensor.ones(10, 20).cumsum(1), lambda: Tensor.full((40,), 3.0).cumsum(0),
])
def test_folded_kernels_have_sound_widths(make):
  for si in _kernels(make()):
    for tg in (GENERIC_CPU, GENERIC_GPU):
      check_widths(list(lower(Kernel(si.ast, default_opts(si.ast, tg)), tg).uops))

@needs_cl
@pytest.mark.parametrize("make,ref", [
  (lambda d: Tensor.arange(7, 300, 3, device=d), lambda: np.arange(7, 300, 3)),
  (lambda d: Tensor.arange(100, 0, -7, device=d), lambda: np.arange(100, 0, -7)),
  (lambda d: Tensor.arange(0.0, 64.0, 0.5, device=d), lambda: np.arange(0.0, 64.0, 0.5, dtype=np.float32)),
  (lambda d: Tensor.arange(2000, dtype=dtypes.int8, device=d), lambda: np.arange(2000).astype(np.int8)),
  (lambda d: Tensor.ones(10, 20, device=d).cumsum(1), lambda: np.ones((10, 20), np.float32).cumsum(1)),
  (lambda d: Tensor.full((40,), -3.0, device=d).cumsum(0), lambda: np.full(40, -3.0, np.float32).cumsum()),
])
def test_folds_exact_on_opencl(make, ref):
  got = make("OPENCL").numpy()
  np.testing.assert_array_equal(got, ref().astype(got.dtype))
  np.testing.assert_array_equal(got, make("NUMPY").numpy())

@needs_cl
def test_inexact_float_step_is_not_folded_and_matches_interpreter():
  got, want = Tensor.arange(0, 1, 0.1, device="OPENCL").numpy(), Tensor.arange(0, 1, 0.1, device="NUMPY").numpy()
  np.testing.assert_allclose(got, want, rtol=1e-6)
  ast = _kernels(Tensor.arange(0, 1, 0.1))[0].ast
  assert any(u.op is Ops.RANGE for u in lower(Kernel(ast), GENERIC_CPU).uops)

# *** a reduce whose mask holds one point of the loop: one guarded load ***

def _point_cases():
  return [
    (lambda d: Tensor(np.arange(64 * 1, dtype=np.float32).reshape(64, 1) - 3, device=d).pad(((0, 0), (5, 58))).sum(1)),
    (lambda d: Tensor(np.arange(64 * 64, dtype=np.float32).reshape(64, 64), device=d)[:, 3:4].pad(((0, 0), (7, 0))).sum(1)),
    (lambda d: Tensor(np.arange(12 * 5, dtype=np.int32).reshape(12, 5), device=d)[:, 2:3].pad(((0, 0), (4, 9))).sum(1)),
    # -0.0 read at the point: the loop's 0.0 + ... gives +0.0, so must the fold
    (lambda d: Tensor(np.full((8, 1), -0.0, np.float32), device=d).pad(((0, 0), (2, 3))).sum(1)),
  ]

def test_point_masks_fold_to_one_load():
  for make in _point_cases():
    for si in _kernels(make(None)):
      for tg in (GENERIC_CPU, GENERIC_GPU):
        uops = lower(Kernel(si.ast, default_opts(si.ast, tg)), tg).uops
        assert not any(u.op in (Ops.RANGE, Ops.DEFINE_ACC) for u in uops)
        assert sum(u.op is Ops.LOAD for u in uops) == 1

def test_planted_no_point_fold_keeps_the_loop(monkeypatch):
  kept = [r for r in lowerer.reduce_folds.rules if r[2] != "reduce_masked_point_to_load"]
  monkeypatch.setattr(lowerer, "reduce_folds", PatternMatcher([(p, f, nm) for p, f, nm, _ in kept], name="no_point"))
  si = _kernels(_point_cases()[0](None))[0]
  assert any(u.op is Ops.RANGE for u in lower(Kernel(si.ast), GENERIC_CPU).uops)

@needs_cl
@pytest.mark.parametrize("i", range(4))
def test_point_folds_exact_on_opencl(i):
  make = _point_cases()[i]
  got, want = make("OPENCL").numpy(), make("NUMPY").numpy()
  np.testing.assert_array_equal(got, want)
  assert (np.signbit(got) == np.signbit(want)).all()

def test_equality_with_the_loop_counter_folds_to_a_gather():
  # the embedding's body if the arange were an index expression in the kernel: sum over v of (v == id ? W[v*D + d] : 0)
  V, D = 50257, 768
  r = UOp(Ops.RANGE, dtypes.int64, (UOp.const(dtypes.int64, 0), UOp.const(dtypes.int64, V)), ("fold", 0))
  d = UOp(Ops.SPECIAL, dtypes.int64, (), ("gidx0", D, "global"))
  tok = UOp(Ops.LOAD, dtypes.int32, (UOp(Ops.INDEX, dtypes.int32.ptr(), (_glob(2, dtypes.int32), UOp.const(dtypes.int64, 0))),))
  w = UOp(Ops.LOAD, dtypes.float32, (UOp(Ops.INDEX, dtypes.float32.ptr(), (_glob(1, dtypes.float32), (r * D + d).simplify())),))
  hit = UOp(Ops.CMPNE, dtypes.bool, (UOp(Ops.CMPNE, dtypes.bool, (r, tok.cast(dtypes.int64))), UOp.const(dtypes.bool, True)))
  red = UOp(Ops.REDUCE_AXIS, dtypes.float32, (UOp(Ops.WHERE, dtypes.float32, (hit, w, UOp.const(dtypes.float32, 0.0))), r), (Ops.ADD, "loops"))
  trace: list = []
  out = rewrite.graph_rewrite(red, lowerer.reduce_folds, track=trace)
  assert "reduce_masked_point_to_load" in [n for n, _, _ in trace]
  assert r not in out.toposort() and not any(u.op is Ops.REDUCE_AXIS for u in out.toposort())
  loads = [u for u in out.toposort() if u.op is Ops.LOAD and u.src[0].src[0].arg == 1]
  assert len(loads) == 1 and len(loads[0].src) == 2  # W read once, guarded by 0 <= id < V
