"""A safe reader for torch.save files (.pth/.pt) that needs no torch and runs no code from the file.

A .pth is a pickle, and unpickling runs whatever callables the pickle names (os.system, builtins.eval, ...). This
reader unpickles with an allow-list: the only globals it resolves are

  torch._utils._rebuild_tensor_v2 / _rebuild_tensor / _rebuild_parameter  -> rebuilt here as numpy arrays
  torch.<Dtype>Storage, torch.UntypedStorage                             -> dtype markers for the storages
  collections.OrderedDict

and the only persistent ids it accepts are ('storage', ...) records. Anything else (a global outside the list, a
persistent id of another kind) raises UnsafePickleError naming it, before any of it is called. Plain pickle
containers and scalars (dict, list, tuple, str, int, float, bool, None, bytes) need no globals and load as usual.

Both container formats torch has written are read:
  zip (torch >= 1.6): <dir>/data.pkl, storages in <dir>/data/<key>, <dir>/byteorder
  legacy (before 1.6, e.g. torchvision's 2018 checkpoints): five pickles and raw storages in one stream: magic
  number, protocol version, sys_info, the object (persistent ids ('storage', type, key, location, numel, view)),
  the list of storage keys; then per key an int64 element count and the raw bytes.
Tensors come back as numpy arrays (copies, C-contiguous), in the structure the file holds (usually an OrderedDict).
"""
from __future__ import annotations
import io, math, os, pickle, struct, zipfile, zlib
from collections import OrderedDict
from typing import Any, Callable
import numpy as np

class UnsafePickleError(pickle.UnpicklingError):
  """The pickle asks for something this loader refuses to build (the message names it)."""

class PthError(ValueError):
  """A .pth file that cannot be read (not a torch file, truncated, inconsistent)."""

# explicit limits on what a file may make this loader allocate, relative to the file's real length (torch writes its zip entries
# stored, so a real checkpoint decompresses to about its own size and its tensors copy about its own size):
INFLATE_RATIO, INFLATE_SLACK = 16, 64 << 20   # all zip entries together decompress to at most 16x the file (at least 64 MiB)
EXPAND_RATIO, EXPAND_SLACK = 4, 64 << 20      # all tensors together materialize at most 4x the file (at least 64 MiB)
MAX_NESTING = 64                              # containers nested in the pickled object

class _Budget:
  """What one load may still decompress and materialize (bytes)."""
  def __init__(self, path: str, file_len: int):
    self.path, self.file_len = path, file_len
    self.inflate = self.inflate_total = max(INFLATE_RATIO * file_len, INFLATE_SLACK)
    self.expand = self.expand_total = max(EXPAND_RATIO * file_len, EXPAND_SLACK)
  def limits(self) -> str: return f"for a file of {self.file_len} bytes"

LEGACY_MAGIC = 0x1950a86a20f9469cfc6c
LEGACY_PROTOCOL = 1001

# storage class name -> numpy dtype (bfloat16 is read as its uint16 bits and widened to float32 afterwards)
_STORAGE_DTYPES: dict[str, np.dtype] = {
  "FloatStorage": np.dtype("<f4"), "DoubleStorage": np.dtype("<f8"), "HalfStorage": np.dtype("<f2"), "BFloat16Storage": np.dtype("<u2"),
  "LongStorage": np.dtype("<i8"), "IntStorage": np.dtype("<i4"), "ShortStorage": np.dtype("<i2"), "CharStorage": np.dtype("i1"),
  "ByteStorage": np.dtype("u1"), "BoolStorage": np.dtype("?"), "UntypedStorage": np.dtype("u1")}

class _NoState:
  """The loader's own objects take no pickle BUILD state: a file cannot rewire their fields."""
  def __setstate__(self, state: Any) -> None: raise UnsafePickleError(f"refusing to set the state of {type(self).__name__} from the pickle")

class _StorageType(_NoState):
  """What `torch.FloatStorage` and friends unpickle to: a name, nothing callable."""
  def __init__(self, name: str): self.name, self.dtype = name, _STORAGE_DTYPES[name]
  def __repr__(self): return f"torch.{self.name}"

