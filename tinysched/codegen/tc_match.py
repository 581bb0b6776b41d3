"""Which kernels the tensor cores compute (tensor_core.py renders them), and the tiles they may use.

`match` reads a kernel as: a STORE of a sum, in float32 (or bfloat16, which is carried in float32 and rounded where
stored), over one reduce axis, of a product of two loads of fp16 or of bf16 (both the same), each cast to float32 or
their product cast. Every operand view is one unmasked view with constant strides (matmul, batched matmul, a transposed
operand); the output axes that are neither m (A varies, B does not) nor n (B varies, A does not) are batch axes. The
stored value is the sum or an elementwise epilogue over it: float +, *, negation, max, exp2, log2, sqrt, sin, 1/x and
casts of the sum, constants and unmasked loads that do not vary with the reduce axis (a bias, a residual, GELU). K
must divide the tile's step (BK); M and N need not divide the tile: the edge tiles copy zeros for the rows and columns
past the matrix and store only what lies inside it (a 50257-wide vocabulary). Anything else (a convolution's masked
window, a comparison in the epilogue) is refused with the reason. Kernel asks `check` when Opt(TC) is applied; this
module imports nothing of the renderer's.
"""
from __future__ import annotations
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING
from tinysched.dtype import DType, dtypes
from tinysched.ops import Ops
from tinysched.uop import UOp

if TYPE_CHECKING: from tinysched.codegen.kernel import Kernel  # (kernel.py imports this module)

BK = 32        # K per pipeline stage (two mma k-steps of 16)

@dataclass(frozen=True)
class Tile:
  bm: int
  bn: int
  warps_m: int
  warps_n: int
  stages: int = 2       # local-memory stages in flight (cp.async); operands that cannot use cp.async get one
  swizzle: bool = False  # 16-byte chunks XOR-permuted per row (no padding: more tile in the same local memory)
  @property
  def threads(self) -> int: return 32 * self.warps_m * self.warps_n
  @property
  def mi(self) -> int: return self.bm // self.warps_m // 16   # m16 fragments per warp
  @property
  def ni(self) -> int: return self.bn // self.warps_n // 8    # n8 fragments per warp

# Opt amount -> tile (output tile, warps, pipeline)
TILES: dict[int, Tile] = {
  1: Tile(64, 64, 2, 2),                            # 32x32 per warp: small matrices, many work-groups
  2: Tile(128, 128, 2, 4),                          # 64x32 per warp
  3: Tile(128, 128, 2, 2, stages=3, swizzle=True),  # 64x64 per warp, three stages
  4: Tile(128, 256, 2, 4, swizzle=True),            # 64x64 per warp, 8 warps
}

@dataclass(frozen=True)
class Operand:
  buf: int                    # DEFINE_GLOBAL number
  dtype: DType                # element dtype in memory
  offset: int
  strides: tuple[int, ...]    # per axis of the kernel's normalized full shape (outputs, then the reduce axis)

@dataclass(frozen=True)
class Match:
  m_axis: int
  n_axis: int
  batch_axes: tuple[int, ...]
  M: int
  N: int
  K: int
  batch: tuple[int, ...]      # sizes of batch_axes
  a: Operand                  # varies with m and k
  b: Operand                  # varies with n and k
  c: Operand                  # the output (reduce-axis stride 0)
  in_dtype: DType             # float16 or bfloat16
  value: UOp                  # the stored value: the sum, or an epilogue over it
  red: UOp                    # the sum
  epi_loads: tuple[tuple[UOp, Operand], ...]  # the epilogue's loads (a bias, a residual), each with its view

# what an epilogue may do to the sum: elementwise float arithmetic that rounds as the renderer does (opencl.py)
_EPI_OPS = (Ops.ADD, Ops.MUL, Ops.NEG, Ops.MAX, Ops.CAST, Ops.EXP2, Ops.LOG2, Ops.SQRT, Ops.SIN, Ops.RECIP)
_FLOATS = (dtypes.float32, dtypes.float16, dtypes.bfloat16)

def const_of(u: UOp, k: Kernel) -> UOp | None:
  """The CONST of a constant in the AST, WHERE(VALID(view), c, 0), when its view has no mask (so it is c everywhere)."""
  if u.op is Ops.WHERE and u.src[0].op is Ops.VALID and u.src[1].op is Ops.CONST and u.src[2].op is Ops.CONST:
    v = k.sts.get(u.src[0].src[0])
    if v is not None and all(x.mask is None for x in v.views): return u.src[1]
  return None

def _epilogue(k: Kernel, val: UOp, red: UOp) -> tuple[tuple[UOp, Operand], ...] | str:
  """The loads of the elementwise epilogue `val` computes from the sum `red`, or why it is not one this kernel renders."""
  loads: dict[UOp, Operand] = {}
  todo = [val]
  while todo:
    u = todo.pop()
    if u is red or u in loads or const_of(u, k) is not None: continue
    if u.op is Ops.LOAD:
      if u.dtype not in _FLOATS: return f"an epilogue load of {u.dtype.name}"
      sv = _single_view(k, u.src[1])
      if isinstance(sv, str): return f"an epilogue load through {sv}"
      if sv[1][k.n_out] != 0: return "an epilogue load that varies with the reduce axis"
      loads[u] = Operand(u.src[0].arg, u.dtype, sv[0], sv[1])
      continue
    if u.op not in _EPI_OPS or u.dtype not in _FLOATS or any(s.dtype not in _FLOATS for s in u.src):
      return f"an epilogue with {u.op.name} of {u.dtype.name} (the tensor-core kernel renders float +, *, -x, max, exp2, log2, sqrt, sin, " \
             "1/x and casts)"
    todo.extend(u.src)
  return tuple(sorted(loads.items(), key=lambda kv: (kv[1].buf, kv[1].offset, kv[1].strides)))

