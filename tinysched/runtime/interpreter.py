"""The NUMPY device: a reference interpreter that executes kernel ASTs directly with vectorized numpy.

It is the oracle OpenCL kernels are checked against, so it shares no index code with the compiler:
a VIEW is evaluated here from its ShapeTracker's fields alone (`view_positions`), never through
`to_indexed_uops` / symeval / the simplifier. Per view, the element at loop index i is
`offset + sum(i_d * strides_d)`, valid iff `mask_lo_d <= i_d < mask_hi_d` for every dim; in a stack
of views (last one outermost) the outer view's position is unravelled row-major into the next inner
view's shape (the first coordinate is not wrapped), and validity is the AND over the stack. Shapes,
strides, offsets and masks may be symbolic: they are resolved once per call with `var_vals`.

Bounded memory: a kernel runs in chunks (boxes) of its output positions, and a reduce also walks its
reduce axes in chunks, so no intermediate array has more than `CHUNK_ELEMENTS` elements; reduces
accumulate across chunks. Index arithmetic is int64 throughout (buffers above 2^31 elements work).
Reads see every buffer as it was before the kernel: an input that may share memory with an output is
copied first, unless it is read exactly where it is written (an elementwise assign).

Closed form: `REDUCE_AXIS(ADD, WHERE(VALID(view), c, 0))` (arange, cumsum of a constant) is c times
the number of valid positions along the reduce axes, counted exactly per output position from the view
stack (interval counting on one view; on two views with one reduce axis and one masked inner dim, a
vectorized floor-sum over the arithmetic progression of outer positions). Other stacks fall back to
chunked evaluation. The result is the exact c*count rounded once to the output dtype (also for floats, where
summing c one by one could round differently). `CLOSED_FORM = False` disables it (tests compare both).

Accumulation: REDUCE_AXIS on float16 accumulates in float32 and rounds once at the end (what the
OpenCL kernels do); float32 and float64 accumulate in their own dtype with numpy's summation (pairwise
within a chunk); integers wrap in their own dtype. With `reference=True` (or module `REFERENCE`, or
env `TINYSCHED_NUMPY_REFERENCE=1`) float16/float32 reductions accumulate in float64 and round once to
the output dtype: what the execution check should use as its oracle. In that mode a float sum of two factors (a
product, or a select of a value and zero) is contracted without making the product (`CONTRACT`): einsum for dense
factors, the selected values only for a sparse condition (a one-hot embedding gather reads one row per token instead
of the vocabulary times the width); the products are then exact in float64.

bfloat16: buffers hold uint16 bits (numpy has no bfloat16); values are float32 arrays. A load widens the bits
exactly; ALU ops and reduces compute in float32 without rounding in between; a value is rounded to the nearest
bfloat16 (ties to even, NaN stays NaN: `dtype.bf16_bits`) where it becomes one: a store, a CAST to bfloat16, a
CAST or BITCAST from it, a constant. The OpenCL renderer rounds at exactly these points, so both agree bit for bit
wherever float32 arithmetic does.
"""
from __future__ import annotations
import itertools, math, os, time
from typing import Any, Iterator, Optional
import numpy as np
from tinysched.dtype import DType, dtypes, bf16_bits, bf16_float, bf16_round
from tinysched.ops import Ops
from tinysched.uop import UOp, sym_infer
from tinysched.reduce import reduce_identity, acc_dtype
from tinysched.device import Backend, Buffer, copy_bytes

class InterpreterError(RuntimeError): pass

CHUNK_ELEMENTS = 1 << 22   # most elements of any intermediate array (read at every call: tests lower it)
CLOSED_FORM = True         # count masked-constant reduces in closed form
CONTRACT = True            # reference mode: a float sum of products contracted without making the product (_contract)
_CLOSED_FORM_COST = 8      # a floor-sum keeps about this many int64 arrays of the chunk alive
STRIDED_LOADS = True       # read single-view loads/stores as numpy strided views instead of gathers
REFERENCE = os.environ.get("TINYSCHED_NUMPY_REFERENCE", "0") not in ("", "0")
# instrumentation for tests and benchmarks: reset with reset_stats()
STATS: dict[str, int] = {}
def reset_stats() -> None: STATS.update(chunks=0, closed_form=0, max_elements=0, input_copies=0, contracted=0, sparse=0)
reset_stats()

# a resolved view: (shape, strides, offset, mask) of python ints; mask None means every position is valid
RView = tuple[tuple[int, ...], tuple[int, ...], int, Optional[tuple[tuple[int, int], ...]]]
Region = tuple[tuple[int, int], ...]  # per dim, the half-open range [start, stop) of loop indices

def _np_dtype(d: DType) -> np.dtype:
  """The numpy dtype values of `d` are computed in: float32 for bfloat16, else d's own."""
  return np.dtype(np.float32) if d.scalar() == dtypes.bfloat16 else np.dtype(d.scalar().fmt)

def _note(a: Any) -> None:
  # count only arrays that own memory: broadcasts and strided views of buffers cost nothing
  if isinstance(a, np.ndarray) and a.flags.owndata and a.size > STATS["max_elements"]: STATS["max_elements"] = a.size

# *** views, evaluated from their fields ***

