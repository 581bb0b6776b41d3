import math
import numpy as np
import pytest
from tinysched.dtype import DType, PtrDType, dtypes, least_upper_dtype, least_upper_float, to_np, ALL

# (dtype, numpy dtype, itemsize, min, max): written out by hand, not derived from the implementation
TABLE = [
  (dtypes.bool, np.bool_, 1, False, True),
  (dtypes.int8, np.int8, 1, -128, 127),
  (dtypes.uint8, np.uint8, 1, 0, 255),
  (dtypes.int16, np.int16, 2, -32768, 32767),
  (dtypes.uint16, np.uint16, 2, 0, 65535),
  (dtypes.int32, np.int32, 4, -2147483648, 2147483647),
  (dtypes.uint32, np.uint32, 4, 0, 4294967295),
  (dtypes.int64, np.int64, 8, -9223372036854775808, 9223372036854775807),
  (dtypes.uint64, np.uint64, 8, 0, 18446744073709551615),
  (dtypes.float16, np.float16, 2, -math.inf, math.inf),
  (dtypes.float32, np.float32, 4, -math.inf, math.inf),
  (dtypes.float64, np.float64, 8, -math.inf, math.inf),
]

@pytest.mark.parametrize("d,npd,size,lo,hi", TABLE, ids=[t[0].name for t in TABLE])
def test_numpy_mapping_sizes_and_limits(d, npd, size, lo, hi):
  assert d.itemsize == size
  assert d.np == np.dtype(npd) and to_np(d) == np.dtype(npd)
  assert np.dtype(npd).itemsize == size
  assert dtypes.from_np(npd) is d and dtypes.from_np(np.dtype(npd)) is d
  assert dtypes.min(d) == lo and dtypes.max(d) == hi
  assert type(dtypes.min(d)) is type(lo) and type(dtypes.max(d)) is type(hi)
  if dtypes.is_int(d):  # the limits agree with numpy's
    assert (np.iinfo(npd).min, np.iinfo(npd).max) == (lo, hi)
  assert [dtypes.is_bool(d), dtypes.is_int(d), dtypes.is_float(d)].count(True) == 1
  assert dtypes.is_unsigned(d) == (np.dtype(npd).kind == "u")

def test_aliases_and_default_types():
  assert (dtypes.char, dtypes.uchar, dtypes.short, dtypes.ushort) == (dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16)
  assert (dtypes.int, dtypes.uint, dtypes.long, dtypes.ulong) == (dtypes.int32, dtypes.uint32, dtypes.int64, dtypes.uint64)
  assert (dtypes.half, dtypes.float, dtypes.double) == (dtypes.float16, dtypes.float32, dtypes.float64)
  assert dtypes.default_float is dtypes.float32 and dtypes.default_int is dtypes.int32
  assert len(set(ALL)) == 13  # bfloat16 is the 13th

def test_finfo():
  assert dtypes.finfo(dtypes.float16) == (5, 10)
  assert dtypes.finfo(dtypes.float32) == (8, 23)
  assert dtypes.finfo(dtypes.float64) == (11, 52)

def test_vec_and_ptr():
  f4 = dtypes.float32.vec(4)
  assert f4.count == 4 and f4.itemsize == 16 and f4.scalar() is dtypes.float32 and f4 != dtypes.float32
  assert dtypes.is_float(f4) and not dtypes.is_int(f4)
  assert dtypes.float32.vec(1) is dtypes.float32
  assert repr(dtypes.half.vec(2)) == "dtypes.half.vec(2)" and repr(dtypes.int32) == "dtypes.int"
  with pytest.raises(ValueError): f4.vec(2)
  with pytest.raises(ValueError): dtypes.int32.vec(0)
  p = dtypes.float32.ptr()
  assert isinstance(p, PtrDType) and p.base is dtypes.float32 and dtypes.float32.base is dtypes.float32
  assert p != dtypes.float32 and p == dtypes.float32.ptr() and hash(p) == hash(dtypes.float32.ptr())
  assert repr(p) == "dtypes.float.ptr()"
  assert dtypes.void.np is None
  with pytest.raises(TypeError, match="no numpy"): to_np(dtypes.void)

