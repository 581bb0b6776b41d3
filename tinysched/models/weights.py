"""Weight files for the model suite: safetensors (through tinysched.nn.state), GGUF (gguf.py), torch .pth (pth.py)."""
from __future__ import annotations
import json, os, struct
import numpy as np
from tinysched import Tensor
from tinysched.nn.state import safe_load

def load_safetensors(path: str | os.PathLike) -> dict[str, Tensor]:
  """{name: realized Tensor} from a safetensors file, with nn.state's reader."""
  return safe_load(path)

_DTYPES = {"F32": "<f4", "F16": "<f2", "F64": "<f8", "I64": "<i8", "I32": "<i4", "I16": "<i2", "I8": "i1", "U8": "u1", "BOOL": "?"}

def _safetensors_numpy(path: str | os.PathLike) -> dict[str, np.ndarray]:
  # a second reader, numpy only, that the tests check nn.state's against: 8-byte header length, JSON header, raw little-endian data
  with open(path, "rb") as f:
    (n,) = struct.unpack("<Q", f.read(8))
    header = json.loads(f.read(n))
    data = f.read()
  out = {}
  for name, info in header.items():
    if name == "__metadata__": continue
    if info["dtype"] not in _DTYPES: raise ValueError(f"{path}: tensor {name!r} has unsupported dtype {info['dtype']}")
    b, e = info["data_offsets"]
    out[name] = np.frombuffer(data[b:e], dtype=_DTYPES[info["dtype"]]).reshape(info["shape"]).copy()
  return out

__all__ = ["load_safetensors"]
