"""Tensor: the user-facing lazy tensor. Method names and semantics follow tinygrad's public Tensor API.

Nothing runs until realize()/numpy(): every method builds LazyBuffers through autograd Functions.
"""
from __future__ import annotations
import functools, math
from typing import Any, Callable, Iterable, Sequence, Union
import numpy as np
from tinysched.dtype import DType, dtypes, least_upper_dtype, least_upper_float, ConstType
from tinysched.ops import Ops
from tinysched.uop import UOp, sint, resolve, smax, sym_infer
from tinysched.lazy import LazyBuffer, Metadata, METADATA
from tinysched.device import Device, Buffer
from tinysched.helpers import prod, argsort, all_int, make_tuple, flatten, round_up
from tinysched import function as F

DTypeLike = Union[DType, str]

def to_dtype(x: DTypeLike) -> DType: return x if isinstance(x, DType) else dtypes.from_name(x)

def _from_np(x: np.ndarray, device: str) -> LazyBuffer:
  d = dtypes.from_np(x.dtype)
  buf = Buffer(device, x.size, d)
  if x.size: buf.copyin(x)
  else: buf.allocate()
  return LazyBuffer.from_buffer(buf, x.shape)

def _ne(a: sint, b: sint) -> Any: return a.ne(b) if isinstance(a, UOp) else (b.ne(a) if isinstance(b, UOp) else a != b)

def _broadcast_shape(*shapes: tuple[sint, ...]) -> tuple[sint, ...]:
  nd = max((len(s) for s in shapes), default=0)
  padded = [(1,) * (nd - len(s)) + tuple(s) for s in shapes]
  out: list[sint] = []
  for dims in zip(*padded):
    non1 = [d for d in dims if not (isinstance(d, int) and d == 1)]
    if not non1: out.append(1); continue
    first = non1[0]
    if any(resolve(_ne(d, first)) for d in non1[1:]):
      raise ValueError(f"cannot broadcast shapes {', '.join(str(tuple(s)) for s in shapes)}: dimension sizes {tuple(dims)} differ")
    out.append(first)
  return tuple(out)

