"""The view algebra proven (DESIGN.md §4, §9): what tinysched.shape makes of a chain of movement ops gives, for every
index in range and every value of the Variables, the (index, valid) the chain means.

The meaning is stated here, independently of shape.py: each movement op maps an output position to an input position
(numpy's semantics: reshape re-ravels row-major, permute reorders, expand reads index 0 of a size-1 dim, pad shifts and
is valid only inside the original extent, shrink shifts, flip reverses, stride m takes every m-th element), and the
buffer position is the row-major position in the base shape. No View, mask or stride of shape.py is read.

Each case of the deterministic corpus `CASES` (merges, splits, permutes, expands, pads, shrinks, flips, strides,
symbolic shapes with Variables) is checked in up to four forms of its tracker, each against that meaning:
- `moved`: the chain applied with ShapeTracker's movement ops (a reshape merges or splits dims inside the last view,
  or pushes a view);
- `stacked`: the unsimplified composition, one view per op (each op on a fresh contiguous view), never merged;
- `merged`: `stacked.simplify()`, the merge step (View.__add__, shape._compose, minify);
- `composed`: for a case split in two chains, `first + second` (ShapeTracker.__add__, which merges after each push).
A form identical to an earlier one is proven once, named by both (`moved=merged`: the merge step gave what the movement
ops gave). The index expressions are the code generator's own: the tracker
with 64-bit entries (lowerer.wide_st) indexed by 64-bit RANGEs (`to_indexed_uops`), as lowerer.view_sym builds them.
Claim: valid equal everywhere, index equal where valid.
"""
from __future__ import annotations
from dataclasses import dataclass
from typing import Any
from tinysched.dtype import dtypes
from tinysched.ops import Ops
from tinysched.uop import UOp, Variable
from tinysched.shape import ShapeTracker, View
from tinysched.codegen.lowerer import wide, wide_st
from replay.prove import smt
from replay.prove.smt import z3

@dataclass
class ViewProof:
  """One case in one form: `proven`, `counterexample` (the indices and Variables, both sides' index and validity) or
  `unknown` (`reason`)."""
  case: str
  status: str
  counterexample: dict | None
  reason: str | None

IDX = dtypes.int64
_V = Variable("v", 1, 8)
_W = Variable("w", 2, 6)

# (name, base shape, ops[, ops applied on top by `+`]); an op is (kind, arg)
CASES: list[tuple] = [
  ("split", (12,), [("reshape", (3, 4))]),
  ("merge", (3, 4), [("reshape", (12,))]),
  ("split_merge", (2, 3, 4), [("reshape", (6, 4)), ("reshape", (2, 12))]),
  ("permute_flatten", (3, 4), [("permute", (1, 0)), ("reshape", (12,))]),
  ("permute_merge_inner", (2, 3, 4), [("permute", (0, 2, 1)), ("reshape", (2, 12))]),
  ("permute_split", (6, 4), [("permute", (1, 0)), ("reshape", (2, 2, 3, 2))]),
  ("expand_flatten", (3, 1), [("expand", (3, 4)), ("reshape", (12,))]),
  ("expand_permute", (1, 5), [("expand", (4, 5)), ("permute", (1, 0)), ("reshape", (2, 10))]),
  ("pad", (4, 4), [("pad", ((1, 1), (2, 0)))]),
  ("pad_flatten", (4, 4), [("pad", ((1, 1), (2, 0))), ("reshape", (36,))]),
  ("pad_split", (8,), [("pad", ((0, 4),)), ("reshape", (3, 4))]),
  ("pad_split_unaligned", (7,), [("pad", ((1, 0),)), ("reshape", (2, 4))]),
  ("shrink_flatten", (6, 6), [("shrink", ((1, 5), (2, 6))), ("reshape", (16,))]),
  ("pad_shrink", (8,), [("pad", ((2, 3),)), ("shrink", ((1, 12),))]),
  ("shrink_pad_shrink", (5, 5), [("shrink", ((1, 4), (0, 5))), ("pad", ((2, 2), (1, 1))), ("shrink", ((1, 6), (0, 6)))]),
  ("flip_flatten", (5, 3), [("flip", (0,)), ("reshape", (15,))]),
  ("flip_both", (4, 3), [("flip", (0, 1)), ("reshape", (3, 4))]),
  ("stride", (10,), [("stride", (3,))]),
  ("stride_neg", (6, 4), [("stride", (2, -1)), ("reshape", (12,))]),
  ("pool", (6,), [("reshape", (1, 6)), ("expand", (3, 6)), ("reshape", (18,)), ("shrink", ((0, 14),)), ("reshape", (2, 7)),
                  ("shrink", ((0, 2), (0, 4)))]),
  # a sliding window (pooling, convolution): pad, repeat each row 3 times, re-ravel with one extra element per repeat
  ("conv_window", (5, 5), [("pad", ((1, 1), (1, 1))), ("reshape", (7, 1, 7)), ("expand", (7, 3, 7)), ("reshape", (7, 21)),
                           ("pad", ((0, 0), (0, 3))), ("reshape", (7, 3, 8)), ("shrink", ((0, 7), (0, 3), (0, 5)))]),
  ("transpose_pad_transpose", (3, 5), [("permute", (1, 0)), ("pad", ((0, 1), (2, 0))), ("permute", (1, 0)), ("reshape", (30,))]),
  ("compose_pad_then_flatten", (4, 3), [("pad", ((1, 0), (0, 1)))], [("permute", (1, 0)), ("reshape", (20,))]),
  ("compose_permute_then_split", (4, 6), [("permute", (1, 0))], [("reshape", (2, 3, 4)), ("shrink", ((0, 2), (1, 3), (0, 4)))]),
  ("compose_shrink_then_expand", (4, 1), [("shrink", ((1, 3), (0, 1)))], [("expand", (2, 5)), ("reshape", (10,))]),
  # symbolic: v in [1, 8], w in [2, 6]
  ("sym_flatten", (_V, 4), [("reshape", (_V * 4,))]),
  ("sym_kv_read", (8, 4), [("shrink", ((0, _V), (0, 4))), ("reshape", (_V * 4,))]),
  ("sym_kv_offset", (16, 4), [("shrink", ((_V, _V + 8), (0, 4)))]),
  ("sym_pad", (_V, 3), [("pad", ((1, 1), (0, 0)))]),
  ("sym_permute_flatten", (_V, 4), [("permute", (1, 0)), ("reshape", (4 * _V,))]),
  ("sym_flip", (_V, 2), [("flip", (0,))]),
  ("sym_expand", (1, 4), [("expand", (_V, 4)), ("permute", (1, 0))]),
  ("sym_two_vars", (_V, _W), [("permute", (1, 0)), ("pad", ((0, 1), (1, 0)))]),
  ("compose_sym_shrink_then_permute", (8, 5), [("shrink", ((0, _V), (1, 5)))], [("permute", (1, 0)), ("reshape", (4 * _V,))]),
]