def resolve_views(st: Any, var_vals: dict[UOp, int]) -> tuple[RView, ...]:
  """The views of a ShapeTracker with every symbolic entry evaluated."""
  def r(x) -> int: return int(sym_infer(x, var_vals)) if isinstance(x, UOp) else int(x)
  out = []
  for v in st.views:
    shape = tuple(r(s) for s in v.shape)
    mask = None if v.mask is None else tuple((r(b), r(e)) for b, e in v.mask)
    if mask is not None and all(b <= 0 and e >= s for (b, e), s in zip(mask, shape)): mask = None
    out.append((shape, tuple(r(s) for s in v.strides), r(v.offset), mask))
  return tuple(out)

def _dim_index(start: int, stop: int, d: int, ndim: int) -> Any:
  # loop index of dim d over [start, stop) as a vector shaped to broadcast along d (a python int if one value)
  if stop - start == 1: return start
  return np.arange(start, stop, dtype=np.int64).reshape([-1 if k == d else 1 for k in range(ndim)])

def _masked(mask, k: int, size: int) -> bool: return mask is not None and (mask[k][0] > 0 or mask[k][1] < size)

def view_positions(views: tuple[RView, ...], region: Region | None = None, need_index: bool = True) -> tuple[Any, Any]:
  """(buffer index, validity) of the positions in `region` (default: all) of a resolved view stack.

  Both are numpy arrays broadcastable to the region's shape (int64 / bool) or python scalars."""
  shape, strides, off, mask = views[-1]
  if region is None: region = tuple((0, s) for s in shape)
  ndim = len(shape)
  idx: Any = off
  valid: Any = True
  for d, ((rs, re), st) in enumerate(zip(region, strides)):
    masked = _masked(mask, d, shape[d])
    if not st and not masked: continue
    i = _dim_index(rs, re, d, ndim)
    if st: idx = idx + i * st
    if masked: valid = valid & (i >= mask[d][0]) & (i < mask[d][1])  # type: ignore[index]
  for k_view, (shape, strides, off, mask) in enumerate(reversed(views[:-1])):
    innermost = k_view == len(views) - 2
    p, idx, acc = idx, off, 1
    for k in range(len(shape) - 1, -1, -1):
      s = shape[k]
      masked = _masked(mask, k, s)
      use_stride = strides[k] != 0 and (need_index or not innermost)
      if use_stride or masked:
        c = p if acc == 1 else p // acc   # floor division: any integer position unravels deterministically
        if k > 0: c = c % s
        if use_stride: idx = idx + c * strides[k]
        if masked: valid = valid & (c >= mask[k][0]) & (c < mask[k][1])  # type: ignore[index]
      acc *= s
  return idx, valid

def _box(view: RView, region: Region) -> tuple[list[tuple[int, int]], bool] | None:
  """The part of `region` inside the view's mask (None if empty), and whether it is all of the region."""
  shape, _, _, mask = view
  box, partial = [], False
  for d, (rs, re) in enumerate(region):
    lo, hi = (mask[d] if mask is not None else (0, shape[d]))
    a, b = max(rs, lo), min(re, hi)
    if a >= b: return None
    box.append((a, b))
    partial |= (a, b) != (rs, re)
  return box, partial

def _strided(buf: np.ndarray, view: RView, box: list[tuple[int, int]], writeable: bool) -> np.ndarray | None:
  """buf seen through one unmasked view over `box` as a numpy strided array (stride-0 dims kept at extent 1
  when reading), or None if it would reach outside buf."""
  _, strides, off, _ = view
  first = off + sum(a * st for (a, _), st in zip(box, strides))
  lo = first + sum((b - a - 1) * st for (a, b), st in zip(box, strides) if st < 0)
  hi = first + sum((b - a - 1) * st for (a, b), st in zip(box, strides) if st > 0)
  if lo < 0 or hi >= buf.size: return None
  ext = [(b - a) if (st or writeable) else 1 for (a, b), st in zip(box, strides)]
  item = buf.strides[0]
  return np.lib.stride_tricks.as_strided(buf[first:], shape=ext, strides=[st * item for st in strides], writeable=writeable)

# *** chunking ***

