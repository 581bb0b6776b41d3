"""UOp integer expressions as z3 formulas, with the semantics the device computes: fixed-width two's-complement
integers that wrap around (z3 bit-vectors of the dtype's width), C-style truncating `//` and `%` (the sign of `%`
follows the dividend), and this compiler's own convention for a zero divisor (the result is 0, as in
tinysched.uop's constant folding). Booleans are z3 Bools. Variables (DEFINE_VAR), loop counters (RANGE) and thread
ids (SPECIAL) become free variables constrained to their ranges; any other node (a load, a float) becomes an opaque
free variable of its dtype, shared wherever the same node appears, so two expressions over it compare soundly.
`IntEncoding` states the same semantics over unbounded integers (each value itself, reduced modulo 2**bits where it may
leave its dtype): linear arithmetic, which z3 decides in milliseconds where a divider circuit of bit-vectors times out.
"""
from __future__ import annotations
from dataclasses import dataclass, field
from typing import Any
from tinysched.dtype import DType, dtypes
from tinysched.ops import Ops
from tinysched.uop import UOp

try: import z3  # optional: the `proofs` extra (pip install z3-solver)
except ImportError: z3 = None

def available() -> bool: return z3 is not None

class Unsupported(Exception):
  """An expression this translation cannot state (a float op inside integer arithmetic, an unknown op)."""

def _bits(d: DType) -> int: return 8 * d.itemsize

def _signed(d: DType) -> bool: return d not in (dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64)

@dataclass
class Encoding:
  """The z3 terms of a set of expressions: `terms[u]`, the range constraints of their free variables (`facts`), and the
  free variables by a readable name (for counterexamples)."""
  terms: dict[UOp, Any] = field(default_factory=dict)
  facts: list[Any] = field(default_factory=list)
  free: dict[str, Any] = field(default_factory=dict)
  unsigned: set[str] = field(default_factory=set)  # free variables of an unsigned dtype (a counterexample shows them so)

  def add(self, root: UOp) -> Any:
    for u in root.toposort():
      if u not in self.terms: self.terms[u] = self._one(u)
    return self.terms[root]

  def _var(self, u: UOp, name: str) -> Any:
    base, n = name, 1
    while name in self.free: name, n = f"{base}#{n}", n + 1
    v = z3.Bool(name) if u.dtype == dtypes.bool else z3.BitVec(name, _bits(u.dtype))
    self.free[name] = v
    if u.dtype != dtypes.bool and not _signed(u.dtype): self.unsigned.add(name)
    return v

  def _in_range(self, u: UOp, v: Any, lo: Any, hi: Any) -> None:
    """lo <= v <= hi (bounds as ints or terms), compared with the dtype's signedness."""
    le = (lambda a, b: a <= b) if _signed(u.dtype) else z3.ULE
    for a, b in ((lo, v), (v, hi)):
      self.facts.append(le(self._as(a, u.dtype), self._as(b, u.dtype)))

  def _as(self, x: Any, d: DType) -> Any:
    # a bound outside the dtype (a launch size past 2**31 for an int32 id) is clamped to it: the variable holds only
    # values of its dtype, and a wrapped bound would state a contradiction that makes every claim vacuously true
    if isinstance(x, int): return z3.BitVecVal(min(max(x, int(dtypes.min(d))), int(dtypes.max(d))), _bits(d))
    return x

  def _one(self, u: UOp) -> Any:
    op, d, t = u.op, u.dtype, self.terms
    if op is Ops.CONST:
      if d == dtypes.bool: return z3.BoolVal(bool(u.arg))
      if not dtypes.is_int(d): return self._var(u, f"const_{u.arg}")  # a float constant: opaque, equal to itself
      return z3.BitVecVal(int(u.arg), _bits(d))
    if op is Ops.DEFINE_VAR:
      v = self._var(u, str(u.arg[0]))
      self._in_range(u, v, int(u.arg[1]), int(u.arg[2]))
      return v
    if op is Ops.BIND: return t[u.src[0]]
    if op is Ops.RANGE:
      v = self._var(u, f"r{u.arg}" if not isinstance(u.arg, tuple) else "r_" + "_".join(map(str, u.arg)))
      lt = (lambda a, b: a < b) if _signed(d) else z3.ULT
      self.facts += [(lambda a, b: a <= b) (t[u.src[0]], v) if _signed(d) else z3.ULE(t[u.src[0]], v), lt(v, t[u.src[1]])]
      return v
    if op is Ops.SPECIAL:
      v = self._var(u, str(u.arg[0]))
      bound = u.arg[1]
      self._in_range(u, v, 0, (bound - 1) if isinstance(bound, int) else self.add(bound) - 1)
      return v
    if op not in _ALU or not (dtypes.is_int(d) or d == dtypes.bool) or \
       any(not (dtypes.is_int(s.dtype) or s.dtype == dtypes.bool) for s in u.src):
      return self._var(u, f"{op.name.lower()}_{len(self.free)}")  # opaque: a load, a float, an op without integer semantics
    return _ALU[op](u, [t[s] for s in u.src])

