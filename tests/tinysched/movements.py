"""Random movement ops for the property tests of views (test_shape) and of the interpreter (test_interpreter), and
what each does to a numpy array."""
from __future__ import annotations
import math
import numpy as np
from hypothesis import strategies as st

MAX_ELEMS = 600  # keeps a drawn chain's arrays small

def np_apply(a: np.ndarray, op: str, arg, fill: int = 0) -> np.ndarray:
  """numpy's version of a movement op; pad fills with `fill` (0 reads like a masked position; a test may mark them)."""
  if op == "reshape": return a.reshape(arg)
  if op == "permute": return a.transpose(arg)
  if op == "expand": return np.broadcast_to(a, arg)
  if op == "pad": return np.pad(a, arg, constant_values=fill)
  if op == "shrink": return a[tuple(slice(b, e) for b, e in arg)]
  if op == "stride": return a[tuple(slice(None, None, m) for m in arg)]
  if op == "flip": return np.flip(a, arg) if arg else a
  raise ValueError(op)


def divisors(n: int) -> list[int]: return [d for d in range(1, n + 1) if n % d == 0]

@st.composite
def reshape_target(draw, shape: tuple[int, ...], min_dims: int = 0) -> tuple[int, ...]:
  n = math.prod(shape)
  k = draw(st.integers(max(min_dims, 0 if n == 1 else 1), 4))
  if n == 0:
    out = [draw(st.integers(1, 3)) for _ in range(max(k, 1))]
    out[draw(st.integers(0, len(out) - 1))] = 0
    return tuple(out)
  out, rem = [], n
  for _ in range(max(k - 1, 0)):
    d = draw(st.sampled_from(divisors(rem)))
    out.append(d)
    rem //= d
  if k: out.append(rem)
  order = draw(st.permutations(range(len(out))))
  return tuple(out[i] for i in order)

MAX_ELEMS = 600

@st.composite
def movement_op(draw, shape: tuple[int, ...], kind: str | None = None, max_elems: int = MAX_ELEMS, min_dims: int = 0):
  nd = len(shape)
  kinds = ["reshape", "reshape", "permute", "pad", "shrink", "flip", "stride"] + (["expand"] if 1 in shape else [])
  if kind is None: kind = draw(st.sampled_from(kinds))
  if nd == 0 and kind != "reshape": kind = "reshape"
  if kind == "reshape": return kind, draw(reshape_target(shape, min_dims))
  if kind == "permute": return kind, tuple(draw(st.permutations(range(nd))))
  if kind == "pad":
    arg = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in shape)
    if math.prod(s + b + e for s, (b, e) in zip(shape, arg)) > max_elems: return "flip", ()
    return kind, arg
  if kind == "shrink":
    arg = []
    for s in shape:
      b = draw(st.integers(0, s))
      arg.append((b, draw(st.integers(b, s))))
    return kind, tuple(arg)
  if kind == "flip": return kind, tuple(i for i in range(nd) if draw(st.booleans()))
  if kind == "stride": return kind, tuple(draw(st.sampled_from([1, 1, -1, 2, -2, 3, -3])) for _ in shape)
  new = tuple(draw(st.integers(1, 4)) if s == 1 else s for s in shape)
  if math.prod(new) > max_elems: return "flip", ()
  return "expand", new
