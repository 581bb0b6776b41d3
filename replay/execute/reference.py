"""The execution check's oracle: evaluate a scheduler *input* graph (a schedule's big graph, or a kernel's
pre-sink) op by op with numpy, without the scheduler, the AST rewrite or the code generator.

Why the input and not the stored kernels: the kernels are what is under test. Evaluating the graph the
scheduler was given catches realize and fusion bugs (a padded view over an unsafe op that is no longer
realized) even when old and new kernel lists agree with each other.

Semantics, node by node (every value is an ndarray of the node's shape):
- `BUFFER`: the buffer's current flat contents; `VIEW(BUFFER)` reads it through the view;
- `VIEW(BUFFER, op)`: an unrealized buffer whose contents are `op`'s values laid out row-major; reading
  it goes through the view, and the buffer is written with them (a result of the graph);
- `VIEW(x)`: x's values (row-major) seen through the view; `VALID(VIEW)`: the view's mask;
- `STORE(BUFFER, VIEW, value)`: value scattered into the buffer through the view; `ASSIGN(target, value)`:
  value; `CONTIGUOUS`/`COPY`: their source; `EMPTY`: undefined contents (never compared);
- ALU ops, casts and reduces follow the NUMPY interpreter (the one home of op semantics); reductions of
  floats accumulate in float64 and round once.
- bfloat16 (numpy has none): buffers hold its uint16 bits, values are float32 arrays. Reading a buffer widens the
  bits exactly; arithmetic stays float32; a value is rounded to the nearest bfloat16 exactly where the interpreter
  and the renderer round it (runtime/interpreter.py): a CONST, a CAST to or from bfloat16, a BITCAST from it, and
  a store (STORE, or a buffer written by the graph). This is the spec restated here, not imported: the rounding
  itself is tinysched.dtype.bf16_bits, the one definition of the format. A graph's intermediate VIEW(BUFFER, op)
  is only a store if the scheduler realizes it, which the reference does not know (and must not ask): its buffer
  holds the rounded bits, but its readers see the unrounded value unless op is always realized (CONTIGUOUS, COPY,
  ASSIGN). So graph-level comparisons of bfloat16 allow for rounding the reference cannot place (execinputs.compare
  with intermediate_rounding).

Views are evaluated by the interpreter's own numpy evaluation of shape/strides/offset/mask, which shares no
code with the index expressions codegen builds. A graph whose reduce inputs exceed `ELEMENT_BUDGET` is not
evaluated (`TooLarge`): the caller falls back to interpreting the stored kernels.
"""
from __future__ import annotations
from typing import Any
import numpy as np
from tinysched.ops import Ops, GroupOp
from tinysched.uop import UOp, sym_infer
from tinysched.reduce import reduce_identity
from tinysched.dtype import DType, dtypes, bf16_bits, bf16_float, bf16_round
from tinysched.runtime import interpreter as I
from tinysched.helpers import prod

ELEMENT_BUDGET = 1 << 25  # the largest intermediate (elements) evaluated whole

class TooLarge(Exception): pass

class _Assigned:
  """An ASSIGN's result: `value` written into the target buffer through `st` (the whole buffer when None)."""
  def __init__(self, st, value): self.st, self.value = st, value
class Unsupported(Exception): pass

def _np(d) -> np.dtype: return np.dtype(d.scalar().fmt)  # what a buffer of d holds (bfloat16: its uint16 bits)

def _is_bf16(d) -> bool: return d.scalar() == dtypes.bfloat16

def _vt(d) -> np.dtype:
  """The numpy dtype a value of d is computed in: float32 for bfloat16, else d's own."""
  return np.dtype(np.float32) if _is_bf16(d) else _np(d)


def _const(u: UOp) -> np.ndarray: return bf16_round(u.arg) if _is_bf16(u.dtype) else np.array(u.arg, dtype=_np(u.dtype))

def _to_mem(v, d, like: np.ndarray | None = None) -> np.ndarray:
  """A value written into a buffer of dtype d: bfloat16 rounds to its bits, anything else converts."""
  if _is_bf16(d): return bf16_bits(v)
  return np.asarray(v).astype(like.dtype if like is not None else _np(d), copy=False)

