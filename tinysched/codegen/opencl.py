"""Rendering: a lowered kernel (linear UOps) becomes OpenCL C source.

The rules are a PatternMatcher from node shapes to C text (`opencl_rules`, named rules), applied in
program order. Semantics follow the NUMPY interpreter, which is the spec:
- IDIV/MOD are C-style; integer division or modulo by zero gives 0 (guarded unless the divisor is
  a non-zero constant); float IDIV is trunc(a/b), float MOD is fmod (0 for a zero divisor);
- MAX on floats propagates NaN like np.maximum (a select, not fmax, which drops NaNs);
- results of char/short ops are wrapped back to their type after every op (C would promote to int);
- bool buffers are `uchar` in memory (sizeof(bool) is implementation-defined in OpenCL C);
- double needs cl_khr_fp64: rendering for a target without it raises an error naming the device;
- half with cl_khr_fp16 (`Target.has_fp16`) is native `half` arithmetic. Without it, half is a storage format
  (core OpenCL): buffers are `half*`, read with vload_half and written with vstore_half_rte, values are floats,
  and every half-typed result that can be inexact is rounded to half (`ts_half_round`). Rounding each +, *, /, sqrt
  of half operands computed in float gives the correctly rounded half result (float has more than 2*11+2 bits), so
  the two paths and the interpreter (numpy's float16) agree;
- bfloat16 has no OpenCL C type: buffers are `ushort*`, a load widens the bits (`as_float(((uint)x)<<16)`), values
  are floats and arithmetic is float arithmetic, rounded to nearest even in integer arithmetic (NaN stays NaN:
  `ts_bf16_bits`) where a value becomes bfloat16: a store, a cast to or from it, a bitcast, a constant. These are
  the interpreter's rounding points (runtime/interpreter.py).
The `ts_` helper functions a kernel needs are defined before it, in a fixed order.
A value used once in the same loop is inlined into its user; everything else gets a named variable.
"""
from __future__ import annotations
import math
from typing import cast
import numpy as np
from tinysched.dtype import DType, dtypes, bf16_round
from tinysched.ops import Ops, GroupOp
from tinysched.uop import UOp
from tinysched.rewrite import UPat, PatternMatcher
from tinysched.codegen.lowerer import Lowered
from tinysched.codegen.target import Target

class UnsupportedDTypeError(RuntimeError):
  """The device cannot run a kernel with this dtype (missing extension)."""

_SMALL_INTS = (dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16)
_C_RESERVED = frozenset("""auto break case char const continue default do double else enum extern float for goto if inline int long
register restrict return short signed sizeof static struct switch typedef union unsigned void volatile while bool half uchar ushort
uint ulong kernel global local constant private read_only write_only read_write true false""".split())
_PREFIXES = ("data", "gidx", "lidx", "ridx", "sidx", "acc", "alu", "val", "temp", "cast", "get_", "__", "ts_")

def _lanes(n: int) -> str: return "" if n == 1 else str(n)

def ctype(dt: DType, mem: bool = False) -> str:
  """The C type of a value, or of buffer memory (`mem`): bool is stored as uchar, bfloat16 as its ushort bits (half
  stays half*: core OpenCL's vload_half reads it)."""
  if dt.scalar() == dtypes.bool: return ("uchar" if mem else "bool") + _lanes(dt.count)
  if mem and dt.scalar() == dtypes.bfloat16: return "ushort" + _lanes(dt.count)
  return dt.name

def render_const(x, dt: DType) -> str:
  if dt.count > 1: return f"(({ctype(dt)})({render_const(x, dt.scalar())}))"
  if dt == dtypes.bool: return "1" if x else "0"
  if dtypes.is_float(dt):
    if math.isnan(x): s = "NAN"
    elif math.isinf(x): s = "INFINITY" if x > 0 else "(-INFINITY)"
    else:
      with np.errstate(all="ignore"):
        v = float(np.float64(x)) if dt == dtypes.float64 else float(np.float32(x)) if dt == dtypes.float32 else float(np.float16(x))
      if math.isinf(v): s = "INFINITY" if v > 0 else "(-INFINITY)"
      else:
        s = repr(v) + ("" if dt == dtypes.float64 else "f")
        if s.startswith("-"): s = f"({s})"
    if dt == dtypes.float16: return f"((half){s})"
    if dt == dtypes.float64 and s in ("NAN", "INFINITY", "(-INFINITY)"): return f"((double){s})"
    return s
  x = int(x)
  bits = dt.itemsize * 8
  if dt in _SMALL_INTS: return f"(({dt.name}){x})"
  suffix = {dtypes.int32: "", dtypes.uint32: "u", dtypes.int64: "l", dtypes.uint64: "ul"}[dt]
  if not dtypes.is_unsigned(dt) and x == -(1 << (bits - 1)): return f"(-{(1 << (bits-1)) - 1}{suffix}-1)"
  return f"({x}{suffix})" if x < 0 else f"{x}{suffix}"

