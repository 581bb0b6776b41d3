"""Smaller inputs for `replay minimize` (replay/triage/blame.py, against old code; replay/triage/reference.py, against the
reference): one value node replaced by one of its operands of the same dtype and shape, by a constant (1, or a value
found below it) or by a load of a fresh buffer of its shape, or one store dropped. A kernel AST (a program-level input)
keeps its loads: its buffers are the kernel's."""
from __future__ import annotations
import math, time
from typing import Any, Callable
from tinysched.dtype import dtypes
from tinysched.ops import Ops
from tinysched.shape import ShapeTracker, View
from tinysched.uop import UOp

def _shape(u) -> tuple | None:
  try: st = u.st
  except Exception: return None
  if st is None: return None
  shape = tuple(st.shape)
  return shape if all(isinstance(s, int) for s in shape) else None

def _constant(u, shape: tuple, value: Any = None):
  d = u.dtype
  one = True if d == dtypes.bool else (1.0 if dtypes.is_float(d) else 1)
  zero = False if d == dtypes.bool else (0.0 if dtypes.is_float(d) else 0)
  scalar = UOp(Ops.VIEW, dtypes.void, (), ShapeTracker.from_shape(()))
  one = one if value is None else value
  value = UOp(Ops.WHERE, d, (UOp(Ops.VALID, dtypes.bool, (scalar,)), UOp(Ops.CONST, d, (), one), UOp(Ops.CONST, d, (), zero)))
  return UOp(Ops.VIEW, d, (value,), ShapeTracker((View.create(shape, (0,) * len(shape)),)))

def _fresh_load(u, shape: tuple, number: int, device: str):
  buf = UOp(Ops.BUFFER, u.dtype.ptr(), (), (number, (device, max(math.prod(shape), 1), u.dtype)))
  return UOp(Ops.VIEW, u.dtype, (buf,), ShapeTracker.from_shape(shape))

def _kernel_constant(u, shape: tuple, value: Any = None):
  """A constant of `u`'s dtype over `shape` as a kernel AST writes one: WHERE(VALID(view), c, 0)."""
  d = u.dtype
  one = True if d == dtypes.bool else (1.0 if dtypes.is_float(d) else 1)
  zero = False if d == dtypes.bool else (0.0 if dtypes.is_float(d) else 0)
  view = UOp(Ops.VIEW, dtypes.void, (), ShapeTracker((View.create(shape, (0,) * len(shape)),)))
  c = UOp(Ops.CONST, d, (), one if value is None else value)
  return UOp(Ops.WHERE, d, (UOp(Ops.VALID, dtypes.bool, (view,)), c, UOp(Ops.CONST, d, (), zero)))

def _kernel_candidates(ast) -> list:
  """Smaller kernel ASTs (a program-level input): one value node replaced by one of its operands of the same dtype and
  shape or by a constant of its shape, or one store of the SINK dropped. Loads stay (their buffers are the kernel's)."""
  topo = list(ast.toposort())
  out = []
  if ast.op is Ops.SINK and len(ast.src) > 1: out += [ast.replace(src=ast.src[:i] + ast.src[i + 1:]) for i in range(len(ast.src))]
  for u in topo:
    if u.op in (Ops.SINK, Ops.STORE, Ops.LOAD, Ops.CONST, Ops.DEFINE_GLOBAL, Ops.DEFINE_VAR, Ops.VALID, Ops.VIEW): continue
    if u.dtype.name == "void" or (shape := _shape(u)) is None: continue
    if u.op is Ops.WHERE and u.src[0].op is Ops.VALID and all(s.op is Ops.CONST for s in u.src[1:]): continue  # already a constant
    kids = [c for c in u.src if c.dtype == u.dtype and _shape(c) == shape]
    values = sorted({c.arg for c in u.toposort() if c.op is Ops.CONST and c.dtype == u.dtype and c.arg not in (0, 1)}, key=repr)
    for repl in (*kids, _kernel_constant(u, shape), *(_kernel_constant(u, shape, v) for v in values)):
      if u in repl.toposort(): continue
      out.append(ast.substitute({u: repl}))
  return out

def candidates(pre) -> list:
  """Smaller inputs (a pre-sink or a big graph): one value node replaced (by an operand, a constant, a fresh buffer load),
  or one entry of the SINK dropped. A kernel AST (a program-level input): _kernel_candidates."""
  topo = list(pre.toposort())
  if any(u.op is Ops.DEFINE_GLOBAL for u in topo): return _kernel_candidates(pre)
  bufs = [u for u in topo if u.op is Ops.BUFFER]
  number = 1 + max((b.arg[0] for b in bufs), default=-1)
  device = bufs[0].arg[1][0] if bufs else "NUMPY"
  out = []
  if pre.op is Ops.SINK and len(pre.src) > 1:
    out += [pre.replace(src=pre.src[:i] + pre.src[i + 1:]) for i in range(len(pre.src))]
  stores = {s for s in pre.src if s.op is Ops.STORE} if pre.op is Ops.SINK else set()
  for u in topo:
    if u.op in (Ops.SINK, Ops.STORE, Ops.BUFFER, Ops.CONST, Ops.DEFINE_VAR, Ops.BIND, Ops.VALID) or u in stores: continue
    if u.op is Ops.VIEW and (not u.src or (len(u.src) == 1 and u.src[0].op is Ops.BUFFER)): continue  # already a leaf
    if u.dtype.name == "void" or (shape := _shape(u)) is None: continue
    # one of its own operands of the same dtype and shape in its place (keeps what is below, drops the node), or a leaf
    kids = [c for c in u.src if c.dtype == u.dtype and c.op is not Ops.BUFFER and _shape(c) == shape]
    # constants: 1, and each value a constant below it has (a change about constants keeps showing)
    values = sorted({c.arg for c in u.toposort() if c.op is Ops.CONST and c.dtype == u.dtype and c.arg not in (0, 1)}, key=repr)
    consts = [_constant(u, shape)] + [_constant(u, shape, v) for v in values]
    for repl in (*kids, *consts, _fresh_load(u, shape, number, device)):
      if u in repl.toposort(): continue  # no smaller: the node itself is part of it
      out.append(pre.substitute({u: repl}))
  return out

def greedy(pre: UOp, data: bytes, encode: Callable[[UOp], bytes | None], fails: Callable[[bytes], bool | None], deadline: float,
           progress: Callable[[str], None] | None = None) -> tuple[UOp, bytes, int, int]:
  """Greedy delta debugging from input `pre` (encoded `data`): the smallest candidate first, the first that still fails
  the same way (`fails(enc)`: True; False: it fails another way; None: it does not fail) replaces the input, until no
  candidate does or `deadline` (perf_counter) passes. (input, its encoding, candidates tried, candidates that failed
  another way)."""
  cur, cur_enc, tried, other = pre, data, 0, 0
  improved = True
  while improved and time.perf_counter() < deadline:
    improved = False
    for cand in sorted(candidates(cur), key=lambda c: (len(c.toposort()), c.key)):
      if time.perf_counter() >= deadline: break
      if len(cand.toposort()) >= len(cur.toposort()) or (enc := encode(cand)) is None: continue
      tried += 1
      if (got := fails(enc)) is False: other += 1
      elif got:
        cur, cur_enc, improved = cand, enc, True
        if progress: progress(f"  {len(cur.toposort())} nodes")
        break
  return cur, cur_enc, tried, other