class Tensor:
  """A lazily evaluated n-dimensional array with automatic differentiation."""
  __slots__ = ("lazydata", "requires_grad", "grad", "_ctx")
  training: bool = False
  no_grad: bool = False
  _seed: int = 0x5EED
  _rng_counter: int = 0

  def __init__(self, data: Any, device: str | None = None, dtype: DTypeLike | None = None, requires_grad: bool | None = None):
    dev = Device.canonicalize(device)
    dt = to_dtype(dtype) if dtype is not None else None
    self.grad: Tensor | None = None
    self.requires_grad: bool | None = requires_grad
    self._ctx: F.Function | None = None
    if isinstance(data, LazyBuffer):
      if dt is not None and data.dtype != dt: raise TypeError(f"LazyBuffer has dtype {data.dtype}, asked for {dt}")
      lb = data
    elif data is None: lb = LazyBuffer.metaop(Ops.EMPTY, (0,), dt or dtypes.default_float, dev)
    elif isinstance(data, UOp):
      if data.op is not Ops.BIND: raise ValueError(f"a Tensor from a UOp needs a bound Variable, got {data.op}")
      lb = LazyBuffer.metaop(Ops.CONST, (), dt or data.dtype, dev, data)
    elif isinstance(data, (bool, int, float)):
      lb = LazyBuffer.metaop(Ops.CONST, (), dt or dtypes.from_py(data), dev, data)
    elif isinstance(data, bytes): lb = _from_np(np.frombuffer(data, np.uint8), dev)
    elif isinstance(data, (list, tuple)):
      d = dt or (dtypes.from_py(data) if data else dtypes.default_float)
      try: arr = np.array(data, dtype=d.np)
      except ValueError as e: raise ValueError(f"cannot make a Tensor from a ragged or invalid list: {e}") from None
      lb = _from_np(arr, dev)
    elif isinstance(data, np.ndarray):
      arr = data if dt is None else data.astype(dt.np)
      if arr.dtype == np.float64 and dt is None: arr = arr  # numpy float64 stays float64 (as in tinygrad)
      lb = _from_np(np.ascontiguousarray(arr), dev)
    elif isinstance(data, Tensor): lb = data.lazydata if dt is None else data.cast(dt).lazydata
    else: raise TypeError(f"cannot make a Tensor from {type(data).__name__}")
    if lb.device != dev and not isinstance(data, LazyBuffer): lb = lb.copy_to_device(dev)
    self.lazydata: LazyBuffer = lb

  def __repr__(self): return f"<Tensor {self.lazydata!r} on {self.device} with grad {(self.grad.lazydata if self.grad is not None else None)!r}>"
  def __hash__(self): return id(self)
  def __bool__(self): raise TypeError("the truth value of a Tensor is ambiguous: use .item() or .numpy()")
  def __len__(self):
    if not self.shape: raise TypeError("len() of a 0-d tensor")
    return self.shape[0]

  @property
  def device(self) -> str: return self.lazydata.device
  @property
  def shape(self) -> tuple[sint, ...]: return self.lazydata.shape
  @property
  def dtype(self) -> DType: return self.lazydata.dtype
  @property
  def ndim(self) -> int: return len(self.shape)
  def numel(self) -> sint: return prod(self.shape)
  def element_size(self) -> int: return self.dtype.itemsize
  def nbytes(self) -> int: return self.numel() * self.element_size()
  def is_floating_point(self) -> bool: return dtypes.is_float(self.dtype)
  def size(self, dim: int | None = None) -> sint | tuple[sint, ...]: return self.shape if dim is None else self.shape[dim]

  # *** realization ***
  def schedule_with_vars(self, *lst: Tensor):
    """The kernels that would realize this tensor (and `lst`), and the values of bound Variables."""
    from tinysched.schedule import create_schedule_with_vars
    return create_schedule_with_vars([x.lazydata for x in (self,) + lst])
  def schedule(self, *lst: Tensor):
    from tinysched.schedule import ScheduleError
    schedule, var_vals = self.schedule_with_vars(*lst)
    if var_vals: raise ScheduleError(f"schedule has bound Variables {[v.arg[0] for v in var_vals]}: use schedule_with_vars")
    return schedule
  def realize(self, *lst: Tensor) -> Tensor:
    from tinysched.realize import run_schedule
    run_schedule(*self.schedule_with_vars(*lst))
    return self
  def replace(self, x: Tensor) -> Tensor:
    if self.shape != x.shape: raise ValueError(f"replace shape mismatch {self.shape} != {x.shape}")
    self.lazydata = x.lazydata
    return self
  def assign(self, x: Any) -> Tensor:
    """Write x into this tensor's memory (in place once realized)."""
    if not isinstance(x, Tensor): x = Tensor(x, device=self.device, dtype=self.dtype)
    if self.lazydata is x.lazydata: return self
    if self.shape != x.shape: raise ValueError(f"assign shape mismatch: target {self.shape} vs value {x.shape}")
    if self.device != x.device: raise ValueError(f"assign device mismatch: target {self.device} vs value {x.device}")
    if self.dtype != x.dtype: raise TypeError(f"assign dtype mismatch: target {self.dtype} vs value {x.dtype}")
    if self.requires_grad and not Tensor.no_grad and x.requires_grad: raise RuntimeError("cannot assign to a tensor that requires grad")
    if not self.lazydata.is_realized: return self.replace(x)
    self.lazydata = self.lazydata.assign(x.lazydata)
    return self
  def detach(self) -> Tensor: return Tensor(self.lazydata, requires_grad=False)
  def _data(self) -> np.ndarray:
    if 0 in self.shape: return np.zeros(self.shape, dtype=self.dtype.np)
    t = self.cast(self.dtype.base).contiguous().realize()
    buf = t.lazydata.base.realized
    assert buf is not None
    return buf.numpy()[:prod(t.shape)] if all_int(t.shape) else buf.numpy()
  def numpy(self) -> np.ndarray:
    if not all_int(self.shape): raise ValueError(f"numpy() needs a concrete shape, got {self.shape}")
    return self._data().reshape(self.shape)
  def tolist(self) -> Any: return self.numpy().tolist()
  def item(self) -> ConstType:
    if self.numel() != 1: raise ValueError(f"item() needs a tensor with one element, got shape {self.shape}")
    return self.numpy().reshape(-1)[0].item()
  def data(self) -> memoryview: return memoryview(self.numpy())
  def to(self, device: str | None) -> Tensor:
    device = Device.canonicalize(device)
    if device == self.device: return self
    ret = Tensor(self.lazydata.copy_to_device(device), requires_grad=self.requires_grad)
    if self.grad is not None: ret.grad = self.grad.to(device)
    return ret
  def contiguous(self) -> Tensor: return F.Contiguous.apply(self)
  def contiguous_backward(self) -> Tensor: return F.ContiguousBackward.apply(self)

  # *** creation ***
  @staticmethod
  def _metaop(op: Ops, shape: tuple[sint, ...], device: str | None = None, dtype: DTypeLike | None = None, arg: Any = None, **kwargs):
    return Tensor(LazyBuffer.metaop(op, shape, to_dtype(dtype) if dtype is not None else dtypes.default_float,
                                    Device.canonicalize(device), arg), **kwargs)
  @staticmethod
  def empty(*shape, **kwargs) -> Tensor: return Tensor._metaop(Ops.EMPTY, _argfix(*shape), **kwargs)
  @staticmethod
  def full(shape: tuple[sint, ...], fill_value: ConstType, **kwargs) -> Tensor:
    shape = _argfix(shape)
    if any(isinstance(s, int) and s < 0 for s in shape): raise ValueError(f"full: negative dimension in shape {shape}")
    return Tensor(fill_value, **kwargs).reshape((1,) * len(shape)).expand(shape)
  @staticmethod
  def zeros(*shape, **kwargs) -> Tensor: return Tensor.full(_argfix(*shape), 0.0, dtype=kwargs.pop("dtype", dtypes.default_float), **kwargs)
  @staticmethod
  def ones(*shape, **kwargs) -> Tensor: return Tensor.full(_argfix(*shape), 1.0, dtype=kwargs.pop("dtype", dtypes.default_float), **kwargs)
  def full_like(self, fill_value: ConstType, **kwargs) -> Tensor:
    return Tensor.full(self.shape, fill_value, dtype=kwargs.pop("dtype", self.dtype), device=kwargs.pop("device", self.device), **kwargs)
  def zeros_like(self, **kwargs) -> Tensor: return self.full_like(0, **kwargs)
  def ones_like(self, **kwargs) -> Tensor: return self.full_like(1, **kwargs)
  @staticmethod
  def arange(start, stop=None, step=1, **kwargs) -> Tensor:
    if stop is None: stop, start = start, 0
    if step == 0: raise ValueError("arange: step must not be zero")
    dtype = kwargs.pop("dtype", dtypes.default_float if any(isinstance(x, float) for x in (start, stop, step)) else dtypes.default_int)
    n = max(math.ceil((stop - start) / step), 0)
    if n == 0: return Tensor.empty(0, dtype=dtype, **kwargs)
    # cumsum of step via a reduce over a padded triangle, like tinygrad: one kernel, no host data
    return (Tensor.full((n,), step, dtype=dtype, **kwargs)._cumsum() + (start - step)).cast(dtype)
  @staticmethod
  def eye(n: int, m: int | None = None, **kwargs) -> Tensor:
    if n < 0 or (m is not None and m < 0): raise ValueError(f"eye: dimensions must be non-negative, got n={n}, m={m}")
    m_ = n if m is None else m
    return Tensor.ones((n, 1), **kwargs).pad((None, (0, m_))).flatten().shrink(((0, n * m_),)).reshape(n, m_) if n and m_ else \
      Tensor.zeros(n, m_, **kwargs)
  @staticmethod
  def manual_seed(seed: int = 0) -> None: Tensor._seed, Tensor._rng_counter = seed, 0
  @staticmethod
  def _rng() -> np.random.Generator:
    # host-side generator: deterministic given the seed and the number of calls, in any process
    Tensor._rng_counter += 1
    return np.random.default_rng([Tensor._seed, Tensor._rng_counter])
  @staticmethod
  def rand(*shape, device: str | None = None, dtype: DTypeLike | None = None, **kwargs) -> Tensor:
    dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
    shp = _argfix(*shape)
    if not all_int(shp): raise ValueError(f"rand needs a concrete shape, got {shp}")
    return Tensor(Tensor._rng().random(shp, dtype=np.float32).astype(dt.np), device=device, **kwargs)
  @staticmethod
  def randn(*shape, device: str | None = None, dtype: DTypeLike | None = None, **kwargs) -> Tensor:
    dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
    shp = _argfix(*shape)
    if not all_int(shp): raise ValueError(f"randn needs a concrete shape, got {shp}")
    return Tensor(Tensor._rng().standard_normal(shp, dtype=np.float32).astype(dt.np), device=device, **kwargs)
  @staticmethod
  def randint(*shape, low: int = 0, high: int = 10, **kwargs) -> Tensor:
    if low >= high: raise ValueError(f"randint: low ({low}) must be below high ({high})")
    dt = to_dtype(kwargs.pop("dtype", dtypes.int32))
    return Tensor(Tensor._rng().integers(low, high, _argfix(*shape)).astype(dt.np), **kwargs)
  @staticmethod
  def uniform(*shape, low: float = 0.0, high: float = 1.0, **kwargs) -> Tensor:
    dt = kwargs.pop("dtype", dtypes.default_float)
    return ((high - low) * Tensor.rand(*shape, **kwargs) + low).cast(dt)
  @staticmethod
  def normal(*shape, mean: float = 0.0, std: float = 1.0, **kwargs) -> Tensor: return (std * Tensor.randn(*shape, **kwargs)) + mean
  @staticmethod
  def scaled_uniform(*shape, **kwargs) -> Tensor:
    return Tensor.uniform(*shape, low=-1.0, high=1.0, **kwargs).mul(prod(_argfix(*shape)) ** -0.5)
  @staticmethod
  def glorot_uniform(*shape, **kwargs) -> Tensor:
    s = _argfix(*shape)
    return Tensor.uniform(*s, low=-1.0, high=1.0, **kwargs).mul((6 / (s[0] + prod(s[1:]))) ** 0.5)
  @staticmethod
  def kaiming_uniform(*shape, a: float = 0.01, **kwargs) -> Tensor:
    s = _argfix(*shape)
    bound = math.sqrt(3.0) * math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(prod(s[1:]))
    return Tensor.uniform(*s, low=-bound, high=bound, **kwargs)
  @staticmethod
  def kaiming_normal(*shape, a: float = 0.01, **kwargs) -> Tensor:
    s = _argfix(*shape)
    std = math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(prod(s[1:]))
    return Tensor.normal(*s, mean=0.0, std=std, **kwargs)
  def rand_like(self, **kwargs) -> Tensor:
    return Tensor.rand(*self.shape, device=kwargs.pop("device", self.device), dtype=kwargs.pop("dtype", self.dtype), **kwargs)
  def randn_like(self, **kwargs) -> Tensor:
    return Tensor.randn(*self.shape, device=kwargs.pop("device", self.device), dtype=kwargs.pop("dtype", self.dtype), **kwargs)

  # *** autograd ***
  def _deepwalk(self) -> list[Tensor]:
    order: list[Tensor] = []
    seen: set[int] = set()  # ids, membership only
    stack: list[tuple[Tensor, bool]] = [(self, False)]
    while stack:
      node, expanded = stack.pop()
      if id(node) in seen and not expanded: continue
      if expanded:
        order.append(node); continue
      seen.add(id(node))
      stack.append((node, True))
      if node._ctx is not None:
        for p in reversed(node._ctx.parents):
          if id(p) not in seen: stack.append((p, False))
    return [t for t in order if t._ctx is not None]
  def backward(self, gradient: Tensor | None = None, retain_graph: bool = False) -> Tensor:
    """Accumulate d(self)/d(x) into x.grad for every x with requires_grad that self depends on."""
    if gradient is None:
      if self.shape != () and self.numel() != 1:
        raise RuntimeError(f"backward on a non-scalar tensor of shape {self.shape} needs a gradient argument of that shape")
      gradient = Tensor(1.0, dtype=self.dtype, device=self.device, requires_grad=False).reshape(self.shape)
    if gradient.shape != self.shape: raise ValueError(f"backward gradient shape {gradient.shape} != tensor shape {self.shape}")
    if self._ctx is None and not self.requires_grad: raise RuntimeError("backward on a tensor that does not require grad")
    self.grad = gradient
    for t0 in reversed(self._deepwalk()):
      if t0.grad is None: raise RuntimeError(f"tensor {t0.shape} has no gradient (is it connected to the loss?)")
      token = METADATA.set(Metadata(name=t0._ctx.metadata.name, backward=True) if t0._ctx.metadata else None)
      try: grads = t0._ctx.backward(t0.grad.lazydata)
      finally: METADATA.reset(token)
      grads_t = [Tensor(g, device=self.device, requires_grad=False) if g is not None else None
                 for g in ([grads] if len(t0._ctx.parents) == 1 else grads)]
      for t, g in zip(t0._ctx.parents, grads_t):
        if g is not None and t.requires_grad:
          if g.shape != t.shape: raise RuntimeError(f"gradient shape {g.shape} does not match tensor shape {t.shape} in {type(t0._ctx).__name__}")
          t.grad = g if t.grad is None else (t.grad + g)
      if not retain_graph: t0._ctx = None
    return self

  # *** movement ***
  def reshape(self, shape, *args) -> Tensor:
    new_shape = _argfix(shape, *args)
    if sum(1 for s in new_shape if isinstance(s, int) and s == -1) > 1: raise ValueError(f"reshape {new_shape}: only one dimension can be -1")
    new_shape = tuple(self.shape[i] if s is None else s for i, s in enumerate(new_shape))
    if -1 in [s for s in new_shape if isinstance(s, int)]:
      known = prod(s for s in new_shape if not (isinstance(s, int) and s == -1))
      if known == 0 or (isinstance(known, int) and isinstance(self.numel(), int) and self.numel() % known != 0):
        raise ValueError(f"cannot reshape tensor of shape {self.shape} to {new_shape}")
      new_shape = tuple(self.numel() // known if isinstance(s, int) and s == -1 else s for s in new_shape)
    return self if new_shape == self.shape else F.Reshape.apply(self, shape=new_shape)
  def view(self, *shape) -> Tensor: return self.reshape(*shape)
  def expand(self, shape, *args) -> Tensor:
    new_shape = _argfix(shape, *args)
    if len(new_shape) < self.ndim: raise ValueError(f"expand {self.shape} to {new_shape}: fewer dimensions")
    new_shape = tuple(from_ if to == -1 or to is None else to for from_, to in zip((1,) * (len(new_shape) - self.ndim) + self.shape, new_shape))
    return self._broadcast_to(new_shape)
  def _broadcast_to(self, shape: tuple[sint, ...]) -> Tensor:
    if self.shape == shape: return self
    if self.ndim > len(shape): raise ValueError(f"cannot broadcast tensor of shape {self.shape} to {shape}")
    padded = (1,) * (len(shape) - self.ndim) + self.shape
    for s, t in zip(padded, shape):
      if not (isinstance(s, int) and s == 1) and resolve(_ne(s, t)):
        raise ValueError(f"cannot broadcast tensor of shape {self.shape} to {shape}")
    return F.Expand.apply(self.reshape(padded), shape=shape)
  def permute(self, order, *args) -> Tensor:
    order_arg = tuple(self._resolve_dim(x) for x in _argfix(order, *args))
    if sorted(order_arg) != list(range(self.ndim)): raise ValueError(f"permute {_argfix(order, *args)} is not a permutation of the {self.ndim} dims of {self.shape}")
    return F.Permute.apply(self, order=order_arg)
  def flip(self, axis, *args) -> Tensor:
    axes = tuple(self._resolve_dim(x) for x in _argfix(axis, *args))
    if len(set(axes)) != len(axes): raise ValueError(f"flip: dims {axes} repeat")
    return F.Flip.apply(self, axis=axes)
  def shrink(self, arg: tuple[tuple[sint, sint] | None, ...]) -> Tensor:
    if len(arg) != self.ndim: raise ValueError(f"shrink {arg} needs {self.ndim} entries for shape {self.shape}")
    norm = tuple(x if x is not None else (0, s) for x, s in zip(arg, self.shape))
    if all(x == (0, s) for x, s in zip(norm, self.shape) if isinstance(s, int) and all(isinstance(v, int) for v in x)) and \
        all_int(flatten(norm)): return self
    return F.Shrink.apply(self, arg=norm)
  def pad(self, padding, mode: str = "constant", value: float = 0.0) -> Tensor:
    """padding: per dimension (before, after) for every dim, or a flat torch-style tuple starting from the last dim."""
    if mode != "constant": raise NotImplementedError(f"pad mode {mode!r} (only 'constant')")
    if padding and all(isinstance(p, int) for p in padding):
      if len(padding) % 2 != 0 or len(padding) // 2 > self.ndim: raise ValueError(f"flat padding {padding} does not fit shape {self.shape}")
      pairs = [(padding[i], padding[i + 1]) for i in range(0, len(padding), 2)][::-1]
      padding = tuple([None] * (self.ndim - len(pairs)) + pairs)
    if len(padding) != self.ndim: raise ValueError(f"padding {padding} needs {self.ndim} entries for shape {self.shape}")
    pads = tuple(p if p is not None else (0, 0) for p in padding)
    if any(isinstance(b, int) and b < 0 or isinstance(a, int) and a < 0 for b, a in pads):
      # negative padding crops, like torch
      shr = tuple((-min(b, 0), s + min(a, 0)) for (b, a), s in zip(pads, self.shape))
      return self.shrink(shr).pad(tuple((max(b, 0), max(a, 0)) for b, a in pads), value=value)
    if all(b == 0 and a == 0 for b, a in pads if isinstance(b, int) and isinstance(a, int)) and all_int(flatten(pads)): return self
    ret = F.Pad.apply(self, arg=pads)
    if value == 0: return ret
    return ret + F.Pad.apply(Tensor.ones_like(self), arg=pads).where(0, value)
  def transpose(self, dim0: int = 1, dim1: int = 0) -> Tensor:
    order = list(range(self.ndim))
    d0, d1 = self._resolve_dim(dim0), self._resolve_dim(dim1)
    order[d0], order[d1] = order[d1], order[d0]
    return self.permute(order)
  @property
  def T(self) -> Tensor: return self.transpose()
  def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    s, e = self._resolve_dim(start_dim), self._resolve_dim(end_dim)
    return self.reshape(self.shape[:s] + (prod(self.shape[s:e + 1]),) + self.shape[e + 1:])
  def unflatten(self, dim: int, sizes: tuple[int, ...]) -> Tensor:
    d = self._resolve_dim(dim)
    return self.reshape(self.shape[:d] + tuple(sizes) + self.shape[d + 1:])
  def squeeze(self, dim: int | None = None) -> Tensor:
    if dim is None: return self.reshape(tuple(s for s in self.shape if not (isinstance(s, int) and s == 1)))
    d = self._resolve_dim(dim)
    return self if not self.ndim or self.shape[d] != 1 else self.reshape(self.shape[:d] + self.shape[d + 1:])
  def unsqueeze(self, dim: int) -> Tensor:
    d = self._resolve_dim(dim, extra=True)
    return self.reshape(self.shape[:d] + (1,) + self.shape[d:])
  def _resolve_dim(self, dim: int, *, extra: bool = False) -> int:
    total = self.ndim + int(extra)
    if not isinstance(dim, int) or not -max(1, total) <= dim < max(1, total):
      raise IndexError(f"dimension {dim} is out of range for a tensor of shape {self.shape} (expected [{-max(1, total)}, {max(1, total) - 1}])")
    return dim + total if dim < 0 else dim

  # *** reduce ***
  def _reduce(self, fxn: type[F.Function], axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
    axis_ = tuple(range(self.ndim)) if axis is None else tuple(self._resolve_dim(a) for a in make_tuple(axis, 1))
    if self.ndim == 0: axis_ = ()
    ret = fxn.apply(self, axis=axis_)
    return ret if keepdim else ret.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axis_))
  def sum(self, axis=None, keepdim: bool = False, acc_dtype: DTypeLike | None = None) -> Tensor:
    out_dt = _sum_dtype(self.dtype) if acc_dtype is None else to_dtype(acc_dtype)
    # half sums accumulate in float32 and cast back, like tinygrad
    acc = dtypes.float32 if out_dt == dtypes.float16 else out_dt
    ret = self.cast(acc)._reduce(F.Sum, axis, keepdim)
    return ret.cast(out_dt) if acc != out_dt else ret
  def prod(self, axis=None, keepdim: bool = False, acc_dtype: DTypeLike | None = None) -> Tensor:
    return self.cast(to_dtype(acc_dtype) if acc_dtype is not None else _sum_dtype(self.dtype))._reduce(F.Prod, axis, keepdim)
  def max(self, axis=None, keepdim: bool = False) -> Tensor: return self._reduce(F.Max, axis, keepdim)
  def min(self, axis=None, keepdim: bool = False) -> Tensor:
    if dtypes.is_int(self.dtype) or dtypes.is_bool(self.dtype): return ~((~self).max(axis=axis, keepdim=keepdim))
    return -((-self).max(axis=axis, keepdim=keepdim))
  def mean(self, axis=None, keepdim: bool = False) -> Tensor:
    out = self.sum(axis=axis, keepdim=keepdim)
    n = prod(self.shape) // prod(out.shape) if 0 not in out.shape else 1
    dt = least_upper_float(self.dtype)
    return out.cast(dt).div(n)
  def var(self, axis=None, keepdim: bool = False, correction: int = 1) -> Tensor:
    squares = (self - self.mean(axis=axis, keepdim=True)).square()
    n = prod(si for si, so in zip(self.shape, squares.sum(axis=axis, keepdim=True).shape) if resolve(_ne(si, so)))
    return squares.sum(axis=axis, keepdim=keepdim).div(smax(0, n - correction) if isinstance(n, UOp) else max(0, n - correction))
  def std(self, axis=None, keepdim: bool = False, correction: int = 1) -> Tensor: return self.var(axis, keepdim, correction).sqrt()

  # *** elementwise ***
  def cast(self, dtype: DTypeLike) -> Tensor:
    dt = to_dtype(dtype)
    return self if self.dtype == dt else F.Cast.apply(self, dtype=dt)
  def bitcast(self, dtype: DTypeLike) -> Tensor:
    dt = to_dtype(dtype)
    if self.requires_grad: raise RuntimeError("can't backprop through bitcast")
    return F.Cast.apply(self, dtype=dt, bitcast=True) if self.dtype != dt else self
  def float(self) -> Tensor: return self.cast(dtypes.float32)
  def half(self) -> Tensor: return self.cast(dtypes.float16)
  def double(self) -> Tensor: return self.cast(dtypes.float64)
  def int(self) -> Tensor: return self.cast(dtypes.int32)
  def long(self) -> Tensor: return self.cast(dtypes.int64)
  def bool(self) -> Tensor: return self.cast(dtypes.bool)

  def _to_float(self) -> Tensor: return self.cast(least_upper_float(self.dtype))
  def neg(self) -> Tensor: return self.logical_not() if self.dtype == dtypes.bool else F.Neg.apply(self)
  def logical_not(self) -> Tensor: return F.Neq.apply(*self._broadcasted(True))
  def log(self) -> Tensor: return F.Log.apply(self._to_float())
  def log2(self) -> Tensor: return self.log() / math.log(2)
  def exp(self) -> Tensor: return F.Exp.apply(self._to_float())
  def exp2(self) -> Tensor: return F.Exp.apply(self._to_float() * math.log(2))
  def relu(self) -> Tensor: return F.Relu.apply(self)
  def sigmoid(self) -> Tensor: return F.Sigmoid.apply(self._to_float())
  def sqrt(self) -> Tensor: return F.Sqrt.apply(self._to_float())
  def rsqrt(self) -> Tensor: return self.reciprocal().sqrt()
  def sin(self) -> Tensor: return F.Sin.apply(self._to_float())
  def cos(self) -> Tensor: return ((math.pi / 2) - self._to_float()).sin()
  def tan(self) -> Tensor: return self.sin() / self.cos()
  def reciprocal(self) -> Tensor: return F.Reciprocal.apply(self._to_float())
  def square(self) -> Tensor: return self * self
  def sign(self) -> Tensor: return F.Sign.apply(self)
  def abs(self) -> Tensor: return self * self.sign()
  def clip(self, min_=None, max_=None) -> Tensor:
    if min_ is None and max_ is None: raise ValueError("clip needs min_ or max_")
    ret = self.maximum(min_) if min_ is not None else self
    return ret.minimum(max_) if max_ is not None else ret
  def clamp(self, min_=None, max_=None) -> Tensor: return self.clip(min_, max_)
  def trunc(self) -> Tensor: return self.cast(dtypes.int64).cast(self.dtype) if dtypes.is_float(self.dtype) else self
  def floor(self) -> Tensor: return (self < (b := self.trunc())).where(b - 1, b)
  def ceil(self) -> Tensor: return (self > (b := self.trunc())).where(b + 1, b)
  def round(self) -> Tensor:
    # round half to even, like numpy and torch
    b = self.floor()
    frac = self - b
    up = (frac > 0.5) | ((frac == 0.5) & ((b / 2).floor() * 2).ne(b))
    return up.where(b + 1, b)
  def isnan(self) -> Tensor: return self != self
  def isinf(self, detect_positive: bool = True, detect_negative: bool = True) -> Tensor:
    return (self == math.inf) * detect_positive + (self == -math.inf) * detect_negative
  def lerp(self, end: Tensor, weight) -> Tensor: return self + (end - self) * weight

  # activations
  def tanh(self) -> Tensor: return 2.0 * ((2.0 * self).sigmoid()) - 1.0
  def gelu(self) -> Tensor: return 0.5 * self * (1 + (math.sqrt(2 / math.pi) * (self + 0.044715 * self ** 3)).tanh())
  def quick_gelu(self) -> Tensor: return self * (self * 1.702).sigmoid()
  def silu(self) -> Tensor: return self * self.sigmoid()
  def swish(self) -> Tensor: return self.silu()
  def relu6(self) -> Tensor: return self.relu() - (self - 6).relu()
  def hardswish(self) -> Tensor: return self * (self + 3).relu6() * (1 / 6)
  def hardsigmoid(self, alpha: float = 1 / 6, beta: float = 0.5) -> Tensor: return (alpha * self + beta).relu() - (alpha * self + beta - 1).relu()
  def hardtanh(self, min_val: float = -1, max_val: float = 1) -> Tensor: return self.clip(min_val, max_val)
  def leakyrelu(self, neg_slope: float = 0.01) -> Tensor: return self.relu() - (-neg_slope * self).relu()
  def elu(self, alpha: float = 1.0) -> Tensor: return self.relu() - alpha * (1 - self.exp()).relu()
  def celu(self, alpha: float = 1.0) -> Tensor: return self.maximum(0) + (alpha * ((self / alpha).exp() - 1)).minimum(0)
  def softplus(self, beta: float = 1) -> Tensor: return (1 / beta) * (1 + (self * beta).exp()).log()
  def mish(self) -> Tensor: return self * self.softplus().tanh()
  def softsign(self) -> Tensor: return self / (1 + self.abs())

  # *** broadcasted binary ***
  def _broadcasted(self, y: Tensor | ConstType | UOp, reverse: bool = False, match_dtype: bool = True) -> tuple[Tensor, Tensor]:
    x: Tensor = self
    if not isinstance(y, Tensor):
      if isinstance(y, UOp):
        y = Tensor(y, device=self.device, dtype=self.dtype if dtypes.is_int(self.dtype) or dtypes.is_float(self.dtype) else y.dtype)
      elif isinstance(y, (bool, int, float)):
        # a python scalar takes the tensor's dtype unless it would lose information
        if isinstance(y, float) and not dtypes.is_float(x.dtype): ydt = dtypes.default_float
        elif isinstance(y, int) and not isinstance(y, bool) and dtypes.is_bool(x.dtype): ydt = dtypes.default_int
        else: ydt = x.dtype
        y = Tensor(dtypes.as_const(y, ydt), device=self.device, dtype=ydt, requires_grad=False)
      else: raise TypeError(f"cannot combine a Tensor with {type(y).__name__}")
    if x.device != y.device: raise ValueError(f"tensors are on different devices: {x.device} and {y.device}")
    if match_dtype and x.dtype != y.dtype:
      out = least_upper_dtype(x.dtype, y.dtype)
      x, y = x.cast(out), y.cast(out)
    if reverse: x, y = y, x
    out_shape = _broadcast_shape(x.shape, y.shape)
    return x._broadcast_to(out_shape), y._broadcast_to(out_shape)
  def add(self, x, reverse: bool = False) -> Tensor: return F.Add.apply(*self._broadcasted(x, reverse))
  def sub(self, x, reverse: bool = False) -> Tensor:
    a, b = self._broadcasted(x, reverse)
    return a + (-b)
  def mul(self, x, reverse: bool = False) -> Tensor: return F.Mul.apply(*self._broadcasted(x, reverse))
  def div(self, x, reverse: bool = False, rounding_mode: str | None = None) -> Tensor:
    a, b = self._broadcasted(x, reverse)
    if rounding_mode == "trunc": return a.idiv(b) if dtypes.is_int(a.dtype) else (a._to_float() / b._to_float()).trunc()
    if rounding_mode == "floor": return a // b if dtypes.is_int(a.dtype) else (a._to_float() / b._to_float()).floor()
    if rounding_mode is not None: raise ValueError(f"rounding_mode must be None, 'trunc' or 'floor', got {rounding_mode!r}")
    a, b = a._to_float(), b._to_float()
    return a * b.reciprocal()
  def idiv(self, x, reverse: bool = False) -> Tensor:
    """C-style integer division (truncates toward zero)."""
    a, b = self._broadcasted(x, reverse)
    if not dtypes.is_int(a.dtype): raise TypeError(f"idiv needs integer tensors, got {a.dtype}")
    return F.IDiv.apply(a, b)
  def floordiv(self, x, reverse: bool = False) -> Tensor:
    """Floor division like Python, numpy and torch."""
    a, b = self._broadcasted(x, reverse)
    if not dtypes.is_int(a.dtype): return (a / b).floor().cast(a.dtype)
    q = F.IDiv.apply(a, b)
    # truncation rounds toward zero: step down where the signs differ and there is a remainder
    return ((q * b).ne(a) & ((a < 0).ne(b < 0))).where(q - 1, q)
  def mod(self, x, reverse: bool = False) -> Tensor:
    """Python-style modulo (the result has the sign of the divisor)."""
    a, b = self._broadcasted(x, reverse)
    if not dtypes.is_int(a.dtype): return a - (a / b).floor() * b
    r = F.Mod.apply(a, b)
    return (r.ne(0) & ((r < 0).ne(b < 0))).where(r + b, r)
  def pow(self, x, reverse: bool = False) -> Tensor:
    if not isinstance(x, Tensor) and not reverse:
      if x == 2: return self * self
      if x == 1: return self
      if x == 0.5: return self.sqrt()
      if x == 0: return self.ones_like()
      if x == -1: return self.reciprocal()
    base, exponent = self._broadcasted(x, reverse)
    if dtypes.is_int(base.dtype) and dtypes.is_int(exponent.dtype) and not isinstance(x, Tensor) and isinstance(x, int) and x > 0:
      ret = base
      for _ in range(x - 1): ret = ret * base
      return ret
    bf = base._to_float()
    ef = exponent.cast(bf.dtype)
    # |b|^e, then the sign for negative bases with odd integer exponents; nan for negative bases and fractional exponents
    mag = (ef * bf.abs().log()).exp()
    is_int_exp = ef.trunc() == ef
    odd = (ef.abs() % 2) == 1
    neg = bf < 0
    signed = (neg & odd).where(-mag, mag)
    ret = (neg & ~is_int_exp).where(math.nan, signed)
    return ((bf == 0) & (ef == 0)).where(1.0, ret)
  def maximum(self, x) -> Tensor:
    a, b = self._broadcasted(x)
    return F.Maximum.apply(a, b)
  def minimum(self, x) -> Tensor:
    a, b = self._broadcasted(x)
    if dtypes.is_bool(a.dtype): return a & b
    return -((-a).maximum(-b)) if not dtypes.is_unsigned(a.dtype) else (a < b).where(a, b)
  def where(self, x, y) -> Tensor:
    cond = self if self.dtype == dtypes.bool else self.cast(dtypes.bool)
    if isinstance(x, Tensor): x, y = x._broadcasted(y)
    elif isinstance(y, Tensor): y, x = y._broadcasted(x)
    else:
      dt = dtypes.default_float if isinstance(x, float) or isinstance(y, float) else dtypes.from_py(x)
      x, y = Tensor(x, device=self.device, dtype=dt)._broadcasted(y)
    cond, x = cond._broadcasted(x, match_dtype=False)
    cond, y = cond._broadcasted(y, match_dtype=False)
    x, y = x._broadcasted(y)
    return F.Where.apply(cond.cast(dtypes.bool), x, y)
  def xor(self, x) -> Tensor: return F.Xor.apply(*self._bitwise(x))
  def bitwise_and(self, x) -> Tensor: return F.BitwiseAnd.apply(*self._bitwise(x))
  def bitwise_or(self, x) -> Tensor: return F.BitwiseOr.apply(*self._bitwise(x))
  def bitwise_not(self) -> Tensor:
    if self.dtype == dtypes.bool: return self.logical_not()
    if not dtypes.is_int(self.dtype): raise TypeError(f"bitwise_not needs an int or bool tensor, got {self.dtype}")
    return self.xor(-1 if not dtypes.is_unsigned(self.dtype) else dtypes.max(self.dtype))
  def _bitwise(self, x) -> tuple[Tensor, Tensor]:
    a, b = self._broadcasted(x)
    if not (dtypes.is_int(a.dtype) or dtypes.is_bool(a.dtype)): raise TypeError(f"bitwise ops need int or bool tensors, got {a.dtype}")
    return a, b
  def lshift(self, x: int) -> Tensor: return F.Shl.apply(*self._bitwise(x))
  def rshift(self, x: int) -> Tensor: return F.Shr.apply(*self._bitwise(x))

  def __neg__(self) -> Tensor: return self.neg()
  def __add__(self, x) -> Tensor: return self.add(x)
  def __radd__(self, x) -> Tensor: return self.add(x, True)
  def __sub__(self, x) -> Tensor: return self.sub(x)
  def __rsub__(self, x) -> Tensor: return self.sub(x, True)
  def __mul__(self, x) -> Tensor: return self.mul(x)
  def __rmul__(self, x) -> Tensor: return self.mul(x, True)
  def __truediv__(self, x) -> Tensor: return self.div(x)
  def __rtruediv__(self, x) -> Tensor: return self.div(x, True)
  def __floordiv__(self, x) -> Tensor: return self.floordiv(x)
  def __rfloordiv__(self, x) -> Tensor: return self.floordiv(x, True)
  def __mod__(self, x) -> Tensor: return self.mod(x)
  def __rmod__(self, x) -> Tensor: return self.mod(x, True)
  def __pow__(self, x) -> Tensor: return self.pow(x)
  def __rpow__(self, x) -> Tensor: return self.pow(x, True)
  def __matmul__(self, x) -> Tensor: return self.matmul(x)
  def __rmatmul__(self, x) -> Tensor: return (x if isinstance(x, Tensor) else Tensor(x, device=self.device)).matmul(self)
  def __and__(self, x) -> Tensor: return self.bitwise_and(x)
  def __or__(self, x) -> Tensor: return self.bitwise_or(x)
  def __xor__(self, x) -> Tensor: return self.xor(x)
  def __rand__(self, x) -> Tensor: return self.bitwise_and(x)
  def __ror__(self, x) -> Tensor: return self.bitwise_or(x)
  def __rxor__(self, x) -> Tensor: return self.xor(x)
  def __lshift__(self, x) -> Tensor: return self.lshift(x)
  def __rshift__(self, x) -> Tensor: return self.rshift(x)
  def __invert__(self) -> Tensor: return self.bitwise_not()
  def __iadd__(self, x) -> Tensor: return self.assign(self.add(x))
  def __isub__(self, x) -> Tensor: return self.assign(self.sub(x))
  def __imul__(self, x) -> Tensor: return self.assign(self.mul(x))
  def __itruediv__(self, x) -> Tensor: return self.assign(self.div(x))
  def __lt__(self, x) -> Tensor: return F.Less.apply(*self._broadcasted(x, False))
  def __gt__(self, x) -> Tensor: return F.Less.apply(*self._broadcasted(x, True))
  def __ge__(self, x) -> Tensor: return (self < x).logical_not()
  def __le__(self, x) -> Tensor: return (self > x).logical_not()
  def ne(self, x) -> Tensor: return F.Neq.apply(*self._broadcasted(x))
  def eq(self, x) -> Tensor: return self.ne(x).logical_not()
  def __ne__(self, x) -> Tensor: return self.ne(x)  # type: ignore[override]
  def __eq__(self, x) -> Tensor: return self.eq(x)  # type: ignore[override]

  # *** linear algebra ***
  def dot(self, w: Tensor, acc_dtype: DTypeLike | None = None) -> Tensor:
    """Matrix product as a broadcasted multiply and a sum over the shared axis (one fused kernel)."""
    n1, n2 = self.ndim, w.ndim
    if n1 == 0 or n2 == 0: raise ValueError(f"both tensors need at least 1 dimension, got {n1}D and {n2}D")
    k = w.shape[-min(n2, 2)]
    if resolve(_ne(self.shape[-1], k)):
      raise ValueError(f"cannot matmul shapes {self.shape} and {w.shape}: inner dimensions {self.shape[-1]} and {k} differ")
    x = self.reshape(*self.shape[0:-1], *[1] * min(n1 - 1, n2 - 1, 1), self.shape[-1])
    w2 = w.reshape(*w.shape[0:-2], *[1] * min(n1 - 1, n2 - 1, 1), *w.shape[-min(n2, 2):]).transpose(-1, -min(n2, 2))
    return (x * w2).sum(-1, acc_dtype=acc_dtype).cast(least_upper_dtype(x.dtype, w.dtype) if acc_dtype is None else to_dtype(acc_dtype))
  def matmul(self, x: Tensor, reverse: bool = False, acc_dtype: DTypeLike | None = None) -> Tensor:
    return x.dot(self, acc_dtype=acc_dtype) if reverse else self.dot(x, acc_dtype=acc_dtype)
  def linear(self, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    x = self.mul(weight) if weight.ndim == 1 else self.dot(weight)
    return x.add(bias) if bias is not None else x

  def _cumsum(self, axis: int = 0) -> Tensor:
    """Inclusive prefix sum along axis via a padded, strided view and one reduce."""
    ax = self._resolve_dim(axis)
    x = self.transpose(ax, -1)
    n = x.shape[-1]
    # each output position i sums x[0..i]: pad to 2n-1, take sliding windows of length n
    padded = x.pad(tuple([None] * (x.ndim - 1) + [(n - 1, 0)]))
    windows = padded._pool((n,))
    return windows.sum(-1).transpose(ax, -1)
  def cumsum(self, axis: int = 0) -> Tensor: return self._cumsum(axis)

  def _pool(self, k_: tuple[sint, ...], stride: int | tuple[int, ...] = 1, dilation: int | tuple[int, ...] = 1) -> Tensor:
    """Sliding windows over the last len(k_) dims: shape (..., out_0, ..., k_0, ...), built from movement ops only."""
    if len(self.shape) < len(k_): raise ValueError(f"can't pool {self.shape} with kernel {k_}")
    s_, d_ = make_tuple(stride, len(k_)), make_tuple(dilation, len(k_))
    if len(k_) != len(s_) or len(k_) != len(d_): raise ValueError(f"stride/dilation mismatch kernel={k_}, stride={s_}, dilation={d_}")
    noop, i_ = [None] * (self.ndim - len(k_)), self.shape[-len(k_):]
    if any(k > s for k, s in zip(k_, s_)) or any(d != 1 for d in d_):
      o_ = [(i - d * (k - 1) - 1) // s + 1 for i, d, k, s in zip(i_, d_, k_, s_)]
      if any(o <= 0 for o in o_): raise ValueError(f"kernel {k_} (dilation {d_}) is larger than the input {i_}")
      # repeats such that we don't need padding
      e_ = [math.ceil(k * (i + d) / i) for k, i, d in zip(k_, i_, d_)]
      xup = self.reshape(*noop, *flatten((1, i) for i in i_)).expand(*noop, *flatten((e, i) for e, i in zip(e_, i_))) \
        .reshape(*noop, *[e * i for e, i in zip(e_, i_)])
      # stride by dilation
      xup = xup.shrink(tuple(noop + [(0, k * (i + d)) for k, i, d in zip(k_, i_, d_)])) \
        .reshape(*noop, *flatten((k, i + d) for k, i, d in zip(k_, i_, d_)))
      xup = xup.shrink(tuple(noop + flatten(((0, k), (0, o * s)) for k, o, s in zip(k_, o_, s_)))) \
        .reshape(*noop, *flatten((k, o, s) for k, o, s in zip(k_, o_, s_)))
      xup = xup.shrink(tuple(noop + flatten(((0, k), (0, o), (0, 1)) for k, o in zip(k_, o_)))).reshape(*noop, *flatten(zip(k_, o_)))
      # permute to move the kernel dims to the end
      return xup.permute(*range(len(noop)), *[len(noop) + i * 2 + 1 for i in range(len(i_))], *[len(noop) + i * 2 for i in range(len(i_))])
    # kernel <= stride: a simple reshape
    o_ = [(i + (s - k)) // s for i, s, k in zip(i_, s_, k_)]
    xup = self.pad(tuple(noop + [(0, max(0, o * s - i)) for i, o, s in zip(i_, o_, s_)])).shrink(tuple(noop + [(0, o * s) for o, s in zip(o_, s_)]))
    xup = xup.reshape(*noop, *flatten(((o, s) for o, s in zip(o_, s_))))
    xup = xup.shrink(tuple(noop + flatten(((0, o), (0, k)) for o, k in zip(o_, k_))))
    return xup.permute(*range(len(noop)), *[len(noop) + i * 2 for i in range(len(i_))], *[len(noop) + i * 2 + 1 for i in range(len(i_))])

def _sum_dtype(d: DType) -> DType:
  # like tinygrad: bools and small ints sum in the default int, unsigned in uint32
  if dtypes.is_unsigned(d): return dtypes.uint32 if d.itemsize <= 4 else d
  if dtypes.is_int(d) or dtypes.is_bool(d): return dtypes.int32 if d.itemsize <= 4 else d
  return d

def _argfix(*x: Any) -> tuple:
  if x and x[0].__class__ in (tuple, list):
    if len(x) != 1: raise ValueError(f"bad arguments: {x}")
    return tuple(x[0])
  return tuple(x)

# record which Tensor method built each lazy node (schedule items and replay reports show it)
def _wrap_metadata(fn: Callable, name: str) -> Callable:
  @functools.wraps(fn)
  def wrapper(*args, **kwargs):
    if METADATA.get() is not None: return fn(*args, **kwargs)
    token = METADATA.set(Metadata(name))
    try: return fn(*args, **kwargs)
    finally: METADATA.reset(token)
  return wrapper

_NO_METADATA = {"__init__", "__repr__", "__hash__", "__bool__", "__len__", "realize", "schedule", "schedule_with_vars", "numpy",
                "tolist", "item", "data", "backward", "_deepwalk", "replace", "_data", "manual_seed", "_rng", "size", "numel",
                "element_size", "nbytes", "ndim", "is_floating_point", "_resolve_dim", "assign"}
def _install_metadata() -> None:
  for name, fn in list(vars(Tensor).items()):
    if name in _NO_METADATA or not callable(fn) or isinstance(fn, property): continue
    if isinstance(fn, staticmethod): setattr(Tensor, name, staticmethod(_wrap_metadata(fn.__func__, name)))
    elif callable(fn) and not isinstance(fn, type): setattr(Tensor, name, _wrap_metadata(fn, name.strip("_")))

_install_metadata()
