"""Model state: parameters and state dicts of nested objects, and safetensors files.

safetensors layout (https://github.com/huggingface/safetensors): an 8-byte little-endian header length N, N bytes of JSON
`{name: {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, "__metadata__": {str: str}}` (offsets relative
to the end of the header), then the raw little-endian tensor bytes.
"""
from __future__ import annotations
import json, math, os, re, struct
from collections import OrderedDict
from typing import Any
import numpy as np
from tinysched.tensor import Tensor
from tinysched.dtype import DType, dtypes

class SafetensorsError(ValueError):
  """A safetensors file that cannot be read (the message names the file)."""

# *** state dicts ***

def get_state_dict(obj: Any, prefix: str = "", tensor_type: type = Tensor) -> dict[str, Tensor]:
  """Every Tensor reachable from obj through attributes, lists/tuples and dicts, under dotted names ("layers.0.weight").

  The order is deterministic: attribute and dict insertion order, list order. Objects already visited (cycles) are skipped.
  """
  out: dict[str, Tensor] = {}
  _walk(obj, prefix, tensor_type, out, set())
  return out

def _walk(obj: Any, prefix: str, tensor_type: type, out: dict[str, Any], seen: set[int]) -> None:
  if isinstance(obj, tensor_type):
    out[prefix.strip(".")] = obj
    return
  if isinstance(obj, (str, bytes, int, float, bool, type(None))) or isinstance(obj, type) or callable(obj) and not hasattr(obj, "__dict__"): return
  if id(obj) in seen: return
  seen.add(id(obj))
  if hasattr(obj, "_asdict"): items = list(obj._asdict().items())  # namedtuple
  elif isinstance(obj, (dict, OrderedDict)): items = list(obj.items())
  elif isinstance(obj, (list, tuple)): items = list(enumerate(obj))
  elif hasattr(obj, "__dict__") and not isinstance(obj, type): items = list(vars(obj).items())
  else: return
  for k, v in items: _walk(v, f"{prefix}{k}.", tensor_type, out, seen)

def get_parameters(obj: Any) -> list[Tensor]:
  """The Tensors of get_state_dict(obj), each once (shared tensors are not repeated)."""
  return list({id(t): t for t in get_state_dict(obj).values()}.values())

def load_state_dict(model: Any, state_dict: dict[str, Tensor], strict: bool = True, verbose: bool = False, consume: bool = False) -> None:
  """Copy state_dict's tensors into the model's tensors of the same names (cast to their dtype, in place when realized).

  strict: every model tensor must be in state_dict and every state_dict entry must name a model tensor.
  Shapes must always match.
  """
  model_sd = get_state_dict(model)
  if strict:
    missing = [k for k in model_sd if k not in state_dict]
    unexpected = [k for k in state_dict if k not in model_sd]
    if missing or unexpected:
      parts = ([f"missing keys {missing}"] if missing else []) + ([f"unexpected keys {unexpected}"] if unexpected else [])
      raise KeyError(f"load_state_dict (strict): {'; '.join(parts)}")
  for k, v in model_sd.items():
    if k not in state_dict: continue
    src = state_dict[k]
    if not isinstance(src, Tensor): src = Tensor(src)
    if src.shape != v.shape: raise ValueError(f"load_state_dict: shape mismatch for {k!r}: model has {v.shape}, state dict has {src.shape}")
    if verbose: print(f"load_state_dict: {k} {v.shape} {v.dtype}")
    new = src.detach().to(v.device).cast(v.dtype)
    # in place when realized: other holders of this Tensor's buffer (an optimizer, a captured graph) see the new values
    if v.lazydata.is_realized: v.assign(new).realize()
    else: v.replace(Tensor(new.numpy(), device=v.device, dtype=v.dtype))  # a buffer of its own: never alias the source
    if consume: del state_dict[k]

# *** safetensors ***