def _div(u: UOp, a: Any, b: Any) -> Any:
  q = (a / b) if _signed(u.src[0].dtype) else z3.UDiv(a, b)  # bit-vector `/` is signed and truncates, as C does
  return z3.If(b == 0, z3.BitVecVal(0, a.size()), q)

def _mod(u: UOp, a: Any, b: Any) -> Any:
  r = z3.SRem(a, b) if _signed(u.src[0].dtype) else z3.URem(a, b)  # SRem: the sign of the dividend, as C's %
  return z3.If(b == 0, z3.BitVecVal(0, a.size()), r)

def _lt(u: UOp, a: Any, b: Any) -> Any:
  if u.src[0].dtype == dtypes.bool: return z3.And(z3.Not(a), b)
  return (a < b) if _signed(u.src[0].dtype) else z3.ULT(a, b)

def _cast(u: UOp, a: Any) -> Any:
  src, dst = u.src[0].dtype, u.dtype
  if dst == dtypes.bool: return a if src == dtypes.bool else a != 0
  w = _bits(dst)
  if src == dtypes.bool: return z3.If(a, z3.BitVecVal(1, w), z3.BitVecVal(0, w))
  sw = _bits(src)
  if w == sw: return a
  if w < sw: return z3.Extract(w - 1, 0, a)
  return z3.SignExt(w - sw, a) if _signed(src) else z3.ZeroExt(w - sw, a)

def _bool_or_bits(f_bool, f_bits):
  return lambda u, s: f_bool(*s) if u.dtype == dtypes.bool else f_bits(*s)

_ALU: dict[Ops, Any] = {
  Ops.ADD: lambda u, s: s[0] + s[1], Ops.MUL: lambda u, s: s[0] * s[1],
  Ops.NEG: lambda u, s: z3.Not(s[0]) if u.dtype == dtypes.bool else -s[0],
  Ops.IDIV: lambda u, s: _div(u, *s), Ops.MOD: lambda u, s: _mod(u, *s),
  Ops.MAX: lambda u, s: z3.Or(*s) if u.dtype == dtypes.bool else z3.If(_lt(u, s[0], s[1]), s[1], s[0]),
  Ops.CMPLT: lambda u, s: _lt(u, *s), Ops.CMPNE: lambda u, s: s[0] != s[1],
  Ops.AND: _bool_or_bits(lambda a, b: z3.And(a, b), lambda a, b: a & b),
  Ops.OR: _bool_or_bits(lambda a, b: z3.Or(a, b), lambda a, b: a | b),
  Ops.XOR: _bool_or_bits(lambda a, b: z3.Xor(a, b), lambda a, b: a ^ b),
  Ops.SHL: lambda u, s: s[0] << s[1], Ops.SHR: lambda u, s: (s[0] >> s[1]) if _signed(u.dtype) else z3.LShR(s[0], s[1]),
  Ops.WHERE: lambda u, s: z3.If(*s), Ops.CAST: lambda u, s: _cast(u, s[0]),
  Ops.MULACC: lambda u, s: s[0] * s[1] + s[2],
}

@dataclass
class Verdict:
  """`proven` (for every value of the free variables in their ranges), `counterexample` (`values` names one, with
  both sides' results in `lhs`/`rhs`) or `unknown` (`reason`: the solver's time-out or an expression it cannot state)."""
  status: str
  values: dict[str, int | bool] = field(default_factory=dict)
  lhs: Any = None
  rhs: Any = None
  reason: str | None = None