# tinygrad's promotion lattice, as a hand-written table of every pair: row type + column type
_NAMES = ["b", "i8", "u8", "i16", "u16", "i32", "u32", "i64", "u64", "f16", "f32", "f64"]
_BY = dict(zip(_NAMES, [t[0] for t in TABLE]))
_LUB = """
      b    i8   u8   i16  u16  i32  u32  i64  u64  f16  f32  f64
b     b    i8   u8   i16  u16  i32  u32  i64  u64  f16  f32  f64
i8    i8   i8   i16  i16  i32  i32  i64  i64  f16  f16  f32  f64
u8    u8   i16  u8   i16  u16  i32  u32  i64  u64  f16  f32  f64
i16   i16  i16  i16  i16  i32  i32  i64  i64  f16  f16  f32  f64
u16   u16  i32  u16  i32  u16  i32  u32  i64  u64  f16  f32  f64
i32   i32  i32  i32  i32  i32  i32  i64  i64  f16  f16  f32  f64
u32   u32  i64  u32  i64  u32  i64  u32  i64  u64  f16  f32  f64
i64   i64  i64  i64  i64  i64  i64  i64  i64  f16  f16  f32  f64
u64   u64  f16  u64  f16  u64  f16  u64  f16  u64  f16  f32  f64
f16   f16  f16  f16  f16  f16  f16  f16  f16  f16  f16  f32  f64
f32   f32  f32  f32  f32  f32  f32  f32  f32  f32  f32  f32  f64
f64   f64  f64  f64  f64  f64  f64  f64  f64  f64  f64  f64  f64
"""

def _lub_table():
  rows = [r.split() for r in _LUB.strip().splitlines()]
  header = rows[0]
  assert header == _NAMES and [r[0] for r in rows[1:]] == _NAMES
  return {(_BY[r[0]], _BY[c]): _BY[v] for r in rows[1:] for c, v in zip(header, r[1:])}

def test_least_upper_dtype_full_table():
  table = _lub_table()
  wrong = [(a, b, least_upper_dtype(a, b), want) for (a, b), want in table.items() if least_upper_dtype(a, b) is not want]
  assert not wrong

def test_least_upper_dtype_named_cases_and_properties():
  assert least_upper_dtype(dtypes.int8, dtypes.uint8) is dtypes.int16
  assert least_upper_dtype(dtypes.int64, dtypes.float16) is dtypes.float16
  assert least_upper_dtype(dtypes.uint64, dtypes.int64) is dtypes.float16
  assert least_upper_dtype(dtypes.bool, dtypes.bool) is dtypes.bool
  assert least_upper_dtype(dtypes.uint32, dtypes.int32) is dtypes.int64
  # one argument, three arguments (associative), vector types promote by their scalar
  assert least_upper_dtype(dtypes.uint16) is dtypes.uint16
  assert least_upper_dtype(dtypes.int8, dtypes.uint8, dtypes.uint16) is dtypes.int32
  assert least_upper_dtype(dtypes.bool, dtypes.uint8, dtypes.int8) is dtypes.int16
  assert least_upper_dtype(dtypes.float32.vec(4), dtypes.float16) is dtypes.float32
  types = [t[0] for t in TABLE]
  for a in types:
    for b in types:
      for c in types:
        assert least_upper_dtype(a, b, c) is least_upper_dtype(least_upper_dtype(a, b), c)
  with pytest.raises(ValueError): least_upper_dtype()

def test_least_upper_float():
  for d in (dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int32, dtypes.uint32, dtypes.int64, dtypes.uint64):
    assert least_upper_float(d) is dtypes.float32
  for d in (dtypes.float16, dtypes.float32, dtypes.float64): assert least_upper_float(d) is d