def _boxes(shape: tuple[int, ...], budget: int) -> Iterator[Region]:
  """Row-major boxes covering `shape`, each of at most max(budget, 1) elements: whole inner dims, one split dim."""
  if any(s == 0 for s in shape): return
  inner, d = 1, len(shape)
  while d > 0 and inner * shape[d - 1] <= budget:
    inner *= shape[d - 1]
    d -= 1
  if d == 0:
    yield tuple((0, s) for s in shape)
    return
  step, split = max(1, budget // inner), shape[d - 1]
  tail = tuple((0, s) for s in shape[d:])
  for head in itertools.product(*(range(s) for s in shape[:d - 1])):
    pre = tuple((x, x + 1) for x in head)
    for st in range(0, split, step): yield pre + ((st, min(st + step, split)),) + tail

def _extent(region: Region) -> int: return math.prod(e - s for s, e in region)

# *** closed-form counting for masked-constant reduces ***

def _floor_sum(n: Any, m: int, a: int, b: Any) -> Any:
  """sum_{t=0}^{n-1} floor((a*t + b) / m) for m > 0 and any integers a, b; n, b may be int64 arrays.

  Euclid-like reduction: a and m stay scalars through it (they follow Euclid's algorithm), n and b are
  per element; elements that are done get n = 0 and add nothing more."""
  n = np.asarray(n, dtype=np.int64)
  b = np.asarray(b, dtype=np.int64)
  ans = np.zeros(np.broadcast_shapes(n.shape, b.shape), dtype=np.int64)
  while True:
    qa, a = divmod(a, m)
    if qa: ans += qa * (n * (n - 1) // 2)
    qb = b // m
    ans += qb * n
    b = b - qb * m
    y = a * n + b
    if not (y >= m).any(): return ans
    n, b = y // m, y % m
    m, a = a, m

def _ap_count(n: int, s: int, b: Any, lo: int, hi: int) -> Any:
  """#{t in [0, n): lo <= b + s*t < hi} per element of b."""
  if s == 0: return np.where((b >= lo) & (b < hi), n, 0)
  if s < 0: b, s = b + s * (n - 1), -s  # walk the progression backwards: same set of values
  t0 = np.clip(-((b - lo) // s), 0, n)  # first t with b + s*t >= lo
  t1 = np.clip(-((b - hi) // s), 0, n)  # first t with b + s*t >= hi
  return np.maximum(t1 - t0, 0)

def _closed_form_ok(views: tuple[RView, ...], axes: tuple[int, ...]) -> bool:
  """Whether _count_valid handles this view stack (checked once per kernel, independent of the chunk)."""
  if len(views) == 1: return True
  if len(views) != 2: return False
  outer, inner = views[1], views[0]
  if sum(1 for a in axes if outer[0][a] != 1) > 1: return False
  ishape, _, _, imask = inner
  if any(s == 0 for s in ishape): return False
  if imask is not None and any(b >= e for b, e in imask): return True  # nothing valid
  masked = [k for k in range(len(ishape)) if _masked(imask, k, ishape[k])]
  if len(masked) > 1: return False
  if not masked or masked[0] == 0: return True  # plain interval counts: nothing grows beyond the positions themselves
  # every floor-sum term must fit int64: sum_t floor((a*t + b)/m) is about n*(|a|*n + |b|)/m, and the Euclid
  # steps stay below m*(n+1)
  shape, strides, off, _ = outer
  m = math.prod(ishape[masked[0]:])
  bmax = abs(off) + sum(abs(st) * s for st, s in zip(strides, shape)) + m
  n = max([shape[a] for a in axes] + [1])
  a = max([abs(strides[x]) for x in axes] + [0])
  return max(m * (n + 2), (a // m + 1) * n * n, (bmax // m + 1) * n * 2) < 1 << 62

def _count_valid(views: tuple[RView, ...], axes: tuple[int, ...], region: Region) -> np.ndarray:
  """Per output position of `region` (reduce axes ignored), how many positions along the reduce axes are valid."""
  shape, strides, off, mask = views[-1]
  ndim = len(shape)
  ind: Any = True   # the outer mask over the output dims
  p0: Any = off     # outer position at reduce index 0
  for d in range(ndim):
    lo, hi = mask[d] if mask is not None else (0, shape[d])
    if d in axes:
      if shape[d] == 1 and not lo <= 0 < hi: ind = False
      continue
    rs, re = region[d] if shape[d] != 1 else (0, 1)
    i = _dim_index(rs, re, d, ndim)
    if _masked(mask, d, shape[d]): ind = ind & (i >= lo) & (i < hi)
    if strides[d]: p0 = p0 + i * strides[d]
  rax = [a for a in axes if shape[a] != 1]
  def span(a: int) -> tuple[int, int]:
    lo, hi = mask[a] if mask is not None else (0, shape[a])
    return max(lo, 0), max(min(hi, shape[a]), max(lo, 0))
  if len(views) == 1:
    cnt: Any = math.prod(e - b for b, e in map(span, rax))
  else:
    jlo, jhi = span(rax[0]) if rax else (0, 1)
    s = strides[rax[0]] if rax else 0
    n, b = jhi - jlo, p0 + s * jlo
    ishape, _, _, imask = views[0]
    masked = [k for k in range(len(ishape)) if _masked(imask, k, ishape[k])]
    if imask is not None and any(lo >= hi for lo, hi in imask): cnt = 0
    elif not masked: cnt = n
    else:
      k = masked[0]
      lo, hi = imask[k]  # type: ignore[index]
      unit = math.prod(ishape[k + 1:])   # coordinate k is floor(p / unit), wrapped by ishape[k] unless k == 0
      if k == 0: cnt = _ap_count(n, s, b, lo * unit, hi * unit)
      else:
        # [lo <= q mod S < hi] = floor((q - lo) / S) - floor((q - hi) / S), and floor(floor(p/u)/S) = floor(p/(u*S))
        m = unit * ishape[k]
        cnt = _floor_sum(n, m, s, b - lo * unit) - _floor_sum(n, m, s, b - hi * unit)
  res = np.asarray(np.where(ind, cnt, 0), dtype=np.int64)
  return res.reshape((1,) * ndim) if res.ndim == 0 else res

# *** ALU ***

def _idiv(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  if np.issubdtype(np.result_type(a, b), np.floating): return np.trunc(a / b)
  safe_b = np.where(b == 0, 1, b)
  q = np.abs(a) // np.abs(safe_b)
  return np.where(b == 0, 0, np.where((a < 0) != (safe_b < 0), -q, q))

def _alu(op: Ops, dtype: DType, srcs: list[np.ndarray]) -> np.ndarray:
  is_bool = dtypes.is_bool(dtype)
  if op is Ops.NEG: return np.logical_not(srcs[0]) if is_bool else np.negative(srcs[0])
  if op is Ops.EXP2: return np.exp2(srcs[0])
  if op is Ops.LOG2: return np.log2(srcs[0])
  if op is Ops.SIN: return np.sin(srcs[0])
  if op is Ops.SQRT: return np.sqrt(srcs[0])
  if op is Ops.RECIP: return np.reciprocal(srcs[0]) if dtypes.is_float(dtype) else _idiv(np.ones_like(srcs[0]), srcs[0])
  if op is Ops.ADD: return np.logical_or(*srcs) if is_bool else np.add(*srcs)
  if op is Ops.MUL: return np.logical_and(*srcs) if is_bool else np.multiply(*srcs)
  if op is Ops.IDIV: return _idiv(*srcs)
  if op is Ops.MOD: return np.fmod(srcs[0], np.where(srcs[1] == 0, 1, srcs[1])) * (srcs[1] != 0)
  if op is Ops.MAX: return np.maximum(*srcs)
  if op is Ops.CMPLT: return np.less(*srcs)
  if op is Ops.CMPNE: return np.not_equal(*srcs)
  if op is Ops.AND: return np.bitwise_and(*srcs)
  if op is Ops.OR: return np.bitwise_or(*srcs)
  if op is Ops.XOR: return np.bitwise_xor(*srcs)
  if op is Ops.SHL: return np.left_shift(*srcs)
  if op is Ops.SHR: return np.right_shift(*srcs)
  if op is Ops.WHERE: return np.where(*srcs)
  if op is Ops.MULACC: return srcs[0]*srcs[1] + srcs[2]
  raise InterpreterError(f"the interpreter has no rule for {op}")

_REDUCE_UFUNC = {Ops.ADD: np.add, Ops.MUL: np.multiply, Ops.MAX: np.maximum}

def _acc_dtype(dtype: DType, reference: bool) -> np.dtype:
  d = dtype.scalar()
  if reference and d in (dtypes.float16, dtypes.bfloat16, dtypes.float32): return np.dtype(np.float64)
  return _np_dtype(acc_dtype(d))


def _factors(src: UOp) -> tuple[str, UOp, UOp] | None:
  """How a float32/float64 value summed by a reduce splits into two factors: a product ("mul", a, b), or a select
  of a value and zero ("where" / "where_not", condition, value: a one-hot gather, a padding mask); None otherwise."""
  if src.dtype.scalar() not in (dtypes.float32, dtypes.float64): return None
  if src.op is Ops.MUL: return ("mul", src.src[0], src.src[1])
  if src.op is Ops.WHERE:
    c, x, y = src.src
    if _is_zero(y): return ("where", c, x)
    if _is_zero(x): return ("where_not", c, y)
  return None

def _is_zero(u: UOp) -> bool:
  """A constant zero, also as the lowerer writes a padded one (a select on VALID of two zeros)."""
  if u.op is Ops.CONST: return u.arg == 0
  return u.op is Ops.WHERE and u.src[0].op is Ops.VALID and _is_zero(u.src[1]) and _is_zero(u.src[2])

def _contract(a: np.ndarray, b: np.ndarray, region: Region, axes: tuple[int, ...]) -> np.ndarray:
  """sum over `axes` of a*b in float64, for a and b broadcast over `region` (size 1 along the dims they do not vary in),
  without making the product. keepdims, like ufunc.reduce. The products are exact (float32 x float32 fits float64),
  where the elementwise path rounds them to float32 first. einsum's own loops, not BLAS: 4-6x faster than the product
  and its reduce on matmul shapes, while BLAS's threads made it slower on this 2-core box when it is busy."""
  nd = len(region)
  ext = [e - s for s, e in region]
  a, b = (np.asarray(x, dtype=np.float64).reshape(x.shape if x.ndim == nd else (1,) * (nd - x.ndim) + x.shape) for x in (a, b))
  letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
  la = "".join(letters[d] for d in range(nd) if a.shape[d] != 1)
  lb = "".join(letters[d] for d in range(nd) if b.shape[d] != 1)
  out_dims = [d for d in range(nd) if d not in axes and (a.shape[d] != 1 or b.shape[d] != 1)]
  r = np.einsum(f"{la},{lb}->{''.join(letters[d] for d in out_dims)}", a.reshape([n for n in a.shape if n != 1]),
                b.reshape([n for n in b.shape if n != 1]), optimize=False)
  # a reduce dim neither operand varies in: the same product at every position, each counted
  reps = math.prod(ext[d] for d in axes if a.shape[d] == 1 and b.shape[d] == 1)
  if reps != 1: r = r * reps
  return np.asarray(r).reshape([1 if d in axes else (ext[d] if d in out_dims else 1) for d in range(nd)])

_scatter_add = np.add.at  # unbuffered: terms that land on the same output all add (a fancy-index += keeps one)

def _sparse_contract(c: np.ndarray, x: np.ndarray, region: Region, axes: tuple[int, ...]) -> np.ndarray:
  """sum over `axes` of where(c, x, 0) for a condition with few True elements (a one-hot gather): only the selected
  values are read and added, in float64; keepdims, like _contract. Exact for any x (inf and NaN where selected only)."""
  nd = len(region)
  ext = [e - s for s, e in region]
  c, x = (np.asarray(v).reshape(v.shape if v.ndim == nd else (1,) * (nd - v.ndim) + v.shape) for v in (c, x))
  # x summed first along reduce dims the condition does not depend on; dims neither depends on count each position.
  # Otherwise x is widened only where selected (it can be a whole embedding table)
  if (own := tuple(d for d in axes if c.shape[d] == 1 and x.shape[d] != 1)): x = np.add.reduce(x, axis=own, keepdims=True, dtype=np.float64)
  reps = math.prod(ext[d] for d in axes if c.shape[d] == 1 and x.shape[d] == 1)
  dc = [d for d in range(nd) if c.shape[d] != 1]     # dims the selection indexes
  rest = [d for d in range(nd) if c.shape[d] == 1]   # dims x keeps whole
  nz = np.nonzero(c.reshape([c.shape[d] for d in dc]))
  xt = x.transpose(dc + rest)
  picked = xt[tuple(k if xt.shape[i] != 1 else np.zeros_like(k) for i, k in enumerate(nz))].astype(np.float64)  # (selected, *rest)
  keep = [i for i, d in enumerate(dc) if d not in axes]  # selection dims that stay in the output
  out = np.zeros([ext[dc[i]] for i in keep] + list(picked.shape[1:]), dtype=np.float64)
  if keep: _scatter_add(out, tuple(nz[i] for i in keep), picked)
  else: out += picked.sum(axis=0)
  if reps != 1: out *= reps
  # back to the region's dim order, reduce dims kept as 1
  order = [dc[i] for i in keep] + rest
  full = out.reshape(out.shape + (1,) * (nd - len(order))).transpose(np.argsort(order + [d for d in range(nd) if d not in order]))
  return full.reshape([1 if d in axes else full.shape[d] for d in range(nd)])

# *** one kernel ***

class _Kernel:
  """The per-call state of one kernel: resolved views, node shapes, evaluation plans, buffers."""
  def __init__(self, ast: UOp, bufs: list[np.ndarray], var_vals: dict[UOp, int], reference: bool):
    self.ast, self.var_vals, self.reference = ast, var_vals, reference
    self.views: dict[UOp, tuple[RView, ...]] = {}
    self.shapes: dict[UOp, tuple[int, ...] | None] = {}
    self.plans: dict[tuple[UOp, ...], tuple[list[UOp], list[list[UOp]]]] = {}
    self.rcache: dict[UOp, tuple[Any, np.ndarray]] = {}
    self.closed: dict[UOp, bool] = {}
    nodes = list(ast.toposort())
    for u in nodes:
      if u.op is Ops.VIEW: self.views[u] = resolve_views(u.arg, var_vals)
    ndims = {len(v[-1][0]) for v in self.views.values()}
    if len(ndims) > 1: raise InterpreterError(f"kernel views have different numbers of dims: {sorted(ndims)}")
    self.ndim = ndims.pop() if ndims else 0
    for u in nodes: self.shapes[u] = self._shape(u)
    self.full = tuple(max([v[-1][0][d] for v in self.views.values()] + [1]) for d in range(self.ndim))
    self.bufs = self._read_safe(nodes, bufs)
    self.out_bufs = bufs
    for u in nodes:
      if u.op is Ops.REDUCE_AXIS: self.closed[u] = self._closed_form_candidate(u)

  def _shape(self, u: UOp) -> tuple[int, ...] | None:
    if u.op in (Ops.LOAD, Ops.STORE): return self.views[u.src[1]][-1][0]
    if u.op is Ops.VALID: return self.views[u.src[0]][-1][0]
    if u.op is Ops.REDUCE_AXIS:
      sh = self.shapes[u.src[0]]
      return None if sh is None else tuple(1 if d in u.arg[1] else x for d, x in enumerate(sh))
    if u.op in (Ops.CONST, Ops.DEFINE_VAR, Ops.BIND, Ops.DEFINE_GLOBAL, Ops.VIEW, Ops.SINK): return None
    out: tuple[int, ...] | None = None
    for s in u.src:
      if (ss := self.shapes[s]) is None: continue
      if out is None: out = ss
      elif out != ss:
        if len(out) != len(ss) or any(a != b and a != 1 and b != 1 for a, b in zip(out, ss)):
          raise InterpreterError(f"{u.op} combines values of shapes {out} and {ss}")
        out = tuple(max(a, b) for a, b in zip(out, ss))
    return out

  def _read_safe(self, nodes: list[UOp], bufs: list[np.ndarray]) -> list[np.ndarray]:
    """The buffers loads read from: a copy of any input the kernel's stores could overwrite before it is read."""
    stores = {s.src[0].arg: s for s in self.ast.src if s.op is Ops.STORE}
    loads: dict[int, list[UOp]] = {}
    for u in nodes:
      if u.op is Ops.LOAD: loads.setdefault(u.src[0].arg, []).append(u)
    out = list(bufs)
    for i, ls in loads.items():
      if i in stores:
        st = stores[i]
        same = all(ld.src[1].arg == st.src[1].arg for ld in ls) and len(self.views[st.src[1]]) == 1 and \
          _injective(self.views[st.src[1]][0]) and self.shapes[ls[0]] == self.shapes[st]
        # read exactly where written, and no chunk writes what another reads: no copy needed
        if same and not any(j != i and np.may_share_memory(bufs[i], bufs[j]) for j in stores): continue
      elif not any(np.may_share_memory(bufs[i], bufs[j]) for j in stores): continue
      out[i] = bufs[i].copy()
      STATS["input_copies"] += 1
    return out

  def _closed_form_candidate(self, u: UOp) -> bool:
    if u.arg[0] is not Ops.ADD: return False
    w = u.src[0]
    if not (w.op is Ops.WHERE and w.src[0].op is Ops.VALID and w.src[1].op is Ops.CONST and w.src[2].op is Ops.CONST
            and w.src[2].arg == 0): return False
    return _closed_form_ok(self.views[w.src[0].src[0]], u.arg[1])

  # *** evaluation over regions ***
  def node_region(self, u: UOp, region: Region) -> Region:
    s = self.shapes[u]
    if s is None: return region
    return tuple(r if n != 1 else (0, 1) for r, n in zip(region, s))

  def plan(self, roots: tuple[UOp, ...]) -> tuple[list[UOp], list[list[UOp]]]:
    """Topological order of what `roots` need (a REDUCE_AXIS is a leaf: it runs its own chunks), and after
    each step the values that are no longer needed."""
    if (p := self.plans.get(roots)) is not None: return p
    order: list[UOp] = []
    seen: set[UOp] = set()
    for r in roots:
      stack = [(r, False)]
      while stack:
        u, done = stack.pop()
        if done:
          order.append(u)
          continue
        if u in seen: continue
        seen.add(u)
        stack.append((u, True))
        if u.op not in (Ops.REDUCE_AXIS, Ops.LOAD, Ops.VALID):
          stack.extend((s, False) for s in reversed(u.src) if s not in seen and s.op not in (Ops.DEFINE_GLOBAL, Ops.VIEW))
    last: dict[UOp, int] = {}
    for k, u in enumerate(order):
      if u.op not in (Ops.REDUCE_AXIS, Ops.LOAD, Ops.VALID):
        for s in u.src: last[s] = k
    frees: list[list[UOp]] = [[] for _ in order]
    for s, k in last.items():
      if s not in roots: frees[k].append(s)
    p = self.plans[roots] = (order, frees)
    return p

  def eval(self, roots: tuple[UOp, ...], region: Region) -> list[Any]:
    order, frees = self.plan(roots)
    vals: dict[UOp, Any] = {}
    for u, fr in zip(order, frees):
      v = vals[u] = self.eval_one(u, vals, region)
      _note(v)
      for s in fr: vals.pop(s, None)
    return [vals[r] for r in roots]

  def eval_one(self, u: UOp, vals: dict[UOp, Any], region: Region) -> Any:
    op = u.op
    if op is Ops.CONST: return bf16_round(u.arg) if u.dtype == dtypes.bfloat16 else np.array(u.arg, dtype=_np_dtype(u.dtype))
    if op is Ops.DEFINE_VAR: return np.array(self.var_vals[u], dtype=_np_dtype(u.dtype))
    if op is Ops.BIND: return np.array(u.src[1].arg, dtype=_np_dtype(u.dtype))
    if op is Ops.VALID:
      valid = view_positions(self.views[u.src[0]], self.node_region(u, region), need_index=False)[1]
      return np.asarray(valid, dtype=np.bool_)
    if op is Ops.LOAD:
      v = self.load(u, self.node_region(u, region))
      return bf16_float(v) if u.dtype == dtypes.bfloat16 else v
    if op is Ops.REDUCE_AXIS: return self.reduce(u, region)
    if op is Ops.CAST: return _cast(vals[u.src[0]], u.src[0].dtype, u.dtype)
    if op is Ops.BITCAST:
      x = vals[u.src[0]]
      if u.src[0].dtype == dtypes.bfloat16: x = bf16_bits(x)  # the bits of the value it rounds to
      out = np.ascontiguousarray(x).view(u.dtype.scalar().np)  # type: ignore[arg-type]  # a value's dtype has a numpy type
      return bf16_float(out) if u.dtype == dtypes.bfloat16 else out
    res = _alu(op, u.dtype, [vals[s] for s in u.src])
    return np.asarray(res).astype(_np_dtype(u.dtype), copy=False)

  def load(self, u: UOp, region: Region) -> np.ndarray:
    buf, views = self.bufs[u.src[0].arg], self.views[u.src[1]]
    zero = np.zeros((1,) * len(region), dtype=buf.dtype)
    if buf.size == 0: return zero
    if STRIDED_LOADS and len(views) == 1:
      if (bp := _box(views[0], region)) is None: return zero  # nothing valid here
      box, partial = bp
      if (arr := _strided(buf, views[0], box, writeable=False)) is not None:
        if not partial: return arr
        shape, strides, _, _ = views[0]
        ext = [(re - rs) if (st or (a, b) != (rs, re)) else 1 for (rs, re), (a, b), st in zip(region, box, strides)]
        out = np.zeros(ext, dtype=buf.dtype)
        out[tuple(slice(a - rs, b - rs) if n != 1 else slice(0, 1) for (rs, _), (a, b), n in zip(region, box, ext))] = arr
        return out
    idx, valid = view_positions(views, region)
    _note(idx)
    if valid is False: return zero
    got = buf[np.clip(idx, 0, buf.size - 1)]  # invalid positions may point anywhere: read in bounds, then mask
    return got if valid is True else np.where(valid, got, buf.dtype.type(0))

  def reduce(self, u: UOp, region: Region) -> np.ndarray:
    op, axes = u.arg
    out_shape = self.shapes[u] or (1,) * self.ndim
    key = tuple(r for r, n in zip(region, out_shape) if n != 1)
    if (c := self.rcache.get(u)) is not None and c[0] == key: return c[1]
    if op not in _REDUCE_UFUNC: raise InterpreterError(f"the interpreter cannot reduce with {op}")
    src = u.src[0]
    ishape = self.shapes[src] or self.full
    odt = _np_dtype(u.dtype)
    if CLOSED_FORM and self.closed[u]:
      STATS["closed_form"] += 1
      w = src
      cnt = _count_valid(self.views[w.src[0].src[0]], axes, self.node_region(w.src[0], region))
      cval = w.src[1].arg
      if dtypes.is_bool(u.dtype): res = (cnt > 0) & bool(cval)
      elif dtypes.is_int(u.dtype): res = cnt.astype(odt) * odt.type(cval)  # wraps like repeated addition
      else: res = (cnt.astype(np.float64) * float(cval) + 0.0).astype(odt)  # exact product, rounded once; no terms is +0.0, as a loop
    else:
      acc_dt = _acc_dtype(u.dtype, self.reference)
      ufunc = _REDUCE_UFUNC[op]
      rext = tuple(ishape[a] for a in axes)
      other = _extent(tuple(r for d, (r, n) in enumerate(zip(region, ishape)) if d not in axes and n != 1))
      acc: Any = None
      factors = _factors(src) if CONTRACT and self.reference and op is Ops.ADD and acc_dt == np.float64 else None
      for rbox in _boxes(rext, max(1, CHUNK_ELEMENTS // max(other, 1))):
        sub = list(region)
        for a, rng in zip(axes, rbox): sub[a] = rng
        if factors is not None:
          f, g = self.eval(factors[1:], tuple(sub))
          r = None
          if factors[0] != "mul":  # a select of x or 0
            f = np.asarray(f, dtype=np.bool_) if factors[0] == "where" else ~np.asarray(f, dtype=np.bool_)
            if np.count_nonzero(f) * 8 <= f.size:  # a one-hot gather
              STATS["sparse"] += 1
              r = _sparse_contract(f, g, tuple(sub), axes)
            elif not np.isfinite(g).all(): f = None  # x times the condition as 0/1 is exact only while x is finite
          if f is not None:
            STATS["contracted"] += 1
            if r is None: r = _contract(f, g, tuple(sub), axes)
            acc = r if acc is None else acc + r
            _note(acc)
            continue
        x = self.eval((src,), tuple(sub))[0]
        if x.ndim == 0: x = x.reshape((1,) * self.ndim)
        # a value broadcast along a reduce axis still counts once per position
        x = np.broadcast_to(x, tuple((sub[d][1] - sub[d][0]) if d in axes else x.shape[d] for d in range(self.ndim)))
        if op is Ops.MAX or dtypes.is_bool(u.dtype):
          x = x.astype(acc_dt, copy=False)
          _note(x)
          r = ufunc.reduce(x, axis=axes, keepdims=True)
        else: r = ufunc.reduce(x, axis=axes, keepdims=True, dtype=acc_dt)
        acc = r if acc is None else ufunc(acc, r, dtype=acc_dt)
        _note(acc)
      res = np.full((1,) * self.ndim, reduce_identity(op, u.dtype), dtype=acc_dt) if acc is None else acc
      res = res.astype(odt)
    self.rcache[u] = (key, res)
    return res

  def store(self, u: UOp, region: Region, val: Any) -> None:
    buf, views = self.out_bufs[u.src[0].arg], self.views[u.src[1]]
    val = bf16_bits(val) if u.src[0].dtype.base == dtypes.bfloat16 else np.asarray(val).astype(buf.dtype, copy=False)
    ext = tuple(e - s for s, e in region)
    if STRIDED_LOADS and len(views) == 1 and _injective(views[0]):
      bp = _box(views[0], region)
      if bp is not None and not bp[1] and (dst := _strided(buf, views[0], bp[0], writeable=True)) is not None:
        np.copyto(dst, val)
        return
    idx, valid = view_positions(views, region)
    _note(idx)
    if valid is False: return
    idx = np.broadcast_to(np.asarray(idx, dtype=np.int64), ext)
    v = np.broadcast_to(val, ext)
    if valid is not True:
      valid = np.broadcast_to(valid, ext)
      idx, v = idx[valid], v[valid]
    if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= buf.size):
      raise InterpreterError(f"kernel stores out of bounds: index {int(idx.min())}..{int(idx.max())} into buffer "
                             f"{u.src[0].arg} of {buf.size} elements")
    buf[idx] = v

  def run(self) -> None:
    stores = [s for s in self.ast.src if s.op is Ops.STORE]
    if any(s.op is not Ops.STORE for s in self.ast.src):
      raise InterpreterError(f"a kernel SINK holds only STOREs, got {sorted({s.op.name for s in self.ast.src})}")
    if not stores: return
    out_shape = tuple(max(self.shapes[s][d] for s in stores) for d in range(self.ndim))  # type: ignore[index]
    # the biggest reduce that is evaluated (not counted) sets how many output positions fit one chunk
    def cost(u: UOp) -> int:
      if CLOSED_FORM and self.closed[u]: return _CLOSED_FORM_COST
      return math.prod((self.shapes[u.src[0]] or self.full)[a] for a in u.arg[1])
    per_output = max([cost(u) for u in self.closed] + [1])
    for box in _boxes(out_shape, max(1, CHUNK_ELEMENTS // min(per_output, CHUNK_ELEMENTS))):
      STATS["chunks"] += 1
      groups: dict[Region, list[UOp]] = {}
      for s in stores:
        sh = self.shapes[s]
        r = tuple((a, b) if n != 1 else ((0, 1) if a == 0 else (0, 0)) for (a, b), n in zip(box, sh))  # type: ignore[arg-type]
        if all(b > a for a, b in r): groups.setdefault(r, []).append(s)
      for r, ss in groups.items():
        vals = self.eval(tuple(s.src[2] for s in ss), r)
        for s, v in zip(ss, vals): self.store(s, r, v)

def _cast(x: Any, src: DType, dst: DType) -> np.ndarray:
  """CAST: a bfloat16 source is rounded first (its float32 value may be an unrounded result), a bfloat16 target rounds
  the float32 conversion (an int or double reaches bfloat16 through float32, as in the OpenCL kernels)."""
  if src == dtypes.bfloat16: x = bf16_round(x)
  if dst == dtypes.bfloat16: return bf16_round(np.asarray(x).astype(np.float32))
  return np.asarray(x).astype(_np_dtype(dst))

def _injective(view: RView) -> bool:
  """Distinct positions of the view hit distinct elements (sorted by |stride|, each dim steps over the ones inside it)."""
  shape, strides, _, _ = view
  dims = sorted((abs(st), s) for s, st in zip(shape, strides) if s != 1)
  span = 1
  for st, s in dims:
    if st < span: return False
    span = st * s
  return True

def exec_ast(ast: UOp, bufs: list[np.ndarray], var_vals: dict[UOp, int], reference: bool | None = None) -> None:
  """Run one kernel AST on flat numpy buffers (bufs[i] is DEFINE_GLOBAL i), in place.

  reference: accumulate float16/float32 reductions in float64 (default: module REFERENCE)."""
  if ast.op is Ops.COPY:
    copy_bytes(bufs[0], bufs[1])
    return
  if ast.op in (Ops.EMPTY, Ops.BUFFER_VIEW): return
  if ast.op is not Ops.SINK: raise InterpreterError(f"kernel AST must be a SINK, got {ast.op}")
  with np.errstate(all="ignore"):
    _Kernel(ast, bufs, var_vals, REFERENCE if reference is None else reference).run()

class NumpyBackend(Backend):
  def __init__(self, name: str = "NUMPY", reference: bool | None = None): self.name, self.reference = name, reference
  def alloc(self, size: int, dtype: DType) -> np.ndarray: return np.zeros(size, dtype=dtype.scalar().np)
  def copyin(self, handle: np.ndarray, src: np.ndarray) -> None: handle[:] = src
  def copyout(self, handle: np.ndarray, size: int, dtype: DType) -> np.ndarray: return handle[:size].copy()
  def copy(self, dst: Buffer, src: Buffer) -> None: copy_bytes(*(b.handle if b._base is None else _sub(b) for b in (dst, src)))
  def exec_ast(self, ast: UOp, bufs: list[Buffer], var_vals: dict[UOp, int]) -> float:
    """Run the kernel; returns its wall time in seconds (the interpreter runs synchronously)."""
    st = time.perf_counter()
    exec_ast(ast, [b.handle if b._base is None else _sub(b) for b in bufs], var_vals, self.reference)
    return time.perf_counter() - st

def _sub(b: Buffer) -> np.ndarray:
  base = b.base.handle
  return base.view(np.uint8)[b.offset:b.offset + b.nbytes].view(b.dtype.scalar().np)

__all__ = ["exec_ast", "NumpyBackend", "InterpreterError", "view_positions", "resolve_views", "CHUNK_ELEMENTS", "CLOSED_FORM",
           "REFERENCE", "STATS", "reset_stats"]