def _single_view(k: Kernel, view: UOp) -> tuple[int, tuple[int, ...]] | str:
  st = k.sts[view]
  if len(st.views) != 1: return "a view that is a stack of views (a reshape of a permute, a convolution's window)"
  v = st.views[0]
  if v.mask is not None: return "a masked (padded) view"
  if type(v.offset) is not int or not all(type(s) is int for s in v.strides) or not all(type(s) is int for s in v.shape):
    return "a symbolic shape or view"
  return v.offset, tuple(v.strides)  # type: ignore[arg-type]  # all ints: checked above

def _unwrap_cast(u: UOp, dt: DType) -> UOp | None:
  return u.src[0] if u.op is Ops.CAST and u.dtype == dt else None

def match(k: Kernel) -> Match | str:
  """The matmul this kernel is, or why it is not one the tensor-core kernel computes."""
  if len(k.ast.src) != 1: return "more than one output"
  if len(k.reduceops) != 1 or k.nested: return "not exactly one reduce"
  if k.n_red != 1: return f"{k.n_red} reduce axes (one is needed)"
  if k.n_out < 2: return "fewer than two output axes"
  store = k.ast.src[0]
  red = k.reduceops[0]
  val = store.src[2]
  out_dt = val.dtype
  if red.arg[0] is not Ops.ADD or red.dtype not in (dtypes.float32, dtypes.bfloat16): return "not a float32 (or bfloat16) sum"
  if out_dt not in (dtypes.float32, dtypes.float16, dtypes.bfloat16): return f"output dtype {out_dt.name}"
  epi = _epilogue(k, val, red)
  if isinstance(epi, str): return epi
  body = red.src[0]
  if (x := _unwrap_cast(body, dtypes.float32)) is not None and x.op is Ops.MUL: loads = list(x.src)   # CAST(float, MUL(h, h))
  elif body.op is Ops.MUL: loads = [_unwrap_cast(s, dtypes.float32) or s for s in body.src]           # MUL(CAST(h), CAST(h))
  else: return "the summand is not a product"
  if not all(ld.op is Ops.LOAD for ld in loads): return "a factor that is not a load"
  in_dt = loads[0].dtype
  if in_dt not in (dtypes.float16, dtypes.bfloat16) or loads[1].dtype != in_dt: return "factors are not both float16 or both bfloat16"
  if red.dtype == dtypes.bfloat16 and in_dt != dtypes.bfloat16: return "a bfloat16 sum of float16 factors"
  views = []
  for u in (loads[0], loads[1], store):
    sv = _single_view(k, u.src[1])
    if isinstance(sv, str): return sv
    views.append(sv)
  if not all(type(s) is int for s in k.full_shape): return "a symbolic shape"
  shape = [int(s) for s in k.full_shape]  # type: ignore[arg-type]  # all ints: checked above
  red_ax = k.n_out
  (oa, sa), (ob, sb), (oc, sc) = views
  if sc[red_ax] != 0: return "the output varies with the reduce axis"
  if sa[red_ax] == 0 or sb[red_ax] == 0: return "a factor that does not vary with the reduce axis"
  def pick(x, y):  # the innermost output axis where x varies and y does not
    return next((i for i in range(k.n_out - 1, -1, -1) if x[i] != 0 and y[i] == 0), None)
  m_ax, n_ax = pick(sa, sb), pick(sb, sa)
  if m_ax is None or n_ax is None:  # the first load may be B: try the other way round
    (oa, sa), (ob, sb) = (ob, sb), (oa, sa)
    loads = loads[::-1]
    m_ax, n_ax = pick(sa, sb), pick(sb, sa)
    if m_ax is None or n_ax is None: return "no output axis that only one factor varies with (not a matmul)"
  batch_axes = tuple(i for i in range(k.n_out) if i not in (m_ax, n_ax))
  return Match(m_ax, n_ax, batch_axes, shape[m_ax], shape[n_ax], shape[red_ax], tuple(shape[i] for i in batch_axes),
               Operand(loads[0].src[0].arg, in_dt, oa, sa), Operand(loads[1].src[0].arg, in_dt, ob, sb),
               Operand(store.src[0].arg, out_dt, oc, sc), in_dt, val, red, epi)

def grid(mt: Match, tile: Tile) -> tuple[int, int]:
  """Work-groups along n and m: the last ones of each hang over the matrix's edge unless the tile divides it."""
  return -(-mt.N // tile.bn), -(-mt.M // tile.bm)

def waste(mt: Match, tile: Tile) -> float:
  """The fraction of the tiles' outputs that lie past the matrix's edges (computed on zeros, never stored)."""
  gn, gm = grid(mt, tile)
  return gn * tile.bn * gm * tile.bm / (mt.N * mt.M) - 1

def fits(mt: Match, tile: Tile) -> str | None:
  """Why `tile` cannot compute `mt`, or None: K must divide the step BK (M and N may end inside a tile)."""
  if mt.K % BK: return f"K={mt.K} does not divide the {BK}-deep step of the {tile.bm}x{tile.bn}x{BK} tile"
  if math.prod(mt.batch) > 65535 or grid(mt, tile)[1] > 65535: return "more than 65535 work-groups in grid dims 1 or 2"
  return None

def check(k: Kernel, amount: int) -> str | None:
  """Why Opt(TC, 0, amount) cannot apply to kernel `k` (target aside), or None."""
  if amount not in TILES: return f"tile {amount} is not one of {sorted(TILES)}"
  mt = match(k)
  return mt if isinstance(mt, str) else fits(mt, TILES[amount])

__all__ = ["BK", "TILES", "Tile", "Operand", "Match", "match", "fits", "grid", "waste", "check", "const_of"]