@pytest.mark.parametrize("val,d,want", [
  (127, dtypes.int8, 127), (128, dtypes.int8, -128), (255, dtypes.int8, -1), (-129, dtypes.int8, 127),
  (-1, dtypes.uint8, 255), (256, dtypes.uint8, 0), (300, dtypes.uint8, 44),
  (2**31, dtypes.int32, -2**31), (2**32 + 5, dtypes.int32, 5), (-1, dtypes.uint32, 2**32 - 1),
  (2**63, dtypes.int64, -2**63), (-1, dtypes.uint64, 2**64 - 1), (65536 + 7, dtypes.uint16, 7), (40000, dtypes.int16, -25536),
  (1.9, dtypes.int32, 1), (-1.9, dtypes.int32, -1), (True, dtypes.int32, 1),  # floats truncate toward zero
  (3, dtypes.float32, 3.0), (True, dtypes.float16, 1.0), (0, dtypes.bool, False), (-2, dtypes.bool, True), (0.5, dtypes.bool, True),
])
def test_as_const(val, d, want):
  got = dtypes.as_const(val, d)
  assert got == want and type(got) is type(want)
  if dtypes.is_int(d) and not isinstance(val, float):  # agrees with numpy's (C's) wrap-around
    assert got == np.array(int(val) % 2**64, dtype=np.uint64).astype(d.np).item()

def test_as_const_nonfinite_int_raises():
  for v in (math.inf, -math.inf, math.nan):
    with pytest.raises(ValueError): dtypes.as_const(v, dtypes.int32)
  assert math.isnan(dtypes.as_const(math.nan, dtypes.float32)) and dtypes.as_const(math.inf, dtypes.float16) == math.inf

def test_from_py():
  assert dtypes.from_py(True) is dtypes.bool and dtypes.from_py(False) is dtypes.bool
  assert dtypes.from_py(3) is dtypes.int32 and dtypes.from_py(3.0) is dtypes.float32
  assert dtypes.from_py([1, 2]) is dtypes.int32
  assert dtypes.from_py([True, 1]) is dtypes.int32
  assert dtypes.from_py([[1], [2.5]]) is dtypes.float32
  assert dtypes.from_py((True, False)) is dtypes.bool
  assert dtypes.from_py([]) is dtypes.default_float
  with pytest.raises(TypeError, match="no dtype for python value 'x' of type str"): dtypes.from_py("x")
  with pytest.raises(TypeError, match="NoneType"): dtypes.from_py([1, None])

def test_from_np_errors():
  assert dtypes.from_np(np.array([1, 2], dtype=np.int16).dtype) is dtypes.int16
  assert dtypes.from_np(bool) is dtypes.bool and dtypes.from_np(float) is dtypes.float64
  with pytest.raises(TypeError, match="numpy dtype complex64 has no tinysched dtype"): dtypes.from_np(np.complex64)
  with pytest.raises(TypeError, match="supported: bool, char"): dtypes.from_np(np.dtype("U3"))

def test_from_name():
  for d in (t[0] for t in TABLE): assert dtypes.from_name(d.name) is d  # OpenCL names: "char", "half", ...
  assert dtypes.from_name("float32") is dtypes.float32 and dtypes.from_name("uint8") is dtypes.uint8
  assert dtypes.from_name("half") is dtypes.float16 and dtypes.from_name("long") is dtypes.int64
  assert dtypes.from_name("void") is dtypes.void
  for bad in ("float128", "Float32", "", "int33"):
    with pytest.raises(KeyError, match=f"unknown dtype name {bad!r}"): dtypes.from_name(bad)

def test_dtype_is_frozen_and_ordered_by_priority():
  with pytest.raises(Exception): dtypes.int32.name = "x"  # type: ignore[misc]
  order = [t[0] for t in TABLE]
  assert sorted(reversed(order)) == order  # priority order is the promotion order
  assert isinstance(dtypes.int32, DType)