def _is_nonzero_const(u: UOp) -> bool: return u.op is Ops.CONST and u.arg != 0

# *** dtypes carried in float registers: bfloat16 always, half without cl_khr_fp16 ***

def float_carried(target: Target) -> tuple[DType, ...]:
  """The dtypes whose values a kernel for `target` holds as float (their buffers keep the narrow format)."""
  return (dtypes.bfloat16,) if target.has_fp16 else (dtypes.bfloat16, dtypes.float16)

# helper function templates ({n}: vector width suffix, "" for scalars), emitted in this order, each only when used
_HELPERS: dict[str, str] = {
  # float -> bfloat16 bits, to nearest even: add 0x7fff plus the lowest kept bit, drop 16 bits; a NaN would carry into
  # the exponent, so it keeps sign and top payload with the quiet bit set. Integer tests: no reliance on float modes.
  "ts_bf16_bits": "ushort{n} ts_bf16_bits{n}(float{n} f) {{ uint{n} u = as_uint{n}(f); "
                  "return convert_ushort{n}(select((u + 0x7fffu + ((u >> 16) & 1u)) >> 16, (u >> 16) | 0x40u, "
                  "(u & 0x7fffffffu) > 0x7f800000u)); }}",
  "ts_bf16_round": "float{n} ts_bf16_round{n}(float{n} f) {{ return as_float{n}(convert_uint{n}(ts_bf16_bits{n}(f)) << 16); }}",
  # half as storage only: vstore_half_rte/vload_half through a private ushort are core OpenCL (no half variable needed)
  "ts_half_bits": "ushort{n} ts_half_bits{n}(float{n} f) {{ ushort{n} h; vstore_half{n}_rte(f, 0, (__private half*)&h); return h; }}",
  "ts_half_from_bits": "float{n} ts_half_from_bits{n}(ushort{n} h) {{ return vload_half{n}(0, (__private const half*)&h); }}",
  "ts_half_round": "float{n} ts_half_round{n}(float{n} f) {{ return ts_half_from_bits{n}(ts_half_bits{n}(f)); }}",
}
_NEEDS = {"ts_bf16_round": ("ts_bf16_bits",), "ts_half_round": ("ts_half_bits", "ts_half_from_bits")}
# half ops whose result is exact given half operands: no rounding needed in the storage path
_EXACT_HALF_OPS = frozenset({Ops.NEG, Ops.MAX, Ops.WHERE})

def _round_float(x: float, dt: DType) -> float:
  """A constant of a float-carried dtype as the float it stands for (rounded to that dtype)."""
  with np.errstate(all="ignore"):
    if dt == dtypes.bfloat16: return float(bf16_round(x))
    return float(np.float16(x))