def _from_mem(flat: np.ndarray, d) -> np.ndarray: return bf16_float(flat) if _is_bf16(d) else flat

def _cast(x, src, dst) -> np.ndarray:
  """CAST: a bfloat16 source is rounded first (its float32 value may be unrounded arithmetic), a bfloat16 target is
  the float32 conversion rounded (an int or double reaches bfloat16 through float32)."""
  if _is_bf16(src): x = bf16_round(x)
  if _is_bf16(dst): return bf16_round(np.asarray(x).astype(np.float32))
  return np.asarray(x).astype(_np(dst))

def _bitcast(x, src, dst) -> np.ndarray:
  """BITCAST: from bfloat16, the bits of the value it rounds to; to bfloat16, the bits widened."""
  if _is_bf16(src): x = bf16_bits(x)
  out = np.ascontiguousarray(x).view(_np(dst))
  return bf16_float(out) if _is_bf16(dst) else out

def _view(st, flat: np.ndarray, var_vals: dict[UOp, int]) -> np.ndarray:
  """The values of `flat` seen through st (a fresh array), zero where the view is masked out. A single view is read
  as a numpy strided window over its mask's box (no index arrays); a stack of views, or one reaching outside `flat`,
  through the positions of every element."""
  views = I.resolve_views(st, var_vals)
  shape = views[-1][0]
  if flat.size == 0: return np.zeros(shape, flat.dtype)
  if len(views) == 1:
    got = I._box(views[0], tuple((0, s) for s in shape))
    if got is None: return np.zeros(shape, flat.dtype)  # nothing valid
    box, partial = got
    if (win := I._strided(flat, views[0], box, writeable=False)) is not None:
      out = np.zeros(shape, flat.dtype) if partial else np.empty(shape, flat.dtype)
      out[tuple(slice(a, b) for a, b in box)] = win
      return out
  _, idx, valid = _positions(st, var_vals)
  return np.where(valid, np.take(flat, idx, mode="clip"), np.zeros((), flat.dtype))

def _valid(st, var_vals: dict[UOp, int]) -> np.ndarray:
  """Which elements of st are inside its masks."""
  return _positions(st, var_vals)[2]

def graph_vars(root: UOp, names: dict[str, int]) -> dict[UOp, int]:
  """Every Variable of a graph (as nodes and inside VIEW args) with its value from `names` (name -> int)."""
  out: dict[UOp, int] = {}
  for u in root.toposort():
    found = [u] if u.op is Ops.DEFINE_VAR else ([v if v.op is Ops.DEFINE_VAR else v.src[0] for v in u.arg.vars()] if u.op is Ops.VIEW else [])
    for v in found:
      if v.arg[0] in names: out[v] = names[v.arg[0]]
  return out

def _positions(st, var_vals: dict[UOp, int]) -> tuple[tuple[int, ...], np.ndarray, np.ndarray]:
  """(shape, buffer position, validity) of every element of a ShapeTracker, from the interpreter's evaluation of
  the views' fields (no compiler index code)."""
  views = I.resolve_views(st, var_vals)
  shape = views[-1][0]
  idx, valid = I.view_positions(views)
  return shape, np.broadcast_to(np.asarray(idx, dtype=np.int64), shape), np.broadcast_to(np.asarray(valid, dtype=np.bool_), shape)

# a view stack of more elements than this is bounded in closed form instead of evaluated position by position (a
# 16e9-element reduce view would take 119 GiB of positions to enumerate)
EXACT_REACH_ELEMENTS = 1 << 24

def _view_reach(view) -> int:
  """One past the largest position one resolved view reaches (each dim independently at the end of its valid range
  that its stride's sign favours), 0 if it has no valid element."""
  shape, strides, off, mask = view
  top = off
  for d, (s, st_) in enumerate(zip(shape, strides)):
    lo, hi = (max(mask[d][0], 0), min(mask[d][1], s)) if mask is not None else (0, s)
    if lo >= hi: return 0
    top += st_ * ((hi - 1) if st_ > 0 else lo)
  return top + 1