class _Storage(_NoState):
  """A storage whose bytes are fetched on first use (zip entry or legacy stream position)."""
  def __init__(self, stype: _StorageType, key: str, numel: int, fetch: Callable[[str, _StorageType, int], np.ndarray]):
    self.stype, self.key, self.numel, self._fetch = stype, key, numel, fetch
    self._data: np.ndarray | None = None
  @property
  def data(self) -> np.ndarray:
    if self._data is None: self._data = self._fetch(self.key, self.stype, self.numel)
    return self._data

class _StorageView(_NoState):
  """A legacy view into a root storage (view_metadata = (view_key, offset, size))."""
  def __init__(self, root: _Storage, offset: int, size: int): self.root, self.offset, self.size = root, offset, size
  @property
  def stype(self) -> _StorageType: return self.root.stype
  @property
  def data(self) -> np.ndarray: return self.root.data[self.offset:self.offset + self.size]

def _check_ints(what: str, xs: Any) -> tuple[int, ...]:
  if not isinstance(xs, (tuple, list)) or not all(isinstance(x, int) and not isinstance(x, bool) for x in xs):
    raise PthError(f"{what} must be a tuple of ints, got {xs!r}")
  return tuple(xs)

class _PendingTensor(_NoState):
  """A rebuilt tensor whose bytes are read after unpickling (legacy files store them after the pickle)."""
  def __init__(self, storage: _Storage | _StorageView, offset: int, size: tuple[int, ...], stride: tuple[int, ...]):
    self.storage, self.offset, self.size, self.stride = storage, offset, size, stride
  def array(self, where: str, budget: _Budget) -> np.ndarray:
    data, size, stride, off = self.storage.data, self.size, self.stride, self.offset
    if len(size) > 32 or math.prod(max(n, 1) for n in size) > 1 << 62: raise PthError(f"{where}: size {size} is too large to be a tensor")
    if 0 in size: return np.zeros(size, dtype=data.dtype.newbyteorder("="))
    last = off + sum((n - 1) * s for n, s in zip(size, stride))
    if last >= data.size: raise PthError(f"{where} (offset {off}, size {size}, stride {stride}) reads past its storage of {data.size} elements")
    numel = math.prod(size)
    nbytes = numel * data.itemsize
    # checked before allocating: a stride-0 view can claim any size, and views of one storage can be many
    if nbytes > budget.expand:
      what = (f"expands a storage of {data.size} elements to {numel} elements ({nbytes} bytes)" if numel > data.size else
              f"needs {nbytes} bytes, and the tensors before it used {budget.expand_total - budget.expand}")
      raise PthError(f"{where} (size {size}, stride {stride}) {what}: more than the {budget.expand_total} bytes of tensors allowed "
                     f"{budget.limits()} ({EXPAND_RATIO}x its size, at least {EXPAND_SLACK})")
    budget.expand -= nbytes
    base = data[off:]
    arr = np.lib.stride_tricks.as_strided(base, shape=size, strides=tuple(s * base.itemsize for s in stride), writeable=False)
    out = np.array(arr, dtype=arr.dtype.newbyteorder("="), order="C")  # a copy: never alias the file buffer
    return (out.astype(np.uint32) << 16).view(np.float32) if self.storage.stype.name == "BFloat16Storage" else out

def _rebuild_tensor(storage: Any, storage_offset: Any, size: Any, stride: Any, *_ignored: Any) -> _PendingTensor:
  """torch._utils._rebuild_tensor(_v2): a strided view into a storage (read out as a contiguous numpy array later).

  The extra arguments of _v2 (requires_grad, backward_hooks, metadata) carry no data and are ignored."""
  if not isinstance(storage, (_Storage, _StorageView)): raise PthError(f"tensor rebuilt from {type(storage).__name__}, not a storage")
  size, stride = _check_ints("tensor size", size), _check_ints("tensor stride", stride)
  if not isinstance(storage_offset, int) or storage_offset < 0 or len(size) != len(stride) or any(s < 0 for s in size + stride):
    raise PthError(f"bad tensor geometry: offset {storage_offset!r}, size {size}, stride {stride}")
  return _PendingTensor(storage, storage_offset, size, stride)