def render_alu(op: Ops, dt: DType, a: list[str], srcs: tuple[UOp, ...]) -> str:
  T = ctype(dt)
  isf, isb = dtypes.is_float(dt), dt == dtypes.bool
  def w(s: str) -> str: return f"(({T})({s}))" if dt in _SMALL_INTS else s
  if op is Ops.NEG: return f"(!{a[0]})" if isb else w(f"(-{a[0]})")
  if op in (Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT):
    fn = {Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SIN: "sin", Ops.SQRT: "sqrt"}[op]
    return f"{fn}({a[0]})" if isf else f"(({T}){fn}((float)({a[0]})))"
  if op is Ops.RECIP:
    if isf: return f"({render_const(1.0, dt)}/{a[0]})"
    return f"(({a[0]})==0?({T})0:({T})(1/({a[0]})))"
  # bool: bitwise forms (clang warns about && with a constant operand)
  if op is Ops.ADD: return f"({a[0]}|{a[1]})" if isb else w(f"({a[0]}+{a[1]})")
  if op is Ops.MUL: return f"({a[0]}&{a[1]})" if isb else w(f"({a[0]}*{a[1]})")
  if op in (Ops.IDIV, Ops.MOD):
    if isf:
      if op is Ops.IDIV: return f"trunc({a[0]}/{a[1]})"
      if _is_nonzero_const(srcs[1]): return f"fmod({a[0]},{a[1]})"
      one = render_const(1.0, dt)
      return f"(fmod({a[0]},(({a[1]})!=0?({a[1]}):{one}))*(({T})(({a[1]})!=0)))"
    sym = "/" if op is Ops.IDIV else "%"
    if _is_nonzero_const(srcs[1]): return w(f"({a[0]}{sym}{a[1]})")
    return f"(({a[1]})==0?({T})0:{w(f'({a[0]}{sym}{a[1]})')})"
  if op is Ops.MAX:
    if isb: return f"({a[0]}|{a[1]})"
    if isf: return f"((({a[0]})>({a[1]})||({a[0]})!=({a[0]}))?({a[0]}):({a[1]}))"
    return f"max(({T})({a[0]}),({T})({a[1]}))"
  if op is Ops.CMPLT: return f"({a[0]}<{a[1]})"
  if op is Ops.CMPNE: return f"({a[0]}!={a[1]})"
  if op is Ops.AND: return w(f"({a[0]}&{a[1]})")
  if op is Ops.OR: return w(f"({a[0]}|{a[1]})")
  if op is Ops.XOR: return w(f"({a[0]}^{a[1]})")
  if op is Ops.SHL: return w(f"({a[0]}<<{a[1]})")
  if op is Ops.SHR: return w(f"({a[0]}>>{a[1]})")
  if op is Ops.WHERE: return f"({a[0]}?{a[1]}:{a[2]})"
  if op is Ops.MULACC: return w(f"(({a[0]}*{a[1]})+{a[2]})")
  raise NotImplementedError(f"no OpenCL rendering for {op}")

class _Names(dict):
  # constants are not in the linear program: they render where they are used
  def __init__(self, ctx: _Ctx):
    super().__init__()
    self.ctx = ctx
  def __missing__(self, u: UOp) -> str:
    if u.op is Ops.CONST: return self.ctx.const(u.arg, u.dtype)
    raise KeyError(f"internal: {u.op} used before it was rendered")

class _Ctx:
  """Renderer state: names of rendered nodes, the dtypes carried as float and the helper functions used."""
  def __init__(self, lw: Lowered, var_names: dict[UOp, str], target: Target):
    self.r: dict[UOp, str] = _Names(self)
    self.lw = lw
    self.var_names = var_names
    self.counts: dict[str, int] = {}
    self.carried = float_carried(target)
    self.helpers: dict[tuple[str, int], None] = {}  # (helper, lanes) used, an ordered set
  def name(self, prefix: str) -> str:
    n = self.counts.get(prefix, 0)
    self.counts[prefix] = n + 1
    return f"{prefix}{n}"
  def is_carried(self, dt: DType) -> bool: return dt.scalar() in self.carried
  def vt(self, dt: DType) -> DType:
    """The dtype a value of `dt` is computed in: float (of the same lanes) for a float-carried dtype, else dt itself."""
    return dtypes.float32.vec(dt.count) if self.is_carried(dt) else dt
  def ctype(self, dt: DType) -> str: return ctype(self.vt(dt))
  def const(self, x, dt: DType) -> str:
    if not self.is_carried(dt): return render_const(x, dt)
    return render_const(x if math.isnan(x) else _round_float(x, dt.scalar()), self.vt(dt))
  def call(self, helper: str, n: int, arg: str) -> str:
    for dep in _NEEDS.get(helper, ()): self.helpers[(dep, n)] = None
    self.helpers[(helper, n)] = None
    return f"{helper}{_lanes(n)}({arg})"
  def helper_source(self) -> list[str]:
    order = list(_HELPERS)
    return [_HELPERS[h].format(n=_lanes(n)) for h, n in sorted(self.helpers, key=lambda k: (order.index(k[0]), k[1]))]