def reach(st, var_vals: dict[UOp, int]) -> int:
  """One past the largest buffer position any valid element of `st` reads or writes (0 if none is valid). A single
  view in closed form; a stack of views by evaluating every position, or, past EXACT_REACH_ELEMENTS elements, bounded
  by its innermost view's reach (every valid element of the stack lands in that view's valid range: a bound from
  above, which sizes a buffer safely)."""
  views = I.resolve_views(st, var_vals)
  if len(views) == 1: return _view_reach(views[0])
  if prod(views[-1][0]) > EXACT_REACH_ELEMENTS: return _view_reach(views[0])
  _, idx, valid = _positions(st, var_vals)
  return int(idx[valid].max()) + 1 if valid.any() else 0

_UFUNC = {Ops.ADD: np.add, Ops.MUL: np.multiply, Ops.MAX: np.maximum}

def _reduce(op: Ops, x: np.ndarray, axes: tuple[int, ...], dtype) -> np.ndarray:
  """A reduce with keepdims, accumulating as the interpreter's reference mode does (floats in float64)."""
  if op not in _UFUNC: raise Unsupported(f"the reference cannot reduce with {op}")
  x = np.asarray(x)
  if x.size == 0:
    return np.full([1 if i in axes else s for i, s in enumerate(x.shape)], reduce_identity(op, dtype), dtype=_vt(dtype))
  return _UFUNC[op].reduce(x.astype(I._acc_dtype(dtype, True), copy=False), axis=axes, keepdims=True).astype(_vt(dtype))

def _shape_size(st, var_vals) -> int:
  n = 1
  for s in st.shape: n *= int(sym_infer(s, var_vals))
  return n

# sources of VIEW(BUFFER, op) that are always realized (the kernels store and reload them)
_REALIZED = frozenset({Ops.CONTIGUOUS, Ops.COPY, Ops.ASSIGN})

