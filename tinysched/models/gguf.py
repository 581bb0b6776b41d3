"""A GGUF reader (llama.cpp's weight format) with numpy dequantization; no torch, no gguf package.

Layout (little-endian): magic b"GGUF", version u32 (2 or 3), tensor count u64, metadata count u64; then metadata
entries (key string, value type u32, value), then tensor infos (name string, n_dims u32, dims u64[n_dims] with the
fastest-varying dim first, ggml type u32, offset u64 from the data section); the data section starts at the next
multiple of `general.alignment` (default 32). Strings are a u64 byte length and UTF-8 bytes.

Dequantization (blocks of 32 values, the layouts of ggml-common.h):
  Q4_0: f16 d, 16 bytes of nibbles;        x = (q - 8) * d
  Q4_1: f16 d, f16 m, 16 bytes of nibbles;  x = q * d + m
  Q8_0: f16 d, 32 int8;                     x = q * d
In every nibble block the low nibbles are values 0..15 and the high nibbles values 16..31. The arithmetic is float32
in the order above (d * q, then + m), the same as the reference gguf-py package, so weights match it bit for bit.
"""
from __future__ import annotations
import math, os, struct
from dataclasses import dataclass, field
from typing import Any
import numpy as np

class GGUFError(ValueError):
  """A GGUF file that cannot be read (the message names the file and the problem)."""

GGUF_MAGIC = b"GGUF"
# metadata value types
_SCALARS: dict[int, tuple[str, str]] = {0: ("<B", "uint8"), 1: ("<b", "int8"), 2: ("<H", "uint16"), 3: ("<h", "int16"),
                                         4: ("<I", "uint32"), 5: ("<i", "int32"), 6: ("<f", "float32"), 7: ("<?", "bool"),
                                         10: ("<Q", "uint64"), 11: ("<q", "int64"), 12: ("<d", "float64")}
T_STRING, T_ARRAY = 8, 9
# ggml tensor types we dequantize: (name, values per block, bytes per block)
GGML_TYPES: dict[int, tuple[str, int, int]] = {0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20),
                                               8: ("Q8_0", 32, 34), 30: ("BF16", 1, 2)}
# types we list (and bounds-check) but do not dequantize: (name, values per block, bytes per block)
_KNOWN_UNSUPPORTED: dict[int, tuple[str, int, int]] = {6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24), 9: ("Q8_1", 32, 36), 10: ("Q2_K", 256, 84),
                                                       11: ("Q3_K", 256, 110), 12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210),
                                                       15: ("Q8_K", 256, 292), 24: ("I8", 1, 1), 25: ("I16", 1, 2), 26: ("I32", 1, 4),
                                                       27: ("I64", 1, 8), 28: ("F64", 1, 8)}

@dataclass(frozen=True)
class TensorInfo:
  name: str
  shape: tuple[int, ...]  # numpy order (slowest dim first): the reverse of GGUF's dims
  ggml_type: int
  offset: int             # absolute offset in the file
  nbytes: int
  @property
  def type_name(self) -> str: return _type_name(self.ggml_type)

def _type_name(t: int) -> str: return (GGML_TYPES.get(t) or _KNOWN_UNSUPPORTED.get(t) or (f"ggml type {t}",))[0]

@dataclass
class GGUFFile:
  """Parsed header of a GGUF file; tensors are read and dequantized on demand (`tensor(name)`)."""
  path: str
  version: int
  metadata: dict[str, Any]
  tensors: dict[str, TensorInfo]
  alignment: int
  _mm: Any = field(default=None, repr=False)

  def raw(self, name: str) -> np.ndarray:
    """The tensor's bytes (uint8), memory-mapped."""
    info = self._info(name)
    if self._mm is None: self._mm = np.memmap(self.path, dtype=np.uint8, mode="r")
    return self._mm[info.offset:info.offset + info.nbytes]
  def tensor(self, name: str) -> np.ndarray:
    """The tensor dequantized to float32 (F32/F16/BF16/Q4_0/Q4_1/Q8_0), in numpy shape order."""
    info = self._info(name)
    try: return dequantize(self.raw(name), info.ggml_type, info.shape)
    except GGUFError as e: raise GGUFError(f"{self.path}: tensor {name!r}: {e}") from None
  def _info(self, name: str) -> TensorInfo:
    if name not in self.tensors:
      raise KeyError(f"{self.path}: no tensor {name!r} (it has {len(self.tensors)} tensors, e.g. {list(self.tensors)[:3]})")
    return self.tensors[name]