def _rebuild_parameter(data: Any, requires_grad: Any = None, backward_hooks: Any = None, *_ignored: Any) -> Any:
  """torch._utils._rebuild_parameter: an nn.Parameter is just its data here."""
  return data

_ALLOWED: dict[tuple[str, str], Any] = {
  ("collections", "OrderedDict"): OrderedDict,
  ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
  ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
  ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
  **{("torch", name): _StorageType(name) for name in _STORAGE_DTYPES},
}

class _SafeUnpickler(pickle.Unpickler):
  def __init__(self, file: Any, source: str, persistent_load: Callable[[Any], Any] | None):
    super().__init__(file, encoding="utf-8")
    self.source, self._pload = source, persistent_load
  def find_class(self, module: str, name: str) -> Any:
    if (module, name) in _ALLOWED: return _ALLOWED[(module, name)]
    raise UnsafePickleError(f"{self.source}: refusing to load: the pickle references the global {module}.{name}, which could run code; "
                            f"this loader only rebuilds tensors, OrderedDict, containers and scalars. Load it with torch.load(weights_only=True) "
                            f"only if you trust the file.")
  def persistent_load(self, pid: Any) -> Any:
    if self._pload is None: raise UnsafePickleError(f"{self.source}: unexpected persistent id {pid!r} (no storages in this pickle)")
    if not isinstance(pid, tuple) or not pid or pid[0] != "storage":
      raise UnsafePickleError(f"{self.source}: refusing persistent id {pid!r}: only ('storage', ...) records are allowed")
    return self._pload(pid)

def _safe_load_pickle(data: bytes | io.BytesIO, source: str, persistent_load: Callable[[Any], Any] | None = None) -> Any:
  f = io.BytesIO(data) if isinstance(data, (bytes, bytearray)) else data
  try: return _SafeUnpickler(f, source, persistent_load).load()
  except UnsafePickleError: raise
  except PthError as e:  # raised by the rebuild functions, which do not know the file
    if str(e).startswith(source): raise
    raise PthError(f"{source}: {e}") from None
  except (pickle.UnpicklingError, EOFError, ValueError, TypeError, KeyError, IndexError, struct.error, UnicodeDecodeError) as e:
    raise PthError(f"{source}: corrupt or unsupported pickle: {type(e).__name__}: {e}") from None

def _storage_type(source: str, st: Any) -> _StorageType:
  if not isinstance(st, _StorageType): raise UnsafePickleError(f"{source}: storage record names {st!r}, not a torch storage type")
  return st

def _read_entry(path: str, zf: zipfile.ZipFile, name: str, what: str, budget: _Budget, need: int | None = None) -> bytes:
  """A zip entry's bytes, decompressing at most what the budget allows; `need` (bytes) is checked before reading."""
  info = zf.getinfo(name)
  if need is not None and info.file_size < need:
    raise PthError(f"{path}: {what} has {info.file_size} bytes (zip entry {name!r}), needs {need}")
  if info.file_size > budget.inflate:
    raise PthError(f"{path}: {what}: zip entry {name!r} would decompress to {info.file_size} bytes ({info.compress_size} stored), more than "
                   f"the {budget.inflate} bytes left of the {budget.inflate_total} allowed {budget.limits()} "
                   f"({INFLATE_RATIO}x its size, at least {INFLATE_SLACK})")
  try:
    with zf.open(info) as f: raw = f.read(budget.inflate + 1)  # ZipExtFile also stops at file_size and checks the CRC
  except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, OSError) as e:
    raise PthError(f"{path}: {what}: corrupt zip entry {name!r}: {e}") from None
  if len(raw) > budget.inflate: raise PthError(f"{path}: {what}: zip entry {name!r} decompresses to more than the {budget.inflate} bytes allowed")
  budget.inflate -= len(raw)
  return raw

