"""Data types: the scalar types of the IR, their numpy mapping and tinygrad's promotion lattice."""
from __future__ import annotations
import builtins, functools, math, operator
from dataclasses import dataclass, fields
from typing import Union
import numpy as np
from tinysched.errors import DTypeNameError

ConstType = Union[float, int, bool]

@dataclass(frozen=True, eq=False)
class DType:
  """A scalar, vector or pointer type. Instances are canonical (vec/ptr are cached), so equality and hashing
  are identity, in C: dtypes are compared on every hot path of the compiler."""
  priority: int      # promotion order: lower promotes to higher
  itemsize: int      # bytes per element (of the whole vector for vector types)
  name: str          # the OpenCL / printed name
  fmt: str | None    # numpy type character, None for void
  count: int = 1     # lanes for vector types (float4 in codegen)
  def __repr__(self): return f"dtypes.{self.name}" if self.count == 1 else f"dtypes.{self.scalar().name}.vec({self.count})"
  def __lt__(self, other: DType) -> bool: return self._rank < other._rank
  @functools.cached_property
  def _rank(self) -> tuple:
    """Sort key, a total order: promotion priority first (least_upper_dtype takes the min), then size, name and lanes."""
    return (self.priority, self.itemsize, self.name, self.count)
  @functools.lru_cache(None)  # noqa: B019 (dtypes live forever)
  def vec(self, n: int) -> DType:
    if self.count != 1 or n < 1: raise ValueError(f"cannot vectorize {self} by {n}")
    return self if n == 1 else DType(self.priority, self.itemsize*n, f"{self.name}{n}", None, n)
  def scalar(self) -> DType: return self if self.count == 1 else _SCALARS[self.name[:-len(str(self.count))]]  # name = scalar's + lanes
  @functools.lru_cache(None)  # noqa: B019
  def ptr(self) -> PtrDType:  # a pointer shares its target's layout fields (_layout gives them all, _base comes after them)
    return PtrDType(*_layout(self), _base=self)  # type: ignore[misc]
  @property
  def base(self) -> DType: return self
  @property
  def np(self) -> np.dtype | None: return np.dtype(self.fmt) if self.fmt is not None else None

_layout = operator.attrgetter(*(f.name for f in fields(DType)))  # DType's own fields as a tuple, in constructor order

@dataclass(frozen=True, eq=False)
class PtrDType(DType):
  """A pointer to a buffer of `_base` (the dtype of BUFFER and DEFINE_GLOBAL nodes)."""
  _base: DType = None  # type: ignore[assignment]
  def __repr__(self): return f"{self._base!r}.ptr()"
  @property
  def base(self) -> DType: return self._base

class dtypes:
  void = DType(-1, 0, "void", None)
  bool = DType(0, 1, "bool", "?")
  int8 = DType(1, 1, "char", "b")
  uint8 = DType(2, 1, "uchar", "B")
  int16 = DType(3, 2, "short", "h")
  uint16 = DType(4, 2, "ushort", "H")
  int32 = DType(5, 4, "int", "i")
  uint32 = DType(6, 4, "uint", "I")
  int64 = DType(7, 8, "long", "q")
  uint64 = DType(8, 8, "ulong", "Q")
  float16 = DType(9, 2, "half", "e")
  # bfloat16: 1 sign, 8 exponent, 7 mantissa bits (the top half of a float32). numpy has no such type, so `fmt` (and
  # `.np`) is its storage, the raw uint16 bits; bf16_bits / bf16_float convert. Values are computed in float32 and
  # rounded to nearest even where they become bfloat16: on a store, a cast to or from it, a constant.
  bfloat16 = DType(10, 2, "bfloat16", "H")
  float32 = DType(11, 4, "float", "f")
  float64 = DType(12, 8, "double", "d")
  # aliases with tinygrad's names
  char, uchar, short, ushort, int, uint, long, ulong = int8, uint8, int16, uint16, int32, uint32, int64, uint64
  half, float, double = float16, float32, float64
  default_float = float32
  default_int = int32

  @staticmethod
  def is_float(x: DType) -> builtins.bool: return x.scalar() in FLOATS
  @staticmethod
  def is_int(x: DType) -> builtins.bool: return x.scalar() in INTS
  @staticmethod
  def is_unsigned(x: DType) -> builtins.bool: return x.scalar() in UINTS
  @staticmethod
  def is_bool(x: DType) -> builtins.bool: return x.scalar() == dtypes.bool
  @staticmethod
  def from_py(x) -> DType:
    """The dtype a Python scalar (or nested list of them) gets."""
    if isinstance(x, (list, tuple)): return max((dtypes.from_py(y) for y in x), default=dtypes.default_float)
    if isinstance(x, bool): return dtypes.bool
    if isinstance(x, int): return dtypes.default_int
    if isinstance(x, float): return dtypes.default_float
    raise TypeError(f"no dtype for python value {x!r} of type {type(x).__name__}")
  @staticmethod
  def from_np(x: np.dtype | type) -> DType:
    x = np.dtype(x)
    for d in ALL:  # uint16 comes before bfloat16 (whose storage is uint16 too): np.uint16 is uint16
      if d.fmt is not None and np.dtype(d.fmt) == x: return d
    raise TypeError(f"numpy dtype {x} has no tinysched dtype (supported: {', '.join(d.name for d in ALL)})")
  @staticmethod
  def from_name(name: str) -> DType:
    if (d := _BY_NAME.get(name)) is None: raise DTypeNameError(f"unknown dtype name {name!r}")
    return d
  @staticmethod
  def min(d: DType) -> ConstType: return _value_range(d)[0]
  @staticmethod
  def max(d: DType) -> ConstType: return _value_range(d)[1]
  @staticmethod
  def finfo(d: DType) -> tuple[builtins.int, builtins.int]:
    """(exponent bits, mantissa bits) of a float dtype."""
    return _FLOAT_BITS[d.scalar()]
  @staticmethod
  def as_const(val, d: DType) -> ConstType:
    """Cast a python scalar to the python type that represents `d` (bool, int or float)."""
    if dtypes.is_bool(d): return bool(val)
    if dtypes.is_int(d):
      if isinstance(val, float) and not math.isfinite(val): raise ValueError(f"cannot represent {val} as {d}")
      iv = int(val)
      # wrap like the hardware does
      bits = d.scalar().itemsize*8
      iv &= (1 << bits) - 1
      if not dtypes.is_unsigned(d) and iv >= 1 << (bits-1): iv -= 1 << bits
      return iv
    return float(val)