_ST_DTYPES: dict[str, DType] = {"BOOL": dtypes.bool, "U8": dtypes.uint8, "I8": dtypes.int8, "I16": dtypes.int16, "U16": dtypes.uint16,
                                "F16": dtypes.float16, "I32": dtypes.int32, "U32": dtypes.uint32, "F32": dtypes.float32,
                                "F64": dtypes.float64, "I64": dtypes.int64, "U64": dtypes.uint64}
_ST_NAMES: dict[DType, str] = {v: k for k, v in _ST_DTYPES.items()}

def safe_save(tensors: dict[str, Tensor], fn: str | os.PathLike, metadata: dict[str, str] | None = None) -> None:
  """Write tensors to a safetensors file (realizing them)."""
  header: dict[str, Any] = {}
  if metadata is not None:
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()): raise TypeError("safetensors metadata must map str to str")
    header["__metadata__"] = dict(metadata)
  blobs: list[bytes] = []
  offset = 0
  for name, t in tensors.items():
    if not isinstance(name, str) or name == "__metadata__": raise ValueError(f"invalid safetensors tensor name {name!r}")
    if not isinstance(t, Tensor): raise TypeError(f"safe_save: {name!r} is a {type(t).__name__}, not a Tensor")
    if t.dtype not in _ST_NAMES: raise TypeError(f"safe_save: {name!r} has dtype {t.dtype}, which safetensors cannot store")
    le = t.dtype.np.newbyteorder("<")  # type: ignore[union-attr]  # the dtypes safetensors stores have a numpy type
    data = np.ascontiguousarray(t.numpy()).astype(le, copy=False).tobytes()
    header[name] = {"dtype": _ST_NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
    blobs.append(data)
    offset += len(data)
  hdr = json.dumps(header, separators=(",", ":")).encode()
  hdr += b" " * (-len(hdr) % 8)  # pad with spaces so the data starts 8-byte aligned (allowed by the format)
  with open(fn, "wb") as f:
    f.write(struct.pack("<Q", len(hdr)))
    f.write(hdr)
    for b in blobs: f.write(b)

# explicit limits on a header (a valid one is far inside them): its size (the reference implementation's 100 MB), how deeply its
# JSON nests (a valid header is 3 deep: {name: {"shape": [...]}}), and how large a tensor's shape may be
MAX_HEADER_BYTES = 100_000_000
MAX_HEADER_DEPTH = 8
MAX_NDIM = 32
MAX_ELEMENTS = 1 << 62
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')

def _json_depth(raw: bytes) -> int:
  """The deepest {}/[] nesting of a JSON text (brackets inside strings do not count), without recursing."""
  b = np.frombuffer(_JSON_STRING.sub(b'""', raw), dtype=np.uint8)
  step = (b == ord("{")).astype(np.int64) + (b == ord("[")) - (b == ord("}")) - (b == ord("]"))
  return int(np.cumsum(step).max(initial=0))

def _read_header(fn: str | os.PathLike) -> tuple[dict[str, Any], int, int]:
  """(parsed header, data start, file size), validating the framing."""
  try: size = os.path.getsize(fn)
  except OSError as e: raise SafetensorsError(f"{fn}: cannot open safetensors file: {e.strerror}") from None
  if size < 8: raise SafetensorsError(f"{fn}: not a safetensors file: {size} bytes, shorter than the 8-byte header length")
  with open(fn, "rb") as f:
    (n,) = struct.unpack("<Q", f.read(8))
    if n > size - 8: raise SafetensorsError(f"{fn}: corrupt safetensors file: header length {n} exceeds the file size {size}")
    if n > MAX_HEADER_BYTES:
      raise SafetensorsError(f"{fn}: corrupt safetensors file: header length {n} exceeds the limit of {MAX_HEADER_BYTES} bytes")
    raw = f.read(n)
  if (depth := _json_depth(raw)) > MAX_HEADER_DEPTH:
    raise SafetensorsError(f"{fn}: corrupt safetensors header: JSON nested {depth} deep (a header nests 3 deep; the limit is {MAX_HEADER_DEPTH})")
  try: header = json.loads(raw.decode("utf-8"))
  except (UnicodeDecodeError, json.JSONDecodeError) as e: raise SafetensorsError(f"{fn}: corrupt safetensors header: invalid JSON ({e})") from None
  if not isinstance(header, dict): raise SafetensorsError(f"{fn}: corrupt safetensors header: expected a JSON object, got {type(header).__name__}")
  return header, 8 + n, size

def _check_entry(fn, name: str, info: Any, data_len: int) -> tuple[DType, tuple[int, ...], int, int]:
  if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= set(info):
    raise SafetensorsError(f"{fn}: corrupt safetensors header: entry {name!r} needs dtype, shape and data_offsets, got {info!r}")
  if info["dtype"] not in _ST_DTYPES:
    raise SafetensorsError(f"{fn}: tensor {name!r} has unsupported dtype {info['dtype']!r} (supported: {', '.join(_ST_DTYPES)})")
  dt, shape, offs = _ST_DTYPES[info["dtype"]], info["shape"], info["data_offsets"]
  if not isinstance(shape, list) or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape):
    raise SafetensorsError(f"{fn}: tensor {name!r} has an invalid shape {shape!r:.200}")
  if len(shape) > MAX_NDIM or math.prod(max(s, 1) for s in shape) > MAX_ELEMENTS:
    raise SafetensorsError(f"{fn}: tensor {name!r} has shape {shape!r:.200}: too large to be a tensor ({len(shape)} dims, at most "
                           f"{MAX_NDIM}; at most {MAX_ELEMENTS} elements)")
  if not (isinstance(offs, list) and len(offs) == 2 and all(isinstance(o, int) and not isinstance(o, bool) for o in offs)
          and 0 <= offs[0] <= offs[1]):
    raise SafetensorsError(f"{fn}: tensor {name!r} has invalid data_offsets {offs!r}")
  nbytes = math.prod(shape) * dt.itemsize  # Python ints: numpy's int64 product overflows or wraps
  if offs[1] - offs[0] != nbytes:
    raise SafetensorsError(f"{fn}: tensor {name!r} ({info['dtype']} {shape}) needs {nbytes} bytes, data_offsets {offs} span {offs[1] - offs[0]}")
  if offs[1] > data_len:
    raise SafetensorsError(f"{fn}: tensor {name!r} data_offsets {offs} run past the end of the data ({data_len} bytes): truncated file?")
  return dt, tuple(shape), offs[0], offs[1]