def _value(m: Any, e: Any, signed: bool = True) -> int | bool:
  v = m.eval(e, model_completion=True)
  if z3.is_true(v) or z3.is_false(v): return bool(z3.is_true(v))
  if z3.is_int_value(v): return v.as_long()  # IntEncoding: the value itself, already in its dtype's range
  return v.as_signed_long() if signed else v.as_long()

def prove(claim: Any, enc: Encoding, timeout_ms: int = 10_000, show: dict[str, tuple[Any, bool]] | None = None) -> Verdict:
  """Prove `claim` (a z3 Bool over `enc`'s terms) under `enc.facts`. `show`: terms to evaluate in a counterexample
  ({label: (term, signed)}), e.g. the two sides of an equation."""
  # an IntEncoding's small linear problems: the plain SMT core answers in half the time of the default solver's
  # set-up; bit-vectors keep the default (its preprocessing tactics suit bit-blasting)
  s = z3.SimpleSolver() if isinstance(enc, IntEncoding) else z3.Solver()
  s.set("timeout", timeout_ms)
  s.add(*enc.facts)
  # ranges that contradict each other would prove anything: only a claim over values that exist is proven
  if (r := s.check()) != z3.sat:
    why = "the ranges of its free variables contradict each other" if r == z3.unsat else f"the solver gave up ({s.reason_unknown()})"
    return Verdict("unknown", reason=f"nothing to prove: {why}")
  s.add(z3.Not(claim))
  r = s.check()
  if r == z3.unsat: return Verdict("proven")
  if r == z3.unknown: return Verdict("unknown", reason=f"the solver gave up ({s.reason_unknown()}; time-out {timeout_ms} ms)")
  m = s.model()
  values = {name: _value(m, v, name not in enc.unsigned) for name, v in sorted(enc.free.items()) if m.eval(v, model_completion=False) is not None}
  shown = {k: _value(m, t, sg) for k, (t, sg) in (show or {}).items()}
  return Verdict("counterexample", values, shown.get("before"), shown.get("after"))

def prove_equal(before: UOp, after: UOp, timeout_ms: int = 10_000, encoding: str = "bv") -> Verdict:
  """`after` computes what `before` computes, for every value of their free variables in range (same dtype).
  `encoding`: "bv" (bit-vectors), "int" (IntEncoding: linear integer arithmetic, much faster where a sum is divided by a
  constant; no bitwise ops) or "auto" (int, then bv where int cannot state the expressions or the solver gave up)."""
  if z3 is None: return Verdict("unknown", reason="z3 is not installed (pip install z3-solver)")
  if encoding == "auto":
    v = prove_equal(before, after, timeout_ms, "int")
    return v if v.status != "unknown" else prove_equal(before, after, timeout_ms, "bv")
  if encoding == "int" and before.dtype != after.dtype:  # (Int terms of two int dtypes share a sort; an Int and a Bool fail `a == b`)
    return Verdict("counterexample", reason=f"the two sides have different types ({before.dtype} and {after.dtype})")
  enc = IntEncoding() if encoding == "int" else Encoding()
  try: a, b = enc.add(before), enc.add(after)
  except Unsupported as e: return Verdict("unknown", reason=str(e))
  if (a.sort() != b.sort()):
    return Verdict("counterexample", reason=f"the two sides have different types ({before.dtype} and {after.dtype})")
  sg = _signed(before.dtype)
  return prove(a == b, enc, timeout_ms, {"before": (a, sg), "after": (b, sg)})

def prove_bounds(u: UOp, lo: Any, hi: Any, timeout_ms: int = 10_000, encoding: str = "bv") -> Verdict:
  """lo <= u <= hi for every value of u's free variables in range (ints in u's dtype's order; for a bool, lo == hi
  claims that value, False/True claims nothing). `encoding` as in prove_equal. A counterexample's `lhs` is u's value."""
  if z3 is None: return Verdict("unknown", reason="z3 is not installed (pip install z3-solver)")
  if encoding == "auto":
    v = prove_bounds(u, lo, hi, timeout_ms, "int")
    return v if v.status != "unknown" else prove_bounds(u, lo, hi, timeout_ms, "bv")
  enc = IntEncoding() if encoding == "int" else Encoding()
  try: t = enc.add(u)
  except Unsupported as e: return Verdict("unknown", reason=str(e))
  if u.dtype == dtypes.bool: claim = (t == z3.BoolVal(bool(lo))) if bool(lo) == bool(hi) else z3.BoolVal(True)
  elif encoding == "int": claim = z3.And(lo <= t, t <= hi)
  else:
    le = (lambda a, b: a <= b) if _signed(u.dtype) else z3.ULE
    claim = z3.And(le(z3.BitVecVal(int(lo), t.size()), t), le(t, z3.BitVecVal(int(hi), t.size())))
  return prove(claim, enc, timeout_ms, {"before": (t, _signed(u.dtype))})