SINTS = (dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64)
UINTS = (dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64)
INTS = SINTS + UINTS
FLOATS = (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64)
ALL = (dtypes.bool,) + INTS + FLOATS
_SCALARS = {d.name: d for d in ALL}
_FLOAT_BITS = {dtypes.float16: (5, 10), dtypes.bfloat16: (8, 7), dtypes.float32: (8, 23), dtypes.float64: (11, 52)}  # (exponent, mantissa) bits

@functools.lru_cache(None)
def _value_range(d: DType) -> tuple[ConstType, ConstType]:
  """(lowest, highest) value of a type: exact for bool and ints (two's complement), -inf..inf for floats."""
  if dtypes.is_bool(d): return False, True
  if not dtypes.is_int(d): return -math.inf, math.inf
  bits = d.scalar().itemsize * 8
  if dtypes.is_unsigned(d): return 0, (1 << bits) - 1
  return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
_BY_NAME = {**{d.name: d for d in ALL}, "void": dtypes.void,
            **{k: v for k, v in vars(dtypes).items() if isinstance(v, DType)}}

# tinygrad's promotion lattice: an edge a -> b means a promotes to b without loss
_PROMO = {dtypes.bool: (dtypes.int8, dtypes.uint8), dtypes.int8: (dtypes.int16,), dtypes.int16: (dtypes.int32,),
          dtypes.int32: (dtypes.int64,), dtypes.int64: (dtypes.float16, dtypes.bfloat16), dtypes.uint8: (dtypes.int16, dtypes.uint16),
          dtypes.uint16: (dtypes.int32, dtypes.uint32), dtypes.uint32: (dtypes.int64, dtypes.uint64),
          dtypes.uint64: (dtypes.float16, dtypes.bfloat16), dtypes.float16: (dtypes.float32,), dtypes.bfloat16: (dtypes.float32,),
          dtypes.float32: (dtypes.float64,)}

@functools.lru_cache(None)
def _upper(d: DType) -> frozenset[DType]: return frozenset.union(frozenset({d}), *(_upper(p) for p in _PROMO.get(d, ())))

def least_upper_dtype(*ds: DType) -> DType:
  """The smallest dtype every argument promotes to (tinygrad's rule: int64+float16 -> float16, uint+int -> next int,
  float16+bfloat16 -> float32: neither holds the other)."""
  if not ds: raise ValueError("least_upper_dtype needs at least one dtype")
  common = frozenset.intersection(*(_upper(d.scalar()) for d in ds))
  return min(common)  # DType orders by priority first

def least_upper_float(d: DType) -> DType: return d if dtypes.is_float(d) else least_upper_dtype(d, dtypes.default_float)

# *** bfloat16 on the host: numpy has no bfloat16, so arrays of it are uint16 bits ***

def bf16_bits(x) -> np.ndarray:
  """float32 values (anything numpy converts to float32 first) -> bfloat16 bits (uint16), rounded to nearest even.

  Rounding adds 0x7fff plus the lowest kept bit, then drops the low 16 bits: ties go to the even neighbour, a
  float32 beyond bfloat16's largest finite value rounds to inf, subnormals round like any other value. A NaN would
  carry into the exponent that way, so it keeps its sign and top payload bits with the quiet bit set (NaN stays NaN)."""
  f = np.asarray(x, dtype=np.float32)
  u = np.ascontiguousarray(f).view(np.uint32).reshape(f.shape).astype(np.uint64)  # 0-d stays 0-d; no uint32 wrap-around
  rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
  nan = (u & 0x7FFFFFFF) > 0x7F800000
  return np.where(nan, (u >> 16) | 0x40, rounded).astype(np.uint16)

def bf16_float(bits) -> np.ndarray:
  """bfloat16 bits (uint16) -> the float32 values they encode (exact: bfloat16 is float32's top half)."""
  return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)

def bf16_round(x) -> np.ndarray:
  """x rounded to the nearest bfloat16 (ties to even, NaN stays NaN), as float32 values."""
  return bf16_float(bf16_bits(x))

def to_np(d: DType) -> np.dtype:
  if d.fmt is None: raise TypeError(f"{d} has no numpy equivalent")
  return np.dtype(d.fmt)
