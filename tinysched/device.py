"""Devices and device buffers.

A device name is `NUMPY` (the reference interpreter) or `OPENCL[:n]`. `Device.DEFAULT` comes from the
environment variable TINYSCHED_DEVICE, else OPENCL where an OpenCL platform exists, else NUMPY.
The backends register themselves (tinysched/runtime/__init__.py, imported by realize.py): this module never imports one,
and OpenCL's loads at its first use, so importing tinysched never needs pyopencl.
"""
from __future__ import annotations
import os, sys
from typing import Any, Callable, Sequence
import numpy as np
from tinysched.dtype import DType, dtypes

class DeviceError(RuntimeError): pass

def copy_bytes(dst: np.ndarray, src: np.ndarray) -> None:
  """What a same-device COPY does, on host arrays: the first min(dst, src) bytes of src into dst, bit for bit."""
  n = min(dst.nbytes, src.nbytes)
  dst.view(np.uint8)[:n] = src.view(np.uint8)[:n]

class Backend:
  """What a device must provide: memory and the execution of one kernel AST."""
  name: str
  def alloc(self, size: int, dtype: DType) -> Any: raise NotImplementedError
  def free(self, handle: Any) -> None: pass
  def copyin(self, handle: Any, src: np.ndarray) -> None: raise NotImplementedError
  def copyout(self, handle: Any, size: int, dtype: DType) -> np.ndarray: raise NotImplementedError
  def exec_ast(self, ast, bufs: list[Buffer], var_vals: dict) -> Any:
    """Run a kernel; may report its time: None (not known), seconds (a float), or a callable that returns the
    seconds later (waiting for the kernel), which GlobalCounters calls only when its time_sum_s is read."""
    raise NotImplementedError
  def synchronize(self) -> None: pass
  def copy(self, dst: Buffer, src: Buffer) -> None:
    """The first min(dst, src) bytes of src into dst, both on this device (a same-device COPY). Through the host here;
    a device with its own copy does it without the round trip (and without waiting for its queue)."""
    if min(dst.nbytes, src.nbytes):
      full = dst.numpy()
      copy_bytes(full, src.numpy())
      dst.copyin(full)
  def prepare(self, ast, bufs: Sequence[Buffer | None], var_list: Sequence) -> Callable | None:
    """A recorded launch made ready to repeat (TinyJit): run(bufs, var_vals) doing exec_ast's work with what does not
    change between calls done once, or None (the default): the jit calls exec_ast each time."""
    return None
  compiles = False  # whether prebuild can save work (a device that compiles kernels)
  def prebuild(self, asts: Sequence = (), sources: Sequence[tuple[str, str]] = ()) -> int:
    """Compile many kernels ahead of their launches, together where the device can (kernel ASTs with the default opts,
    and (name, source) pairs); returns how many were compiled. Launching is unchanged: this only fills caches."""
    return 0

_FACTORIES: dict[str, Callable[[str], Backend]] = {}
_AVAILABLE: dict[str, Callable[[], bool]] = {}  # whether a device of the kind exists here (for Device.DEFAULT)
def register_backend(prefix: str, factory: Callable[[str], Backend], available: Callable[[], bool] | None = None) -> None:
  _FACTORIES[prefix] = factory
  if available is not None: _AVAILABLE[prefix] = available

class _Device:
  def __init__(self) -> None: self._opened: dict[str, Backend] = {}
  @staticmethod
  def canonicalize(name: str | None) -> str:
    if name is None: return Device.DEFAULT
    n = name.upper()
    base = n.split(":")[0]
    if base not in ("NUMPY", "OPENCL"):
      raise DeviceError(f"unknown device {name!r}: use NUMPY, OPENCL or OPENCL:<n> (TINYSCHED_DEVICE or Device.DEFAULT)")
    if base == "OPENCL" and ":" in n and not n.split(":", 1)[1].isdigit():
      raise DeviceError(f"unknown device {name!r}: the OpenCL device index must be a number, e.g. OPENCL:0")
    return n
  def __getitem__(self, name: str) -> Backend:
    name = self.canonicalize(name)
    if (b := self._opened.get(name)) is None:
      prefix = name.split(":")[0]
      if prefix not in _FACTORIES: raise DeviceError(f"device {name} is not available in this build")
      b = self._opened[name] = _FACTORIES[prefix](name)
    return b
  @property
  def DEFAULT(self) -> str:
    if (d := getattr(self, "_default", None)) is None:
      env = os.environ.get("TINYSCHED_DEVICE")
      d = self.canonicalize(env) if env else _auto_default()
      self._default = d
    return d
  @DEFAULT.setter
  def DEFAULT(self, name: str) -> None: self._default = self.canonicalize(name)

_warned = False
def _auto_default() -> str:
  global _warned
  if (available := _AVAILABLE.get("OPENCL")) is not None and available(): return "OPENCL"
  if not _warned:
    _warned = True
    print("tinysched: no OpenCL platform found, using the NUMPY interpreter "
          "(install PoCL: apt-get install pocl-opencl-icd)", file=sys.stderr)
  return "NUMPY"

Device = _Device()

class Buffer:
  """`size` elements of `dtype` on `device`, allocated on first use."""
  def __init__(self, device: str, size: int, dtype: DType, base: Buffer | None = None, offset: int = 0):
    if not isinstance(size, int) or size < 0: raise ValueError(f"buffer size must be a non-negative int, got {size!r}")
    self.device, self.size, self.dtype, self._base, self.offset = device, size, dtype, base, offset
    self._handle: Any = None
  @property
  def nbytes(self) -> int: return self.size * self.dtype.itemsize
  @property
  def base(self) -> Buffer: return self._base if self._base is not None else self
  @property
  def is_allocated(self) -> bool: return self.base._handle is not None
  def allocate(self) -> Buffer:
    if self._base is not None: self._base.allocate()
    elif self._handle is None: self._handle = Device[self.device].alloc(self.size, self.dtype)
    return self
  @property
  def handle(self) -> Any:
    if not self.is_allocated: self.allocate()
    return self.base._handle
  def copyin(self, arr: np.ndarray) -> Buffer:
    arr = np.ascontiguousarray(arr).reshape(-1)
    if arr.size != self.size: raise ValueError(f"copyin of {arr.size} elements into a buffer of {self.size}")
    Device[self.device].copyin(self.handle, arr.astype(self.dtype.np, copy=False)) if self._base is None else \
      self._view_write(arr)
    return self
  def _view_write(self, arr: np.ndarray) -> None:
    full = self._base.numpy()  # type: ignore[union-attr]
    full.view(np.uint8)[self.offset:self.offset + self.nbytes] = arr.astype(self.dtype.np).view(np.uint8)
    self._base.copyin(full)  # type: ignore[union-attr]
  def numpy(self) -> np.ndarray:
    """A host copy of the contents (flat)."""
    if self._base is not None:
      raw = self._base.numpy().view(np.uint8)[self.offset:self.offset + self.nbytes]
      return raw.view(self.dtype.np).copy()  # type: ignore[arg-type]  # a buffer's dtype has a numpy type (only void has none)
    return Device[self.device].copyout(self.handle, self.size, self.dtype)
  def __repr__(self): return f"<Buffer {self.device} {self.size} {self.dtype!r}{' view' if self._base else ''}>"
  def __del__(self):
    try:
      if self._base is None and self._handle is not None: Device[self.device].free(self._handle)
    except Exception: pass  # interpreter shutdown: nothing to free into

__all__ = ["Device", "Buffer", "Backend", "DeviceError", "register_backend", "dtypes"]