def scalar_helpers(names: tuple[str, ...]) -> list[str]:
  """The definitions of the scalar `ts_` helpers `names` (and what they call), in the fixed order: for a kernel written
  outside this renderer that rounds as it does (codegen/tensor_core.py's epilogue)."""
  want = set(names) | {d for n in names for d in _NEEDS.get(n, ())}  # (membership only: the order is _HELPERS')
  return [_HELPERS[h].format(n="") for h in _HELPERS if h in want]

def _access(ctx: _Ctx, index: UOp, dt: DType) -> str:
  buf, idx = index.src[0], index.src[1]
  b = ctx.r[buf]
  if dt.count > 1:
    space = "__local" if buf.op is Ops.DEFINE_LOCAL else "__global"
    return f"*(({space} {ctype(dt, mem=True) if space == '__global' else _local_ctype(ctx, dt)}*)({b}+{ctx.r[idx]}))"
  return f"{b}[{ctx.r[idx]}]"

def _carried_global(ctx: _Ctx, index: UOp, dt: DType) -> bool:
  # local arrays of a float-carried dtype hold floats (partial results): only global memory has the narrow format
  return ctx.is_carried(dt) and index.src[0].op is Ops.DEFINE_GLOBAL

def _load(ctx: _Ctx, x: UOp) -> str:
  index, n = x.src[0], x.dtype.count
  if _carried_global(ctx, index, x.dtype):
    b, i = ctx.r[index.src[0]], ctx.r[index.src[1]]
    if x.dtype.scalar() == dtypes.float16: acc = f"vload_half({i}, {b})" if n == 1 else f"vload_half{n}(0, {b}+{i})"
    elif n == 1: acc = f"as_float(((uint){b}[{i}])<<16)"
    else: acc = f"as_float{n}(convert_uint{n}(*((__global ushort{n}*)({b}+{i})))<<16)"
  else: acc = _access(ctx, index, x.dtype)
  valid = [s for s in x.src[1:] if s.op is not Ops.BARRIER]
  if valid: return f"(({ctx.r[valid[0]]})?{acc}:{ctx.const(0, x.dtype)})"
  return acc

def _store(ctx: _Ctx, x: UOp) -> str:
  index, val, dt = x.src[0], ctx.r[x.src[1]], x.src[1].dtype
  if _carried_global(ctx, index, dt):
    b, i, n = ctx.r[index.src[0]], ctx.r[index.src[1]], dt.count
    if dt.scalar() == dtypes.float16: stmt = f"vstore_half_rte({val}, {i}, {b});" if n == 1 else f"vstore_half{n}_rte({val}, 0, {b}+{i});"
    else: stmt = f"{_access(ctx, index, dt)} = {ctx.call('ts_bf16_bits', n, val)};"
  else: stmt = f"{_access(ctx, index, dt)} = {val};"
  return f"if ({ctx.r[x.src[2]]}) {{ {stmt} }}" if len(x.src) > 2 else stmt