def evaluate(root: UOp, bufs: dict[int, np.ndarray], var_vals: dict[UOp, int]) -> tuple[dict[int, np.ndarray], set[int]]:
  """Evaluate `root` (a big-graph SINK of VIEW(BUFFER, op), or a pre-sink SINK of STOREs) on copies of `bufs`
  (canonical buffer number -> flat array). Returns (the buffers it writes, with their new contents; the
  buffers whose contents it leaves undefined)."""
  # the caller's arrays, copied only before a write in place (a model's inputs can be a whole embedding table)
  out = dict(bufs)
  owned: set[int] = set()  # membership only
  written: dict[int, np.ndarray] = {}
  undefined: set[int] = set()
  vals: dict[UOp, Any] = {}
  topo = root.toposort()
  for u in topo:
    if u.op is Ops.VIEW and _shape_size(u.arg, var_vals) > ELEMENT_BUDGET:
      raise TooLarge(f"a view of {_shape_size(u.arg, var_vals)} elements (budget {ELEMENT_BUDGET})")
  with np.errstate(all="ignore"):
    for u in topo:
      op = u.op
      if op in (Ops.SINK, Ops.BUFFER): continue
      if op is Ops.CONST: vals[u] = _const(u)
      elif op is Ops.DEFINE_VAR:  # a Variable used as a value (under a BIND it is only a name)
        if u in var_vals: vals[u] = np.array(var_vals[u], dtype=_np(u.dtype))
      elif op is Ops.BIND: vals[u] = np.array(u.src[1].arg, dtype=_np(u.dtype))
      elif op is Ops.VALID: vals[u] = _valid(u.src[0].arg, var_vals)
      elif op is Ops.VIEW:
        if not u.src: continue  # a bare view: read by its VALID/STORE parent
        base = u.src[0]
        if base.op is Ops.BUFFER:
          n = base.arg[0]; bd: DType | None = base.dtype.base  # None below: flat then holds values, not the buffer's bits
          if n not in out:  # an intermediate no kernel stores
            out[n] = np.zeros(int(base.arg[1][1]), _np(base.dtype.base))
            owned.add(n)
          if len(u.src) == 1: flat = out[n]
          else:
            v = vals[u.src[1]]
            shape = tuple(int(sym_infer(s, var_vals)) for s in u.arg.shape)
            if v is None:  # EMPTY: the buffer's contents are undefined
              undefined.add(n)
              flat = out[n]
            elif isinstance(v, _Assigned):  # the target keeps its contents outside the assigned region
              val = np.broadcast_to(v.value, shape)
              if v.st is None: out[n] = _fit(_to_mem(val.reshape(-1), bd, out[n]), out[n])
              else:
                _, idx, valid = _positions(v.st, var_vals)
                new = out[n].copy()
                if new.size: new[idx[valid]] = _to_mem(np.broadcast_to(v.value, idx.shape), bd, new)[valid]
                out[n] = new
              written[n] = out[n]
              vals[u] = bf16_round(val) if _is_bf16(bd) else val  # what was stored: a bfloat16 value is rounded there
              continue
            else:
              val = np.broadcast_to(v, shape).reshape(-1)
              out[n] = written[n] = _fit(_to_mem(val, bd, out[n]), out[n])
              flat = out[n]
              if _is_bf16(bd) and u.src[1].op not in _REALIZED:
                # an intermediate the scheduler may fuse: its readers see the unrounded float32 value, as in a fused
                # kernel (the buffer itself, compared if a kernel writes it, holds the rounded bits)
                flat = _fit(val.astype(np.float32), bf16_float(out[n]))
                bd = None
          if bd is not None: flat = _from_mem(flat, bd)
        else:
          v = vals[base]
          if isinstance(v, _Assigned): v = v.value
          flat = np.ascontiguousarray(v).reshape(-1)
        vals[u] = _view(u.arg, flat, var_vals)
      elif op is Ops.STORE:
        n = u.src[0].arg[0]
        _, idx, valid = _positions(u.src[1].arg, var_vals)
        val = _to_mem(np.broadcast_to(vals[u.src[2]], idx.shape), u.src[0].dtype.base, out[n])
        if n not in owned:
          out[n] = out[n].copy()
          owned.add(n)
        if out[n].size: out[n][idx[valid]] = val[valid]
        written[n] = out[n]
      elif op in (Ops.CONTIGUOUS, Ops.COPY): vals[u] = vals[u.src[-1]]
      elif op is Ops.ASSIGN:  # arg: (ShapeTracker,) where in the target the value goes; empty or None: all of it
        st = u.arg[0] if isinstance(u.arg, tuple) and u.arg else (u.arg if u.arg is not None and not isinstance(u.arg, tuple) else None)
        vals[u] = _Assigned(st, vals[u.src[1]])
      elif op is Ops.EMPTY: vals[u] = None
      elif op is Ops.REDUCE_AXIS:
        rop, axes = u.arg
        x = vals[u.src[0]]
        vals[u] = _reduce(rop, x, tuple(axes), u.dtype)
      elif op is Ops.CAST: vals[u] = _cast(vals[u.src[0]], u.src[0].dtype, u.dtype)
      elif op is Ops.BITCAST: vals[u] = _bitcast(vals[u.src[0]], u.src[0].dtype, u.dtype)
      elif op in GroupOp.ALU: vals[u] = np.asarray(I._alu(op, u.dtype, [vals[s] for s in u.src])).astype(_vt(u.dtype), copy=False)
      else: raise Unsupported(f"the reference cannot evaluate {op} nodes")
  return written, undefined

def _fit(flat: np.ndarray, buf: np.ndarray) -> np.ndarray:
  """The buffer's new contents: the value's elements, row-major (a value smaller than its buffer fills its start)."""
  new = buf.copy()
  n = min(flat.size, new.size)
  new[:n] = flat[:n]
  return new

# *** where a kernel's outputs hang on a float decision ***

# about 4 ULP of half; 1 to 2 of bfloat16 (float32 arithmetic between exact roundings: at most a rounding flip apart);
# others: 2^-16 (about 128 ULP of a float32)
TIE_RTOL = {"half": 2.0 ** -8, "bfloat16": 2.0 ** -7}