# *** the same semantics over mathematical integers ***

def _wrap_int(t: Any, d: DType) -> Any:
  """t reduced to d's range as the hardware wraps it: modulo 2**bits, into [min, max]."""
  m = 1 << _bits(d)
  return t % m if not _signed(d) else (t + m // 2) % m - m // 2  # z3's Int `%` is never negative for m > 0

def _tdiv_int(a: Any, b: Any, signed: bool) -> Any:
  """C's truncating a / b for b != 0, not wrapped (z3's Int `/` floors for a positive divisor)."""
  if not signed: return a / b  # both non-negative
  if z3.is_int_value(b):
    c = b.as_long()
    q = z3.If(a >= 0, a / abs(c), -((-a) / abs(c)))
    return q if c > 0 else -q
  q = z3.If(a >= 0, a, -a) / z3.If(b >= 0, b, -b)
  return z3.If((a >= 0) == (b >= 0), q, -q)

def _tdiv_range(lo: int, hi: int, c: int) -> tuple[int, int]:
  qs = [abs(x) // abs(c) * (1 if (x >= 0) == (c > 0) else -1) for x in (lo, hi)]  # monotone in x for a fixed c
  return min(qs), max(qs)

class IntEncoding(Encoding):
  """The semantics of `Encoding` stated over z3's unbounded integers: every integer term is the value itself (in its
  dtype's range), and an op whose exact result may leave that range is reduced modulo 2**bits. Whether it may is
  decided by this class's own interval arithmetic (`iv`, independent of UOp.vmin/vmax, which the rules under proof use);
  where unsure it wraps, which is always exact. Linear arithmetic with division by constants is decidable and z3 solves
  it in milliseconds where a 32-bit divider circuit of the bit-vector form takes seconds. Bitwise ops (AND/OR/XOR of
  integers, shifts) are Unsupported here: the bit-vector form states them."""
  def __init__(self) -> None:
    super().__init__()
    self.iv: dict[UOp, tuple[int, int]] = {}

  def _var(self, u: UOp, name: str) -> Any:
    if u.dtype == dtypes.bool or not dtypes.is_int(u.dtype): return super()._var(u, name)
    base, n = name, 1
    while name in self.free: name, n = f"{base}#{n}", n + 1
    v = self.free[name] = z3.Int(name)
    return v

  def _bounded(self, u: UOp, name: str, lo: Any, hi: Any, iv: tuple[int, int] | None = None) -> Any:
    v = self._var(u, name)
    self.facts += [lo <= v, v <= hi]
    self.iv[u] = iv if iv is not None else (int(dtypes.min(u.dtype)), int(dtypes.max(u.dtype)))
    return v

  def _fit(self, u: UOp, t: Any, lo: int, hi: int) -> Any:
    d = u.dtype
    if dtypes.min(d) <= lo and hi <= dtypes.max(d):
      self.iv[u] = (lo, hi)
      return t
    self.iv[u] = (int(dtypes.min(d)), int(dtypes.max(d)))
    return _wrap_int(t, d)

  def _one(self, u: UOp) -> Any:
    op, d, t, iv = u.op, u.dtype, self.terms, self.iv
    if d == dtypes.bool:  # Bool terms are the bit-vector form's, but for an order of Int terms (the values' own)
      if op is Ops.CMPLT and dtypes.is_int(u.src[0].dtype): return t[u.src[0]] < t[u.src[1]]
      return super()._one(u)
    if not dtypes.is_int(d): return super()._one(u)  # a float: opaque, as in the bit-vector form
    if op is Ops.CONST:
      c = int(dtypes.as_const(int(u.arg), d))
      iv[u] = (c, c)
      return z3.IntVal(c)
    if op is Ops.DEFINE_VAR:
      lo, hi = int(u.arg[1]), int(u.arg[2])
      if not (dtypes.min(d) <= lo <= hi <= dtypes.max(d)): raise Unsupported(f"Variable {u.arg[0]!r}'s range [{lo}, {hi}] is not a range of {d}")
      return self._bounded(u, str(u.arg[0]), lo, hi, (lo, hi))
    if op is Ops.BIND:
      iv[u] = iv[u.src[0]]
      return t[u.src[0]]
    if op is Ops.RANGE:
      name = f"r{u.arg}" if not isinstance(u.arg, tuple) else "r_" + "_".join(map(str, u.arg))
      lo = iv[u.src[0]][0]
      return self._bounded(u, name, t[u.src[0]], t[u.src[1]] - 1, (lo, max(lo, iv[u.src[1]][1] - 1)))
    if op is Ops.SPECIAL:
      bound = u.arg[1]
      if isinstance(bound, int): return self._bounded(u, str(u.arg[0]), 0, bound - 1, (0, max(0, bound - 1)))
      return self._bounded(u, str(u.arg[0]), 0, self.add(bound) - 1)
    if op not in _ALU or any(not (dtypes.is_int(x.dtype) or x.dtype == dtypes.bool) for x in u.src): return self._opaque(u)
    s, ivs = [t[x] for x in u.src], [iv.get(x, (0, 1)) for x in u.src]  # (a bool source has no interval: 0 or 1)
    if op is Ops.ADD: return self._fit(u, s[0] + s[1], ivs[0][0] + ivs[1][0], ivs[0][1] + ivs[1][1])
    if op in (Ops.MUL, Ops.MULACC):
      ps = [a * b for a in ivs[0] for b in ivs[1]]
      add = ivs[2] if op is Ops.MULACC else (0, 0)
      return self._fit(u, s[0] * s[1] + s[2] if op is Ops.MULACC else s[0] * s[1], min(ps) + add[0], max(ps) + add[1])
    if op is Ops.NEG: return self._fit(u, -s[0], -ivs[0][1], -ivs[0][0])
    if op in (Ops.IDIV, Ops.MOD):
      sg = _signed(u.src[0].dtype)
      (alo, ahi), (blo, bhi) = ivs
      if blo == bhi == 0:
        iv[u] = (0, 0)
        return z3.IntVal(0)
      q = _tdiv_int(s[0], s[1], sg)  # not wrapped: only min // -1 leaves the range
      if blo == bhi:  # a constant divisor (its interval is one value): no zero case, exact bounds
        if op is Ops.IDIV: return self._fit(u, q, *_tdiv_range(alo, ahi, blo))
        m = abs(blo) - 1
        iv[u] = (-m if alo < 0 else 0, m if ahi > 0 else 0)
        return s[0] - s[1] * q
      if op is Ops.IDIV: r = self._fit(u, q, min(alo, -ahi), max(ahi, -alo)) if sg else self._fit(u, q, 0, ahi)  # |q| <= |a|
      else:
        m = max(abs(blo), abs(bhi))
        iv[u] = (max(alo, -m) if alo < 0 else 0, min(ahi, m) if ahi > 0 else 0)  # |r| < |b|, |r| <= |a|, the sign of a
        r = s[0] - s[1] * q
      return z3.If(s[1] == 0, 0, r)
    if op is Ops.MAX:
      iv[u] = (max(ivs[0][0], ivs[1][0]), max(ivs[0][1], ivs[1][1]))
      return z3.If(s[0] < s[1], s[1], s[0])
    if op is Ops.WHERE:
      iv[u] = (min(ivs[1][0], ivs[2][0]), max(ivs[1][1], ivs[2][1]))
      return z3.If(*s)
    if op is Ops.CAST:  # two's complement truncation and sign/zero extension keep the value modulo 2**bits
      return self._fit(u, z3.If(s[0], 1, 0) if u.src[0].dtype == dtypes.bool else s[0], *ivs[0])
    raise Unsupported(f"{op.name} of {d} has no integer-arithmetic form (the bit-vector encoding states it)")

  def _opaque(self, u: UOp) -> Any:
    """Any value of its dtype, the same wherever the node appears (a load, an op without integer semantics)."""
    name = f"{u.op.name.lower()}_{len(self.free)}"
    if u.dtype == dtypes.bool: return super()._var(u, name)
    return self._bounded(u, name, dtypes.min(u.dtype), dtypes.max(u.dtype))