def _load_zip(path: str, zf: zipfile.ZipFile, budget: _Budget) -> Any:
  names = zf.namelist()
  pkls = [n for n in names if n.endswith("data.pkl") and n.count("/") == 1]
  if len(pkls) != 1: raise PthError(f"{path}: a torch zip file has one <dir>/data.pkl, found {pkls or 'none'}")
  prefix = pkls[0][:-len("data.pkl")]
  if prefix + "byteorder" in names and _read_entry(path, zf, prefix + "byteorder", "byteorder", budget).strip() not in (b"little", b""):
    raise PthError(f"{path}: big-endian torch files are not supported")
  storages: dict[str, _Storage] = {}
  def fetch(key: str, stype: _StorageType, numel: int) -> np.ndarray:
    entry = f"{prefix}data/{key}"
    if entry not in names: raise PthError(f"{path}: storage {key!r} is missing ({entry})")
    need = None if stype.name == "UntypedStorage" else numel * stype.dtype.itemsize
    raw = _read_entry(path, zf, entry, f"storage {key!r}", budget, need)
    if stype.name == "UntypedStorage": numel = len(raw)
    if len(raw) < numel * stype.dtype.itemsize: raise PthError(f"{path}: storage {key!r} has {len(raw)} bytes, needs {numel * stype.dtype.itemsize}")
    return np.frombuffer(raw, dtype=stype.dtype, count=numel)
  def pload(pid: tuple) -> _Storage:
    if len(pid) != 5: raise PthError(f"{path}: storage record {pid!r} should have 5 fields")
    _, stype, key, _location, numel = pid
    if not isinstance(key, str) or "/" in key or ".." in key or not isinstance(numel, int) or numel < 0:
      raise PthError(f"{path}: bad storage record {pid!r}")
    if key not in storages: storages[key] = _Storage(_storage_type(path, stype), key, numel, fetch)
    return storages[key]
  return _materialize(_safe_load_pickle(_read_entry(path, zf, pkls[0], "the pickle", budget), path, pload), path, budget)

def _load_legacy(path: str, data: bytes, budget: _Budget) -> Any:
  f = io.BytesIO(data)
  magic = _safe_load_pickle(f, path)
  if magic != LEGACY_MAGIC: raise PthError(f"{path}: not a torch file: no zip archive and no legacy magic number (got {magic!r:.60})")
  protocol = _safe_load_pickle(f, path)
  if protocol != LEGACY_PROTOCOL: raise PthError(f"{path}: unsupported legacy torch protocol {protocol!r}")
  sys_info = _safe_load_pickle(f, path)
  if isinstance(sys_info, dict) and not sys_info.get("little_endian", True): raise PthError(f"{path}: big-endian torch files are not supported")
  roots: dict[str, _Storage] = {}
  def fetch(key: str, stype: _StorageType, numel: int) -> np.ndarray: return raw_storages[key]
  def pload(pid: tuple) -> _Storage | _StorageView:
    if len(pid) != 6: raise PthError(f"{path}: legacy storage record {pid!r} should have 6 fields")
    _, stype, key, _location, numel, view = pid
    if not isinstance(key, str) or not isinstance(numel, int) or numel < 0: raise PthError(f"{path}: bad storage record {pid!r}")
    if key not in roots: roots[key] = _Storage(_storage_type(path, stype), key, numel, fetch)
    if view is None: return roots[key]
    if not isinstance(view, tuple) or len(view) != 3: raise PthError(f"{path}: bad storage view {view!r}")
    offset, size = _check_ints("storage view", view[1:])
    return _StorageView(roots[key], offset, size)
  result = _safe_load_pickle(f, path, pload)
  keys = _safe_load_pickle(f, path)
  if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys): raise PthError(f"{path}: bad storage key list {keys!r:.80}")
  raw_storages: dict[str, np.ndarray] = {}
  pos = f.tell()
  for key in keys:
    if key not in roots: raise PthError(f"{path}: storage {key!r} is listed but no tensor uses it")
    if pos + 8 > len(data): raise PthError(f"{path}: truncated file: storage {key!r} header at offset {pos}")
    (numel,) = struct.unpack_from("<q", data, pos)
    st = roots[key].stype.dtype
    nbytes = numel * st.itemsize
    if numel < 0 or pos + 8 + nbytes > len(data): raise PthError(f"{path}: truncated file: storage {key!r} needs {nbytes} bytes at offset {pos + 8}")
    raw_storages[key] = np.frombuffer(data, dtype=st, count=numel, offset=pos + 8)
    pos += 8 + nbytes
  missing = [k for k in roots if k not in raw_storages]
  if missing: raise PthError(f"{path}: storages {missing[:5]} are used but not stored")
  return _materialize(result, path, budget)