# *** the meaning of a chain, stated without shape.py ***

def _shapes(base: tuple, ops: list) -> list[tuple]:
  """The shape before each op, and the final one."""
  out, cur = [tuple(base)], tuple(base)
  for kind, arg in ops:
    if kind == "reshape": cur = tuple(arg)
    elif kind == "permute": cur = tuple(cur[o] for o in arg)
    elif kind == "expand": cur = tuple(arg)
    elif kind == "pad": cur = tuple(s + b + e for s, (b, e) in zip(cur, arg))
    elif kind == "shrink": cur = tuple(e - b for b, e in arg)
    elif kind == "flip": pass
    elif kind == "stride": cur = tuple(s if abs(m) == 1 else (s + abs(m) - 1) // abs(m) for s, m in zip(cur, arg))
    else: raise ValueError(f"unknown movement op {kind!r}")
    out.append(cur)
  return out

class _Ref:
  """z3 terms of the chain's meaning (64-bit), over the Encoding's own variables (the same RANGEs and Variables)."""
  def __init__(self, enc: smt.Encoding): self.enc = enc
  def n(self, x: Any) -> Any:
    if isinstance(x, int): return z3.BitVecVal(x, 64)
    t = self.enc.add(x)
    return z3.SignExt(64 - t.size(), t) if t.size() < 64 else t
  def ravel(self, idx: list, shape: tuple) -> Any:
    flat = z3.BitVecVal(0, 64)
    for i, s in zip(idx, shape): flat = flat * self.n(s) + i
    return flat
  def unravel(self, flat: Any, shape: tuple) -> list:
    out = []
    for s in reversed(shape):
      out.append(z3.SRem(flat, self.n(s)))
      flat = flat / self.n(s)
    return list(reversed(out))
  def meaning(self, base: tuple, ops: list, idx: list) -> tuple[Any, Any]:
    """(buffer position, valid) of output position `idx` (terms) after `ops` on a contiguous buffer of shape `base`."""
    shapes = _shapes(base, ops)
    valid = z3.BoolVal(True)
    for (kind, arg), old in reversed(list(zip(ops, shapes[:-1]))):
      if kind == "reshape": idx = self.unravel(self.ravel(idx, tuple(arg)), old)
      elif kind == "permute":
        inv = [None] * len(arg)
        for k, o in enumerate(arg): inv[o] = idx[k]
        idx = inv
      elif kind == "expand": idx = [z3.BitVecVal(0, 64) if isinstance(s, int) and s == 1 else i for i, s in zip(idx, old)]
      elif kind == "pad":
        valid = z3.And(valid, *[z3.And(i >= self.n(b), i < self.n(b) + self.n(s)) for i, s, (b, _) in zip(idx, old, arg)])
        idx = [i - self.n(b) for i, (b, _) in zip(idx, arg)]
      elif kind == "shrink": idx = [i + self.n(b) for i, (b, _) in zip(idx, arg)]
      elif kind == "flip": idx = [self.n(s) - 1 - i if k in arg else i for k, (i, s) in enumerate(zip(idx, old))]
      elif kind == "stride": idx = [i * m if m > 0 else self.n(s) - 1 + i * m for i, s, m in zip(idx, old, arg)]
    return self.ravel(idx, tuple(base)), valid

# *** the trackers shape.py makes ***

def _apply(st: ShapeTracker, ops: list) -> ShapeTracker:
  for kind, arg in ops: st = getattr(st, kind)(arg)
  return st

def _stacked(base: tuple, ops: list) -> ShapeTracker:
  """One view per op, nothing merged: a reshape pushes a contiguous view, any other op is that op on a contiguous view."""
  views = list(ShapeTracker.from_shape(tuple(base)).views)
  for kind, arg in ops:
    cur = views[-1].shape
    views.append(View.create(tuple(arg)) if kind == "reshape" else
                 View.create(cur).flip(tuple(arg)) if kind == "flip" else getattr(View.create(cur), kind)(arg))
  return ShapeTracker(tuple(views))

def forms(case: tuple) -> list[tuple[str, ShapeTracker]]:
  """The distinct trackers of a case: (form name, tracker)."""
  name, base, ops, *rest = case
  out: list[tuple[str, ShapeTracker]] = []
  def add(form: str, st: ShapeTracker) -> None:
    for k, (f, s) in enumerate(out):
      if st == s:  # the same tracker: proven once, named by every form that gives it
        out[k] = (f"{f}={form}", s)
        return
    out.append((form, st))
  add("moved", _apply(ShapeTracker.from_shape(tuple(base)), ops + (rest[0] if rest else [])))
  stacked = _stacked(base, ops + (rest[0] if rest else []))
  add("stacked", stacked)
  add("merged", stacked.simplify())
  if rest:
    first = _apply(ShapeTracker.from_shape(tuple(base)), ops)
    add("composed", first + _apply(ShapeTracker.from_shape(first.shape), rest[0]))
  return out

def prove_form(case: tuple, st: ShapeTracker, timeout_ms: int = 5000) -> tuple[str, dict | None, str | None]:
  """(status, counterexample, reason) of one tracker of `case` against the chain's meaning."""
  name, base, ops, *rest = case
  ops = ops + (rest[0] if rest else [])
  try:
    wst = wide_st(st)
    ranges = [UOp.const(IDX, 0) if isinstance(s, int) and s == 1 else UOp(Ops.RANGE, IDX, (UOp.const(IDX, 0), wide(s)), k)
              for k, s in enumerate(wst.shape)]
    idx, valid = wst.to_indexed_uops(ranges)
    enc = smt.Encoding()
    ci, cv = enc.add(idx), enc.add(valid)
    ref = _Ref(enc)
    ri, rv = ref.meaning(tuple(base), ops, [ref.n(r) for r in ranges])
  except smt.Unsupported as e: return "unknown", None, str(e)
  ci = z3.SignExt(64 - ci.size(), ci) if ci.size() < 64 else ci
  claim = z3.And(cv == rv, z3.Implies(rv, ci == ri))
  s = z3.Solver()
  s.set("timeout", timeout_ms)
  s.add(*enc.facts)
  s.add(z3.Not(claim))
  r = s.check()
  if r == z3.unsat: return "proven", None, None
  if r == z3.unknown: return "unknown", None, f"the solver gave up ({s.reason_unknown()}; time-out {timeout_ms} ms)"
  m = s.model()
  val = lambda t: smt._value(m, t)  # noqa: E731
  return "counterexample", {"values": {k: val(v) for k, v in sorted(enc.free.items())}, "tracker": {"index": val(ci), "valid": val(cv)},
                            "meaning": {"index": val(ri), "valid": val(rv)}, "views": st.stable_repr()}, None

def prove_views(timeout_ms: int = 5000, cases: list[tuple] | None = None) -> list[ViewProof]:
  """Every case of the corpus in each of its distinct forms."""
  if z3 is None: return [ViewProof("*", "unknown", None, "z3 is not installed (pip install z3-solver)")]
  out = []
  for case in (CASES if cases is None else cases):
    try: fs = forms(case)
    except Exception as e:  # noqa: BLE001 (shape.py refused the chain: a failing verdict with the reason, not a crash)
      out.append(ViewProof(case[0], "unknown", None, f"the tracker could not be built: {type(e).__name__}: {e}"))
      continue
    for form, st in fs:
      status, cex, reason = prove_form(case, st, timeout_ms)
      out.append(ViewProof(f"{case[0]} [{form}]", status, cex, reason))
  return out

__all__ = ["ViewProof", "prove_views", "prove_form", "forms", "CASES"]