def _near(a: np.ndarray, b: np.ndarray, dtype) -> np.ndarray:
  """Operands of a float comparison close enough that a device rounding differently may decide it the other way."""
  rtol = TIE_RTOL.get(dtype.scalar().name, 2.0 ** -16)
  a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
  return np.abs(a64 - b64) <= rtol * np.maximum(np.abs(a64), np.abs(b64)) + 1e-30

def uncertain_outputs(ast: UOp, bufs: list[np.ndarray], var_vals: dict[UOp, int]) -> dict[int, np.ndarray] | None:
  """For a kernel AST (DEFINE_GLOBAL i is bufs[i]): per stored buffer, the elements whose value depends on a float
  comparison of near-equal operands or a float -> int cast next to an integer boundary. Those are undecidable by a
  reference that rounds differently from the device (max-pool's backward compares a recomputed value with a stored
  max for equality). Evaluated with numpy, values and doubt side by side; None when a view exceeds ELEMENT_BUDGET."""
  vals: dict[UOp, Any] = {}
  doubt: dict[UOp, Any] = {}
  out: dict[int, np.ndarray] = {}
  topo = ast.toposort()
  if any(u.op is Ops.VIEW and _shape_size(u.arg, var_vals) > ELEMENT_BUDGET for u in topo): return None
  with np.errstate(all="ignore"):
    for u in topo:
      op = u.op
      if op in (Ops.SINK, Ops.DEFINE_GLOBAL, Ops.DEFINE_VAR, Ops.VIEW): continue
      d = np.zeros((), np.bool_)
      for s in u.src:
        if s in doubt: d = d | doubt[s]
      if op is Ops.CONST: vals[u] = _const(u)
      elif op is Ops.BIND: vals[u] = np.array(u.src[1].arg, dtype=_np(u.dtype))
      elif op is Ops.VALID: vals[u] = _valid(u.src[0].arg, var_vals)
      elif op is Ops.LOAD: vals[u] = _from_mem(_view(u.src[1].arg, bufs[u.src[0].arg], var_vals), u.dtype)
      elif op is Ops.STORE:
        shape = tuple(int(sym_infer(s, var_vals)) for s in u.src[1].arg.shape)
        _, idx, valid = _positions(u.src[1].arg, var_vals)
        m = out.setdefault(u.src[0].arg, np.zeros(bufs[u.src[0].arg].shape, np.bool_))
        if m.size: m[idx[valid]] |= np.broadcast_to(d, shape)[valid]
        continue
      elif op is Ops.REDUCE_AXIS:
        vals[u] = _reduce(u.arg[0], vals[u.src[0]], tuple(u.arg[1]), u.dtype)
        if d.ndim: d = np.logical_or.reduce(np.broadcast_to(d, np.shape(vals[u.src[0]])), axis=tuple(u.arg[1]), keepdims=True)
      elif op is Ops.CAST:
        x = vals[u.src[0]]
        vals[u] = _cast(x, u.src[0].dtype, u.dtype)
        if dtypes.is_float(u.src[0].dtype) and not dtypes.is_float(u.dtype): d = d | _near(x, np.round(x), u.src[0].dtype)
      elif op is Ops.BITCAST: vals[u] = _bitcast(vals[u.src[0]], u.src[0].dtype, u.dtype)
      elif op in GroupOp.ALU:
        srcs = [vals[s] for s in u.src]
        vals[u] = np.asarray(I._alu(op, u.dtype, srcs)).astype(_vt(u.dtype), copy=False)
        if op in (Ops.CMPLT, Ops.CMPNE) and dtypes.is_float(u.src[0].dtype): d = d | _near(srcs[0], srcs[1], u.src[0].dtype)
        elif op in (Ops.IDIV, Ops.MOD) and dtypes.is_float(u.src[0].dtype):
          q = np.asarray(srcs[0], np.float64) / np.asarray(srcs[1], np.float64)
          d = d | _near(q, np.round(q), u.src[0].dtype)
        elif op is Ops.WHERE:  # the condition's doubt, and only the doubt of the branch taken
          c, t, f = u.src
          d = doubt.get(c, False) | np.where(vals[c], doubt.get(t, False), doubt.get(f, False))
      else: raise Unsupported(f"the reference cannot evaluate {op} nodes")
      if np.any(d): doubt[u] = d
  return out