def _materialize(obj: Any, path: str, budget: _Budget) -> Any:
  """Replace every _PendingTensor in the loaded containers by its numpy array (keeping dict/OrderedDict/list/tuple).

  Containers the pickle shares (its memo) are converted once and stay shared, so neither a reference cycle nor a DAG of
  shared lists (2^depth paths) is walked more than once; nesting deeper than MAX_NESTING is refused."""
  memo: dict[int, Any] = {}
  def walk(o: Any, name: str, depth: int) -> Any:
    if isinstance(o, _PendingTensor): return o.array(f"{path}: tensor {name!r}", budget)
    if not isinstance(o, (dict, list, tuple)): return o
    if id(o) in memo: return memo[id(o)]
    if depth >= MAX_NESTING: raise PthError(f"{path}: the pickled object nests containers more than {MAX_NESTING} deep (at {name!r:.80})")
    sub = lambda k: f"{name}.{k}" if name else str(k)
    out: Any  # the copy: a dict, a list or a tuple
    if isinstance(o, dict):
      out = memo[id(o)] = type(o)() if type(o) in (dict, OrderedDict) else dict()
      for k, v in o.items(): out[k] = walk(v, sub(k), depth + 1)
      return out
    if isinstance(o, list):
      out = memo[id(o)] = []
      out.extend(walk(v, sub(i), depth + 1) for i, v in enumerate(o))
      return out
    out = memo[id(o)] = tuple(walk(v, sub(i), depth + 1) for i, v in enumerate(o))
    return out
  return walk(obj, "", 0)

def load_pth(path: str | os.PathLike) -> Any:
  """Load a torch.save file safely: tensors become numpy arrays; any non-allowed global raises UnsafePickleError."""
  path = os.fspath(path)
  try:
    with open(path, "rb") as fh: data = fh.read()
  except OSError as e: raise PthError(f"{path}: cannot open: {e.strerror}") from None
  if zipfile.is_zipfile(io.BytesIO(data)):
    try: zf = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, zlib.error, ValueError, EOFError) as e: raise PthError(f"{path}: corrupt zip archive: {e}") from None
    with zf: return _load_zip(path, zf, _Budget(path, len(data)))
  if data[:5] == b"\x1f\x8b\x08\x00\x00" or data[257:262] == b"ustar": raise PthError(f"{path}: the pre-2017 tar torch format is not supported")
  return _load_legacy(path, data, _Budget(path, len(data)))

def state_dict_arrays(obj: Any, path: str = "<pth>") -> dict[str, np.ndarray]:
  """The {name: array} of a loaded checkpoint: the object itself, or its 'state_dict'/'model' entry."""
  if isinstance(obj, dict) and not all(isinstance(v, np.ndarray) for v in obj.values()):
    for k in ("state_dict", "model"):
      if isinstance(obj.get(k), dict): return state_dict_arrays(obj[k], path)
  if not isinstance(obj, dict) or not all(isinstance(v, np.ndarray) for v in obj.values()):
    raise PthError(f"{path}: expected a state dict of tensors, got {type(obj).__name__}")
  return dict(obj)

__all__ = ["load_pth", "state_dict_arrays", "UnsafePickleError", "PthError"]