def safe_load_metadata(fn: str | os.PathLike) -> dict[str, str]:
  """The __metadata__ of a safetensors file ({} when it has none)."""
  header, _, _ = _read_header(fn)
  meta = header.get("__metadata__", {})
  if not isinstance(meta, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
    raise SafetensorsError(f"{fn}: corrupt safetensors header: __metadata__ must map str to str, got {meta!r}")
  return dict(meta)

def safe_load(fn: str | os.PathLike, device: str | None = None) -> dict[str, Tensor]:
  """Read a safetensors file into realized Tensors (header order), validating the header against the file."""
  header, start, size = _read_header(fn)
  entries = [(name, _check_entry(fn, name, info, size - start)) for name, info in header.items() if name != "__metadata__"]
  spans = sorted((b, e, name) for name, (_, _, b, e) in entries if e > b)
  for (b0, e0, n0), (b1, e1, n1) in zip(spans, spans[1:]):
    if b1 < e0: raise SafetensorsError(f"{fn}: tensors {n0!r} and {n1!r} have overlapping data ({[b0, e0]} and {[b1, e1]})")
  with open(fn, "rb") as f:
    f.seek(start)
    data = f.read()
  out: dict[str, Tensor] = {}
  for name, (dt, shape, b, e) in entries:
    le = dt.np.newbyteorder("<")  # type: ignore[union-attr]  # the dtypes safetensors stores have a numpy type
    arr = np.frombuffer(data, dtype=le, count=(e - b) // dt.itemsize, offset=b).astype(dt.np).reshape(shape)
    out[name] = Tensor(arr, device=device, requires_grad=False)
  return out

__all__ = ["get_state_dict", "get_parameters", "load_state_dict", "safe_save", "safe_load", "safe_load_metadata", "SafetensorsError"]