# rules return C text: an expression for values, a statement for effects (the rule names show what rendered a node)
opencl_rules = PatternMatcher([
  (UPat(Ops.DEFINE_GLOBAL, name="x"), lambda ctx, x: f"data{x.arg}", "global_buffer"),
  (UPat(Ops.DEFINE_VAR, name="x"), lambda ctx, x: ctx.var_names[x], "variable"),
  (UPat(Ops.SPECIAL, name="x"), lambda ctx, x: f"get_{x.arg[2]}_id({x.arg[0][-1]})", "thread_id"),
  (UPat(Ops.DEFINE_LOCAL, name="x"), lambda ctx, x: f"__local {_local_ctype(ctx, x.dtype.base)} {{name}}[{x.arg[1]}] __attribute__((aligned(16)));",
   "local_buffer"),
  (UPat(Ops.DEFINE_ACC, name="x"), lambda ctx, x: f"{ctx.ctype(x.dtype)} {{name}} = {ctx.r[x.src[0]]};", "accumulator"),
  (UPat(Ops.RANGE, name="x"), lambda ctx, x: f"for ({ctype(x.dtype)} {{name}} = {ctx.r[x.src[0]]}; {{name}} < {ctx.r[x.src[1]]}; {{name}}++) {{{{",
   "loop"),
  (UPat(Ops.ENDRANGE), lambda ctx: "}", "end_loop"),
  (UPat(Ops.BARRIER), lambda ctx: "barrier(CLK_LOCAL_MEM_FENCE);", "barrier"),
  (UPat(Ops.ASSIGN, name="x"), lambda ctx, x: f"{ctx.r[x.src[0]]} = {ctx.r[x.src[1]]};", "accumulate"),
  (UPat(Ops.STORE, name="x"), _store, "store"),
  (UPat(Ops.LOAD, name="x"), _load, "load"),
  (UPat(Ops.INDEX, name="x"), lambda ctx, x: "", "index"),  # rendered inside its LOAD/STORE
  (UPat(Ops.GEP, name="x"), lambda ctx, x: f"{ctx.r[x.src[0]]}.s{x.arg:x}", "vector_lane"),
  (UPat(Ops.VECTORIZE, name="x"), lambda ctx, x: f"(({ctx.ctype(x.dtype)})({','.join(ctx.r[s] for s in x.src)}))", "vector_build"),
  (UPat(Ops.CAST, name="x"), lambda ctx, x: _cast(ctx, x), "cast"),
  (UPat(Ops.BITCAST, name="x"), lambda ctx, x: _bitcast(ctx, x), "bitcast"),
  (UPat(GroupOp.ALU, name="x"), lambda ctx, x: _alu(ctx, x), "alu"),
], name="opencl_render")

def _local_ctype(ctx: _Ctx, dt: DType) -> str: return ctx.ctype(dt) if ctx.is_carried(dt) else ctype(dt, mem=True)

def _exact_bf16(u: UOp) -> bool:
  """A bfloat16 value that is already a bfloat16 (rounding it again changes nothing, so it is skipped)."""
  return u.op is Ops.CONST or (u.op is Ops.CAST and u.dtype == dtypes.bfloat16) or \
    (u.op is Ops.LOAD and u.src[0].src[0].op is Ops.DEFINE_GLOBAL)

def _round_to(ctx: _Ctx, dt: DType, a: str) -> str:
  """A float expression rounded to the float-carried dtype dt."""
  return ctx.call("ts_bf16_round" if dt.scalar() == dtypes.bfloat16 else "ts_half_round", dt.count, a)

def _cast(ctx: _Ctx, x: UOp) -> str:
  src, dst, a = x.src[0].dtype, x.dtype, ctx.r[x.src[0]]
  if not ctx.is_carried(src) and not ctx.is_carried(dst): return f"(({ctype(dst)})({a}))"
  # a bfloat16 value may be an unrounded float result: round it first (carried half values are always rounded)
  if src.scalar() == dtypes.bfloat16 and not _exact_bf16(x.src[0]): a = _round_to(ctx, src, a)
  if ctx.is_carried(dst):  # through float, then rounded (an int or double reaches bfloat16/half through float)
    f = a if ctx.vt(src) == dtypes.float32.vec(dst.count) else f"(({ctx.ctype(dst)})({a}))"
    return _round_to(ctx, dst, f)
  return f"(({ctype(dst)})({a}))"

def _alu(ctx: _Ctx, x: UOp) -> str:
  a = [ctx.r[s] for s in x.src]
  if not (ctx.is_carried(x.dtype) and x.dtype.scalar() == dtypes.float16) or x.op in _EXACT_HALF_OPS:
    return render_alu(x.op, ctx.vt(x.dtype), a, x.src)
  # half without cl_khr_fp16: round every inexact result, as native half arithmetic does (MULACC rounds its product too,
  # IDIV its quotient before trunc: trunc of a half is a half)
  if x.op is Ops.MULACC: return _round_to(ctx, x.dtype, f"({_round_to(ctx, x.dtype, f'({a[0]}*{a[1]})')}+{a[2]})")
  if x.op is Ops.IDIV: return f"trunc({_round_to(ctx, x.dtype, f'({a[0]}/{a[1]})')})"
  return _round_to(ctx, x.dtype, render_alu(x.op, ctx.vt(x.dtype), a, x.src))