# explicit limits on what a header may claim (a valid file is far inside all of them)
MAX_ARRAY_DEPTH = 8          # arrays of arrays (llama.cpp itself writes none)
MAX_ALIGNMENT = 1 << 20      # general.alignment
MAX_DIM = 1 << 62            # one tensor dim, and the product of all of them (values of a tensor)

class _Reader:
  def __init__(self, path: str, buf: bytes | memoryview):
    self.path, self.buf, self.pos = path, buf, 0
  def take(self, n: int, what: str) -> memoryview | bytes:
    if n < 0 or self.pos + n > len(self.buf):
      raise GGUFError(f"{self.path}: truncated GGUF file: {what} needs {n} bytes at offset {self.pos}, the file has {len(self.buf)}")
    b = self.buf[self.pos:self.pos + n]
    self.pos += n
    return b
  def unpack(self, fmt: str, what: str) -> Any: return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))[0]
  def string(self, what: str) -> str:
    n = self.unpack("<Q", what)
    raw = bytes(self.take(n, what))
    try: return raw.decode("utf-8")
    except UnicodeDecodeError: raise GGUFError(f"{self.path}: {what} is not valid UTF-8: {raw[:40]!r}") from None
  def need(self, count: int, min_bytes: int, what: str) -> None:
    """Refuse a count whose elements (at least min_bytes each) cannot fit in the rest of the file, before looping over it."""
    if count * min_bytes > len(self.buf) - self.pos:
      raise GGUFError(f"{self.path}: truncated or corrupt GGUF file: {what} claims {count} entries of at least {min_bytes} bytes, "
                      f"only {len(self.buf) - self.pos} bytes are left at offset {self.pos}")
  def value(self, vtype: int, what: str, depth: int = 0) -> Any:
    if vtype in _SCALARS: return self.unpack(_SCALARS[vtype][0], what)
    if vtype == T_STRING: return self.string(what)
    if vtype == T_ARRAY:
      if depth >= MAX_ARRAY_DEPTH:
        raise GGUFError(f"{self.path}: {what.split('[')[0]}: arrays nested more than {MAX_ARRAY_DEPTH} deep (at offset {self.pos})")
      etype, count = self.unpack("<I", what), self.unpack("<Q", what)
      if etype in _SCALARS:
        # numeric arrays in one numpy read, not count struct calls
        fmt = _SCALARS[etype][0]
        raw = self.take(count * struct.calcsize(fmt), f"{what} (array of {count} {_SCALARS[etype][1]})")
        return np.frombuffer(raw, dtype=np.dtype(fmt)).tolist()
      if etype == T_STRING:
        self.need(count, 8, what)
        return [self.string(f"{what}[{i}]") for i in range(count)]
      if etype == T_ARRAY:
        self.need(count, 12, what)
        return [self.value(T_ARRAY, f"{what}[{i}]", depth + 1) for i in range(count)]
      raise GGUFError(f"{self.path}: {what}: unknown array element type {etype}")
    raise GGUFError(f"{self.path}: {what}: unknown metadata value type {vtype}")