def _bitcast(ctx: _Ctx, x: UOp) -> str:
  if x.dtype == dtypes.bool or x.src[0].dtype == dtypes.bool: raise UnsupportedDTypeError("bitcast to or from bool is not supported")
  if x.dtype.itemsize != x.src[0].dtype.itemsize:
    raise UnsupportedDTypeError(f"bitcast between sizes ({x.src[0].dtype} -> {x.dtype}) needs a buffer view, not a kernel")
  src, dst, a = x.src[0].dtype, x.dtype, ctx.r[x.src[0]]
  if not ctx.is_carried(src) and not ctx.is_carried(dst): return f"as_{ctype(x.dtype)}({a})"
  n = dst.count
  if ctx.is_carried(src):  # the bits of the value it rounds to, as ushort
    a = ctx.call("ts_bf16_bits" if src.scalar() == dtypes.bfloat16 else "ts_half_bits", n, a)
    if ctx.is_carried(dst): src = dtypes.uint16.vec(n)
    else: return a if dst.scalar() == dtypes.uint16 else f"as_{ctype(dst)}({a})"
  bits = a if src.scalar() == dtypes.uint16 else f"as_ushort{_lanes(n)}({a})"
  if dst.scalar() == dtypes.bfloat16: return f"as_float{_lanes(n)}(convert_uint{_lanes(n)}({bits})<<16)"
  return ctx.call("ts_half_from_bits", n, bits)

MAX_INLINE_DEPTH = 32
_INLINE = GroupOp.ALU | {Ops.CAST, Ops.BITCAST}
_ALWAYS_INLINE = frozenset({Ops.CONST, Ops.DEFINE_GLOBAL, Ops.DEFINE_VAR, Ops.GEP, Ops.VECTORIZE, Ops.INDEX})
_PREFIX = {Ops.LOAD: "val", Ops.CAST: "cast", Ops.BITCAST: "cast"}

def check_dtypes(lw: Lowered, target: Target) -> set[DType]:
  """The scalar dtypes a kernel uses (membership only); raises for double on a device without cl_khr_fp64 (half without
  cl_khr_fp16 renders as storage: see the module docstring)."""
  used = {u.dtype.scalar() for u in lw.uops if u.dtype.fmt is not None or u.dtype.count > 1} | \
         {b.dtype.base.scalar() for b in lw.bufs} | {u.dtype.base.scalar() for u in lw.uops if u.op is Ops.DEFINE_LOCAL}
  if dtypes.float64 in used and not target.has_fp64:
    raise UnsupportedDTypeError(f"kernel {lw.name} uses double (float64), but OpenCL device {target.name!r} does not support cl_khr_fp64")
  return used

def var_names(lw: Lowered) -> dict[UOp, str]:
  out: dict[UOp, str] = {}
  for i, v in enumerate(lw.vars):
    n = v.arg[0]
    ok = isinstance(n, str) and n.isidentifier() and n.isascii() and n not in _C_RESERVED and not n.startswith(_PREFIXES) and \
      n not in out.values()
    out[v] = n if ok else f"var{i}"
  return out

def _repeats_operand(u: UOp) -> bool:
  if u.op is Ops.MAX: return dtypes.is_float(u.dtype)
  if u.op in (Ops.IDIV, Ops.MOD): return not _is_nonzero_const(u.src[1])
  return u.op is Ops.RECIP and not dtypes.is_float(u.dtype)

def render(lw: Lowered, target: Target, shown: dict[UOp, tuple[str, bool]] | None = None) -> str:
  """The kernel's OpenCL C source. `shown`, if given, receives for every rendered node (program order) its text and whether
  that text is inlined into a user (else it is the node's own line): what provenance.py needs to find changed nodes."""
  used = check_dtypes(lw, target)
  ctx = _Ctx(lw, var_names(lw), target)
  # uses and the loop each user sits in: single-use values in the same loop are inlined
  uses: dict[UOp, int] = {}
  user_block: dict[UOp, int] = {}
  block_of: dict[UOp, int] = {}
  stack, nblocks = [0], 0
  for u in lw.uops:
    if u.op is Ops.ENDRANGE:
      stack.pop()
      continue
    block_of.setdefault(u, stack[-1])
    for s in u.src:
      # templates that repeat an operand (NaN-aware max, zero-guarded division) must not inline it: text would grow exponentially
      uses[s] = uses.get(s, 0) + (2 if _repeats_operand(u) else 1)
      user_block[s] = block_of[u] if u.op is not Ops.RANGE else stack[-1]
    if u.op is Ops.RANGE:
      nblocks += 1
      stack.append(nblocks)
  lines: list[str] = []
  depth = 1
  depth_of: dict[UOp, int] = {}  # nesting of inlined expressions (compilers limit bracket nesting, clang to 256)
  for u in lw.uops:
    if u.op in (Ops.DEFINE_GLOBAL, Ops.DEFINE_VAR):
      ctx.r[u] = opencl_rules.rewrite(u, ctx)  # type: ignore[assignment]
      continue
    txt = cast("str | None", opencl_rules.rewrite(u, ctx))  # the renderer's rules return source text, not nodes
    if txt is None: raise NotImplementedError(f"no OpenCL rendering for {u.op}")
    op = u.op
    d = 1 + max((depth_of.get(s, 0) for s in u.src), default=0)
    if op in _ALWAYS_INLINE or (op in _INLINE and uses.get(u, 0) == 1 and user_block.get(u) == block_of.get(u) and d <= MAX_INLINE_DEPTH):
      ctx.r[u] = txt
      depth_of[u] = d
      if shown is not None: shown[u] = (txt, True)
      continue
    if op is Ops.ENDRANGE: depth -= 1
    if op in (Ops.RANGE, Ops.DEFINE_ACC, Ops.DEFINE_LOCAL):
      nm = ctx.name({Ops.RANGE: "sidx" if isinstance(u.arg, tuple) else "ridx", Ops.DEFINE_ACC: "acc", Ops.DEFINE_LOCAL: "temp"}[op])
      ctx.r[u] = nm
      lines.append("  "*depth + txt.format(name=nm))
    elif op is Ops.SPECIAL:
      ctx.r[u] = u.arg[0]
      lines.append("  "*depth + f"{ctype(u.dtype)} {u.arg[0]} = {txt}; /* {u.arg[1]} */")
    elif op in (Ops.STORE, Ops.BARRIER, Ops.ENDRANGE):
      lines.append("  "*depth + txt)
    elif op is Ops.ASSIGN:
      ctx.r[u] = ctx.r[u.src[0]]
      lines.append("  "*depth + txt)
    else:
      nm = ctx.name(_PREFIX.get(op, "alu"))
      ctx.r[u] = nm
      lines.append("  "*depth + f"{ctx.ctype(u.dtype)} {nm} = {txt};")
    if shown is not None: shown[u] = (lines[-1].strip(), False)
    if op is Ops.RANGE: depth += 1
  args = []
  # no `restrict` in kernels with barriers: PoCL 3.1 aborts (ParallelRegion assertion) on restrict + loop-invariant loads + barriers
  restrict = " restrict" if not any(u.op is Ops.BARRIER for u in lw.uops) else ""
  for b in lw.bufs:
    const = "" if b.arg in lw.outs else "const "
    args.append(f"__global {const}{ctype(b.dtype.base, mem=True)}*{restrict} data{b.arg}")
  for v in lw.vars: args.append(f"const {ctype(v.dtype)} {ctx.var_names[v]}")
  head = []
  if dtypes.float16 in used and target.has_fp16: head.append("#pragma OPENCL EXTENSION cl_khr_fp16 : enable")
  if dtypes.float64 in used: head.append("#pragma OPENCL EXTENSION cl_khr_fp64 : enable")
  head += ctx.helper_source()
  attr = ""
  if lw.local_size is not None:
    ls = tuple(lw.local_size) + (1,) * (3 - len(lw.local_size))
    attr = f"__attribute__((reqd_work_group_size({ls[0]}, {ls[1]}, {ls[2]}))) "
  return "\n".join(head + [f"__kernel {attr}void {lw.name}({', '.join(args)}) {{"] + lines + ["}"]) + "\n"

__all__ = ["render", "render_const", "ctype", "scalar_helpers", "opencl_rules", "UnsupportedDTypeError", "float_carried"]