def load_gguf(path: str | os.PathLike) -> GGUFFile:
  """Parse a GGUF file's header (metadata and tensor infos), checking every tensor fits in the file."""
  path = os.fspath(path)
  try: size = os.path.getsize(path)
  except OSError as e: raise GGUFError(f"{path}: cannot open GGUF file: {e.strerror}") from None
  mm = np.memmap(path, dtype=np.uint8, mode="r") if size else np.zeros(0, np.uint8)
  r = _Reader(path, memoryview(mm))  # type: ignore[arg-type]  # numpy's stubs give arrays __buffer__ only on Python >= 3.12
  magic = bytes(r.take(4, "magic"))
  if magic != GGUF_MAGIC: raise GGUFError(f"{path}: not a GGUF file (magic {magic!r}, expected {GGUF_MAGIC!r})")
  version = r.unpack("<I", "version")
  if version not in (2, 3): raise GGUFError(f"{path}: GGUF version {version} is not supported (only 2 and 3)")
  n_tensors, n_kv = r.unpack("<Q", "tensor count"), r.unpack("<Q", "metadata count")
  r.need(n_kv, 12, "metadata count")
  r.need(n_tensors, 24, "tensor count")
  metadata: dict[str, Any] = {}
  for i in range(n_kv):
    key = r.string(f"metadata key {i}")
    metadata[key] = r.value(r.unpack("<I", f"type of {key!r}"), f"metadata {key!r}")
  raw_infos = []
  for i in range(n_tensors):
    name = r.string(f"tensor name {i}")
    n_dims = r.unpack("<I", f"dims of {name!r}")
    if n_dims > 8: raise GGUFError(f"{path}: tensor {name!r} has {n_dims} dims (at most 8 make sense)")
    dims = [r.unpack("<Q", f"dims of {name!r}") for _ in range(n_dims)]
    if any(d > MAX_DIM for d in dims) or math.prod(max(d, 1) for d in dims) > MAX_DIM:
      raise GGUFError(f"{path}: tensor {name!r} has dims {dims} ({math.prod(dims)} values): too large to be a tensor")
    raw_infos.append((name, tuple(reversed(dims)), r.unpack("<I", f"type of {name!r}"), r.unpack("<Q", f"offset of {name!r}")))
  alignment = metadata.get("general.alignment", 32)
  if not isinstance(alignment, int) or isinstance(alignment, bool):
    raise GGUFError(f"{path}: general.alignment must be an integer (uint32), got a {type(alignment).__name__}: {alignment!r:.40}")
  if alignment <= 0 or alignment & (alignment - 1) or alignment > MAX_ALIGNMENT:
    raise GGUFError(f"{path}: general.alignment {alignment} is not a power of two of at most {MAX_ALIGNMENT}")
  data_start = -(-r.pos // alignment) * alignment
  tensors: dict[str, TensorInfo] = {}
  for name, shape, gtype, off in raw_infos:
    n = math.prod(shape)  # Python ints: numpy's int64 product wraps (2^32 * 2^32 == 0)
    if (layout := GGML_TYPES.get(gtype) or _KNOWN_UNSUPPORTED.get(gtype)) is not None:
      tname, blk, bsz = layout
      if n % blk: raise GGUFError(f"{path}: tensor {name!r} has {n} values, not a multiple of the {tname} block size {blk}")
      nbytes = n // blk * bsz
    else: nbytes = 0  # an unknown type: listed (size unknown), tensor() says it cannot dequantize it
    if off % alignment: raise GGUFError(f"{path}: tensor {name!r} offset {off} is not aligned to {alignment}")
    if data_start + off + nbytes > size:
      raise GGUFError(f"{path}: tensor {name!r} ({nbytes} bytes at {data_start + off}) runs past the end of the file ({size} bytes): truncated?")
    if name in tensors: raise GGUFError(f"{path}: tensor {name!r} appears twice")
    tensors[name] = TensorInfo(name, shape, gtype, data_start + off, nbytes)
  return GGUFFile(path, version, metadata, tensors, alignment, mm)

def dequantize(raw: np.ndarray, ggml_type: int, shape: tuple[int, ...]) -> np.ndarray:
  """float32 values of `shape` from the raw bytes of one tensor (vectorized over all blocks)."""
  if ggml_type not in GGML_TYPES:
    raise GGUFError(f"cannot dequantize {_type_name(ggml_type)} (supported: {', '.join(v[0] for v in GGML_TYPES.values())})")
  name, blk, bsz = GGML_TYPES[ggml_type]
  n = math.prod(shape)
  raw = np.asarray(raw, dtype=np.uint8)
  if raw.size != n // blk * bsz: raise GGUFError(f"{name} data of {raw.size} bytes does not hold {n} values")
  if name == "F32": return raw.view("<f4").astype(np.float32).reshape(shape)
  if name == "F16": return raw.view("<f2").astype(np.float32).reshape(shape)
  if name == "BF16": return (raw.view("<u2").astype(np.uint32) << 16).view(np.float32).reshape(shape)
  blocks = raw.reshape(-1, bsz)
  d = blocks[:, 0:2].copy().view("<f2").astype(np.float32)  # (nblocks, 1)
  if name == "Q8_0": return (d * blocks[:, 2:].view(np.int8).astype(np.float32)).reshape(shape)
  qbytes = blocks[:, 4:] if name == "Q4_1" else blocks[:, 2:]
  q = np.concatenate([qbytes & 0x0F, qbytes >> 4], axis=1).astype(np.float32)  # low nibbles are values 0..15
  if name == "Q4_0": return (d * (q - 8.0)).reshape(shape)
  m = blocks[:, 2:4].copy().view("<f2").astype(np.float32)
  return (d * q + m).reshape(shape)

__all__ = ["GGUFError", "GGUFFile", "TensorInfo", "load_gguf", "dequantize", "GGML_TYPES"]
