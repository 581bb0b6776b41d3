"""Tensor: the user-facing lazy tensor. Method names and semantics follow tinygrad's public Tensor API.

Nothing runs until realize()/numpy(): every method builds LazyBuffers through autograd Functions.
"""
from __future__ import annotations
import builtins, contextlib, functools, math, numbers
from typing import Any, Callable, Sequence, Union, cast
import numpy as np
from tinysched.dtype import DType, dtypes, least_upper_dtype, least_upper_float, ConstType, bf16_bits, bf16_float
from tinysched.ops import Ops
from tinysched.uop import UOp, sint, resolve, smax, sym_ne
from tinysched.reduce import output_dtype as reduce_output_dtype, acc_dtype as reduce_acc_dtype
from tinysched.lazy import LazyBuffer, Metadata, METADATA
from tinysched.device import Device, Buffer
from tinysched import capture_hook
from tinysched.helpers import prod, all_int, make_tuple, flatten
from tinysched import function as F
from tinysched import schedule as S, realize as R
from tinysched.errors import ShapeError, AxisError, DTypeError, ArgumentError, MaskShapeError, IndexShapeError, IndexTypeError

DTypeLike = Union[DType, str]

def to_dtype(x: DTypeLike) -> DType:
  """A DType passes through; anything else is a dtype name ('float32', 'int8', ...) looked up in dtypes."""
  if isinstance(x, DType): return x
  return dtypes.from_name(x)

def _he_gain(a: float) -> float: return math.sqrt(2.0 / (1 + a ** 2))  # the gain of a leaky ReLU with negative slope a
def _sqrt_fan_in(shape: tuple[int, ...]) -> float: return math.sqrt(prod(shape[1:]))  # a weight's inputs: all dims but the first

def _host_array(x: Any, dt: DType) -> np.ndarray:
  """Host values as the storage array of `dt`: bfloat16 has no numpy type, so its values become their uint16 bits
  (rounded to nearest even from float32); every other dtype is a plain numpy conversion."""
  return bf16_bits(np.asarray(x, dtype=np.float32)) if dt == dtypes.bfloat16 else np.asarray(x).astype(dt.np)

def _from_np(x: np.ndarray, device: str, dtype: DType | None = None) -> LazyBuffer:
  d = dtypes.from_np(x.dtype) if dtype is None else dtype  # bfloat16 bits arrive as uint16: the caller names the dtype
  # host data entering the graph: a capture tool sees it (its contents are not in any graph)
  if capture_hook.HOOK is not None: capture_hook.HOOK("host", (x, d), None)
  buf = Buffer(device, x.size, d)
  if x.size: buf.copyin(x)
  else: buf.allocate()
  return LazyBuffer.from_buffer(buf, x.shape)


def _one_hot_mask(index: Tensor, n: sint, device: str) -> Tensor:
  """bool (*index.shape, n): True at [..., i] where index[...] == i (an arange on `device` in index's dtype)."""
  return index.unsqueeze(-1) == Tensor.arange(n, device=device, requires_grad=False).cast(index.dtype)

def _window_spec(kernel_size: int | tuple[int, ...], stride) -> tuple[tuple[int, ...], Any, tuple[int, ...]]:
  """A pooling's kernel (an int means 2-D), its stride (the kernel when not given) and the window axes _pool appends."""
  k_ = make_tuple(kernel_size, 2)
  return k_, (k_ if stride is None else stride), tuple(range(-len(k_), 0))

def _splice(shape: tuple[sint, ...], lo: int, hi: int, dims: Sequence[sint]) -> tuple[sint, ...]:
  """shape with its dims [lo, hi) replaced by `dims`."""
  return (*shape[:lo], *dims, *shape[hi:])

def _broadcast_shape(*shapes: tuple[sint, ...]) -> tuple[sint, ...]:
  nd = max((len(s) for s in shapes), default=0)
  padded = [(1,) * (nd - len(s)) + tuple(s) for s in shapes]
  out: list[sint] = []
  for dims in zip(*padded):
    non1 = [d for d in dims if not (isinstance(d, int) and d == 1)]
    if not non1: out.append(1); continue
    first = non1[0]
    if any(resolve(sym_ne(d, first)) for d in non1[1:]):
      raise ShapeError(f"cannot broadcast shapes {', '.join(str(tuple(s)) for s in shapes)}: dimension sizes {tuple(dims)} differ")
    out.append(first)
  return tuple(out)


_SINT_OPS = {Ops.ADD: "add", Ops.MUL: "mul", Ops.IDIV: "idiv", Ops.MOD: "mod", Ops.MAX: "maximum", Ops.CMPLT: "__lt__",
             Ops.CMPNE: "ne"}

def _sint_tensor(x: UOp, device: str) -> "Tensor":
  """A 0-d Tensor computing a symbolic size expression (bound Variables, constants, + * // % max <): what mean over a
  symbolic shrink divides by. An unbound Variable or another op has no value to compute: ValueError naming it."""
  if x.op is Ops.CONST: return Tensor(x.arg, device=device, dtype=x.dtype)
  if x.op is Ops.BIND: return Tensor(x, device=device)
  if (name := _SINT_OPS.get(x.op)) is not None and len(x.src) == 2:
    return getattr(_sint_tensor(x.src[0], device), name)(_sint_tensor(x.src[1], device))
  what = f"the unbound Variable {x.arg[0]!r}" if x.op is Ops.DEFINE_VAR else f"{x.op}"
  raise ValueError(f"a Tensor from a UOp needs bound Variables and + * // % max <, got {what}: bind it (Variable(...).bind(n))")

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
      if data.op is Ops.BIND: lb = LazyBuffer.metaop(Ops.CONST, (), dt or data.dtype, dev, data)
      else: lb = _sint_tensor(data, dev).cast(dt or data.dtype).lazydata  # an expression of bound Variables (a symbolic count)
    elif isinstance(data, (bool, int, float)):
      lb = LazyBuffer.metaop(Ops.CONST, (), dt or dtypes.from_py(data), dev, data)
    elif isinstance(data, bytes): lb = _from_np(np.frombuffer(data, np.uint8), dev)
    elif isinstance(data, (list, tuple)):
      d = dt or (_list_dtype(data) if data else dtypes.default_float)
      try: arr = np.array(data, dtype=d.np) if d != dtypes.bfloat16 else _host_array(np.array(data, dtype=np.float32), d)
      except OverflowError: arr = np.array(data).astype(d.np)  # ints out of the dtype's range wrap, as a scalar's cast does
      except ValueError as e: raise ValueError(f"cannot make a Tensor from a ragged or invalid list: {e}") from None
      lb = _from_np(arr, dev, d)
    elif isinstance(data, np.ndarray):
      arr = data if dt is None else _host_array(data, dt)
      if arr.dtype == np.float64 and dt is None: arr = arr  # numpy float64 stays float64 (as in tinygrad)
      lb = _from_np(np.require(arr, requirements="C"), dev, dt)  # not ascontiguousarray: it turns 0-d arrays into shape (1,)
    elif isinstance(data, Tensor): lb = data.lazydata if dt is None else data.cast(dt).lazydata
    else: raise DTypeError(f"cannot make a Tensor from {type(data).__name__}: no dtype stands for it")
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
    return S.create_schedule_with_vars([x.lazydata for x in (self,) + lst])
  def schedule(self, *lst: Tensor):
    schedule, var_vals = self.schedule_with_vars(*lst)
    if var_vals: raise S.ScheduleError(f"schedule has bound Variables {[v.arg[0] for v in var_vals]}: use schedule_with_vars")
    return schedule
  def realize(self, *lst: Tensor) -> Tensor:
    R.run_schedule(*self.schedule_with_vars(*lst))
    return self
  def replace(self, x: Tensor) -> Tensor:
    if self.shape != x.shape: raise ShapeError(f"replace shape mismatch {self.shape} != {x.shape}")
    self.lazydata = x.lazydata
    return self
  def assign(self, x: Any) -> Tensor:
    """Write x into this tensor's memory (in place once realized)."""
    if not isinstance(x, Tensor): x = Tensor(x, device=self.device, dtype=self.dtype)
    if self.lazydata is x.lazydata: return self
    if self.shape != x.shape: raise ShapeError(f"assign shape mismatch: target {self.shape} vs value {x.shape}")
    if self.device != x.device: raise ValueError(f"assign device mismatch: target {self.device} vs value {x.device}")
    if self.dtype != x.dtype: raise DTypeError(f"assign dtype mismatch: target {self.dtype} vs value {x.dtype}")
    if self.requires_grad and not Tensor.no_grad and x.requires_grad: raise RuntimeError("cannot assign to a tensor that requires grad")
    if not self.lazydata.is_realized: return self.replace(x)
    self.lazydata = self.lazydata.assign(x.lazydata)
    return self
  def detach(self) -> Tensor: return Tensor(self.lazydata, requires_grad=False)
  def _data(self) -> np.ndarray:
    if 0 in self.shape: return np.zeros(self.shape, dtype=self.dtype.np)  # type: ignore[arg-type]  # numpy's stubs: no sint, no dtype None
    t = self.cast(self.dtype.base).contiguous().realize()
    buf = t.lazydata.base.realized
    assert buf is not None
    return buf.numpy()[:prod(t.shape)] if all_int(t.shape) else buf.numpy()
  def numpy(self) -> np.ndarray:
    """The values as a numpy array of the tensor's dtype; bfloat16, which numpy lacks, comes back as float32 (exact: every
    bfloat16 is a float32), as in tinygrad 0.10.0. Its raw bits: `.bitcast(dtypes.uint16).numpy()`."""
    if not all_int(self.shape): raise ValueError(f"numpy() needs a concrete shape, got {self.shape}")
    data = self._data()
    return (bf16_float(data) if self.dtype == dtypes.bfloat16 else data).reshape(self.shape)  # type: ignore[arg-type]  # all_int: checked above
  def tolist(self) -> Any: return self.numpy().tolist()
  def item(self) -> ConstType:
    if self.numel() != 1: raise ShapeError(f"item() needs a tensor with one element, got shape {self.shape}")
    return self.numpy().reshape(-1)[0].item()
  def data(self) -> memoryview: return memoryview(self.numpy())  # type: ignore[arg-type]  # numpy's stubs: __buffer__ only on Python >= 3.12
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
    _check_dims(shape, "empty")
    return Tensor(LazyBuffer.metaop(op, shape, to_dtype(dtype) if dtype is not None else dtypes.default_float,
                                    Device.canonicalize(device), arg), **kwargs)
  @staticmethod
  def empty(*shape, **kwargs) -> Tensor: return Tensor._metaop(Ops.EMPTY, _argfix(*shape), **kwargs)
  @staticmethod
  def full(shape: tuple[sint, ...], fill_value: ConstType, **kwargs) -> Tensor:
    shape = _check_dims(_argfix(shape), "full")
    return Tensor(fill_value, **kwargs).reshape((1,) * len(shape)).expand(shape)
  @staticmethod
  def zeros(*shape, **kwargs) -> Tensor:
    return Tensor.full(_check_dims(_argfix(*shape), "zeros"), 0.0, dtype=kwargs.pop("dtype", dtypes.default_float), **kwargs)
  @staticmethod
  def ones(*shape, **kwargs) -> Tensor:
    return Tensor.full(_check_dims(_argfix(*shape), "ones"), 1.0, dtype=kwargs.pop("dtype", dtypes.default_float), **kwargs)
  def full_like(self, fill_value: ConstType, **kwargs) -> Tensor:
    return Tensor.full(self.shape, fill_value, dtype=kwargs.pop("dtype", self.dtype), device=kwargs.pop("device", self.device), **kwargs)
  def zeros_like(self, **kwargs) -> Tensor: return self.full_like(0, **kwargs)
  def ones_like(self, **kwargs) -> Tensor: return self.full_like(1, **kwargs)
  @staticmethod
  def arange(start, stop=None, step=1, **kwargs) -> Tensor:
    """start, start+step, ... up to (not including) stop, like range(); float when any bound is a float.

    Computed on the device, with no host data: the running sum of `count` copies of step is step, 2*step, ..., and
    shifting it down by (step - start) turns it into the values. The running sum is one reduce kernel."""
    first, end = (0, start) if stop is None else (start, stop)
    if step == 0: raise ArgumentError("arange: step must not be zero")
    if not all(isinstance(v, numbers.Real) for v in (first, end, step)):
      # the element count must be known when the graph is built (a Variable's length: shrink an arange of its maximum)
      raise ArgumentError(f"arange({first!r}, {end!r}, {step!r}): start, stop and step must be Python ints or floats; for a "
                          "symbolic length take Tensor.arange(max).shrink(((0, v),))")
    floats = isinstance(first, float) or isinstance(end, float) or isinstance(step, float)
    out_dtype = kwargs.pop("dtype", dtypes.default_float if floats else dtypes.default_int)
    count = max(math.ceil((end - first) / step), 0)
    if not count: return Tensor.empty(0, dtype=out_dtype, **kwargs)
    running = Tensor.full((count,), step, dtype=out_dtype, **kwargs)._cumsum()
    return (running + (first - step)).cast(out_dtype)
  @staticmethod
  def linspace(start: float, stop: float, steps: int, **kwargs) -> Tensor:
    """`steps` evenly spaced values from start to stop, both included (torch's and tinygrad's linspace): start + i *
    (stop - start) / (steps - 1), computed in float and cast to `dtype` (default float; an int dtype truncates,
    like torch). steps=1 gives [start], steps=0 an empty tensor. A bool dtype raises, as in tinygrad and torch."""
    if not isinstance(steps, int) or steps < 0: raise ArgumentError(f"linspace: steps must be a non-negative int, got {steps!r}")
    dtype = to_dtype(kwargs.pop("dtype", dtypes.default_float))
    if dtype == dtypes.bool: raise ArgumentError("linspace: a bool dtype is not supported (tinygrad and torch raise too)")
    if steps == 0: return Tensor.empty(0, dtype=dtype, **kwargs)
    step = (stop - start) / (steps - 1) if steps > 1 else 0.0
    ramp = Tensor.arange(steps, dtype=dtypes.default_float, **kwargs)
    return (ramp * step + start).cast(dtype)
  @staticmethod
  def eye(n: int, m: int | None = None, **kwargs) -> Tensor:
    """n x m identity matrix (m defaults to n).

    Each row of the (n, cols+1) block [1, 0, ..., 0] puts its 1 at flat offset i*(cols+1) = i*cols + i, so reading the
    first n*cols elements back as rows of length cols leaves the 1 of row i in column i."""
    cols = n if m is None else m
    if n < 0 or cols < 0: raise ShapeError(f"eye: dimensions must be non-negative, got n={n}, m={m}")
    if n == 0 or cols == 0: return Tensor.zeros(n, cols, **kwargs)
    # only the first min(n, cols) rows hold a 1 (with more rows than columns, the offset i*(cols+1) of a later row
    # would run into the next row): build those, then pad the zero rows below
    rows = min(n, cols)
    one_then_zeros = Tensor.ones((rows, 1), **kwargs).pad((None, (0, cols)))
    square = one_then_zeros.flatten().shrink(((0, rows * cols),)).reshape(rows, cols)
    return square if rows == n else square.pad(((0, n - rows), None))
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
    shp = _check_dims(_argfix(*shape), "rand")
    if not all_int(shp): raise ValueError(f"rand needs a concrete shape, got {shp}")
    return Tensor(Tensor._rng().random(shp, dtype=np.float32), device=device, dtype=dt, **kwargs)
  @staticmethod
  def randn(*shape, device: str | None = None, dtype: DTypeLike | None = None, **kwargs) -> Tensor:
    dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
    shp = _check_dims(_argfix(*shape), "randn")
    if not all_int(shp): raise ValueError(f"randn needs a concrete shape, got {shp}")
    return Tensor(Tensor._rng().standard_normal(shp, dtype=np.float32), device=device, dtype=dt, **kwargs)
  @staticmethod
  def randint(*shape, low: int = 0, high: int = 10, **kwargs) -> Tensor:
    """Uniform ints in [low, high): int bounds and an int dtype only (tinygrad raises TypeError for others)."""
    shp = _check_dims(_argfix(*shape), "randint")
    if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in (low, high)):
      raise TypeError(f"randint: low={low!r} and high={high!r} must be ints")
    if low >= high: raise ArgumentError(f"randint: low ({low}) must be below high ({high})")
    dt = to_dtype(kwargs.pop("dtype", dtypes.int32))
    if not dtypes.is_int(dt): raise DTypeError(f"randint: dtype must be an int dtype, got {dt}")
    return Tensor(Tensor._rng().integers(low, high, shp).astype(dt.np), **kwargs)
  @staticmethod
  def uniform(*shape, low: float = 0.0, high: float = 1.0, **kwargs) -> Tensor:
    """Uniform in [low, high): rand's [0, 1) stretched to the width of the interval and moved to its start."""
    out_dtype = kwargs.pop("dtype", dtypes.default_float)
    unit = Tensor.rand(*_check_dims(_argfix(*shape), "uniform"), **kwargs)
    return ((high - low) * unit + low).cast(out_dtype)
  @staticmethod
  def normal(*shape, mean: float = 0.0, std: float = 1.0, **kwargs) -> Tensor:
    return (std * Tensor.randn(*_check_dims(_argfix(*shape), "normal"), **kwargs)) + mean
  @staticmethod
  def scaled_uniform(*shape, **kwargs) -> Tensor:
    """Uniform in [-1, 1) scaled by 1/sqrt(numel)."""
    dims = _check_dims(_argfix(*shape), "scaled_uniform")
    scale = prod(dims) ** -0.5 if prod(dims) else 1.0  # an empty tensor: nothing to scale (0 ** -0.5 divides by zero)
    return Tensor.uniform(*dims, low=-1.0, high=1.0, **kwargs).mul(scale)
  @staticmethod
  def glorot_uniform(*shape, **kwargs) -> Tensor:
    """Xavier/Glorot: uniform in [-1, 1) scaled by sqrt(6 / (fan_out + fan_in)), fan_out = shape[0], fan_in = the rest."""
    dims = _check_dims(_argfix(*shape), "glorot_uniform")
    limit = (6 / (dims[0] + prod(dims[1:]))) ** 0.5
    return Tensor.uniform(*dims, low=-1.0, high=1.0, **kwargs).mul(limit)
  @staticmethod
  def kaiming_uniform(*shape, a: float = 0.01, **kwargs) -> Tensor:
    """He init for a leaky ReLU of slope a: uniform in [-b, b), b = sqrt(3) * gain / sqrt(fan_in)."""
    dims = _check_dims(_argfix(*shape), "kaiming_uniform")
    limit = math.sqrt(3.0) * _he_gain(a) / _sqrt_fan_in(dims)
    return Tensor.uniform(*dims, low=-limit, high=limit, **kwargs)
  @staticmethod
  def kaiming_normal(*shape, a: float = 0.01, **kwargs) -> Tensor:
    """He init for a leaky ReLU of slope a: normal with std gain / sqrt(fan_in)."""
    dims = _check_dims(_argfix(*shape), "kaiming_normal")
    return Tensor.normal(*dims, mean=0.0, std=_he_gain(a) / _sqrt_fan_in(dims), **kwargs)
  def multinomial(self, num_samples: int = 1, replacement: bool = False) -> Tensor:
    """num_samples category indices drawn from the weights along the last dim (1-D: (num_samples,); 2-D (B, n): one
    draw per row, (B, num_samples)), int32 (torch: int64). Weights need not sum to 1. Seeded through
    Tensor.manual_seed (the uniforms come from Tensor.rand), so a seed gives the same samples in any process.

    With replacement: inverse CDF, the index of a uniform scaled to the row's total among the running sums.
    Without: each category gets the key log(u)/w (an exponential race: the smallest exponential E/w wins, which is
    drawing one by one without replacement), and the num_samples largest keys, in order, are the samples (topk, so
    n is limited by Tensor.SORT_LIMIT). Zero weights are never drawn while a positive one is left (torch too).
    Checks that need the data (negative or nan weights, an all-zero row) are left out: the graph stays lazy."""
    if self.ndim not in (1, 2): raise ShapeError(f"multinomial needs 1-D or 2-D weights, got shape {self.shape}")
    if not isinstance(num_samples, int) or num_samples < 1:
      raise ArgumentError(f"multinomial: num_samples must be a positive int, got {num_samples!r}")
    w = (self.reshape(1, -1) if self.ndim == 1 else self).detach()._to_float()
    rows, n = w.shape
    if not replacement and num_samples > n:
      raise ArgumentError(f"multinomial: cannot draw {num_samples} samples without replacement from {n} categories")
    if replacement:
      running = w.cumsum(1)
      u = Tensor.rand(rows, num_samples, device=self.device, requires_grad=False) * running[:, n - 1:]
      picked = (running[:, :n - 1].unsqueeze(1) <= u.unsqueeze(-1)).sum(-1)
    else:
      keys = Tensor.rand(rows, n, device=self.device, requires_grad=False).log() / w
      picked = keys.topk(num_samples, dim=1)[1]
    picked = picked.cast(dtypes.int32)
    return picked.reshape(num_samples) if self.ndim == 1 else picked
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
    """Accumulate d(self)/d(x) into x.grad for every x with requires_grad that self depends on.

    _deepwalk lists every node after all of its inputs, so walking it backwards reaches a node only once every
    consumer has added its share to node.grad: the gradient is complete when it is pushed on to the node's inputs."""
    if gradient is None:
      if self.shape != () and self.numel() != 1:
        raise ShapeError(f"backward on a non-scalar tensor of shape {self.shape} needs a gradient argument of that shape")
      gradient = Tensor(1.0, dtype=self.dtype, device=self.device, requires_grad=False).reshape(self.shape)
    if gradient.shape != self.shape: raise ShapeError(f"backward gradient shape {gradient.shape} != tensor shape {self.shape}")
    if self._ctx is None and not self.requires_grad: raise RuntimeError("backward on a tensor that does not require grad")
    tape = self._deepwalk()
    # gradients of intermediate results belong to this call (retain_graph reruns must not add up)
    for node in tape: node.grad = None
    self.grad = gradient
    for node in reversed(tape):
      ctx = node._ctx
      if not retain_graph: node._ctx = None
      # no grad: reached only through non-differentiable uses (a where's condition), nothing to propagate
      # (a node on the tape has a _ctx)
      if node.grad is not None: _add_to_parent_grads(ctx, _input_grads(ctx, node.grad), self.device)  # type: ignore[arg-type]
    return self

  # *** movement ***
  def reshape(self, shape, *args) -> Tensor:
    new_shape = _argfix(shape, *args)
    if sum(1 for s in new_shape if isinstance(s, int) and s == -1) > 1: raise ShapeError(f"reshape {new_shape}: only one dimension can be -1")
    _check_dims(new_shape, f"reshape {self.shape}", infer=True)
    new_shape = tuple(self.shape[i] if s is None else s for i, s in enumerate(new_shape))
    if -1 in [s for s in new_shape if isinstance(s, int)]:
      known = prod(s for s in new_shape if not (isinstance(s, int) and s == -1))
      if known == 0 or (isinstance(known, int) and isinstance(self.numel(), int) and self.numel() % known != 0):
        raise ShapeError(f"cannot reshape tensor of shape {self.shape} to {new_shape}")
      new_shape = tuple(self.numel() // known if isinstance(s, int) and s == -1 else s for s in new_shape)
    return self if new_shape == self.shape else F.Reshape.apply(self, shape=new_shape)
  def view(self, *shape) -> Tensor: return self.reshape(*shape)
  def expand(self, shape, *args) -> Tensor:
    new_shape = _argfix(shape, *args)
    if len(new_shape) < self.ndim: raise ShapeError(f"expand {self.shape} to {new_shape}: fewer dimensions")
    _check_dims(new_shape, f"expand {self.shape}", infer=True)
    new_shape = tuple(from_ if to == -1 or to is None else to for from_, to in zip((1,) * (len(new_shape) - self.ndim) + self.shape, new_shape))
    return self._broadcast_to(new_shape)
  def _broadcast_to(self, shape: tuple[sint, ...]) -> Tensor:
    if self.shape == shape: return self
    if self.ndim > len(shape): raise ShapeError(f"cannot broadcast tensor of shape {self.shape} to {shape}")
    padded = (1,) * (len(shape) - self.ndim) + self.shape
    for s, t in zip(padded, shape):
      if not (isinstance(s, int) and s == 1) and resolve(sym_ne(s, t)):
        raise ShapeError(f"cannot broadcast tensor of shape {self.shape} to {shape}")
    return F.Expand.apply(self.reshape(padded), shape=shape)
  def permute(self, order, *args) -> Tensor:
    given = _argfix(order, *args)
    dims = self._dims(given)
    # resolved dims lie in [0, ndim): a permutation exactly when there are ndim of them and none repeats
    if len(dims) != self.ndim or len(set(dims)) != len(dims):
      raise ShapeError(f"permute {given} is not a permutation of the {self.ndim} dims of {self.shape}")
    return F.Permute.apply(self, order=dims)
  def flip(self, axis, *args) -> Tensor:
    dims = self._dims(_argfix(axis, *args))
    if len(set(dims)) < len(dims): raise ShapeError(f"flip: dims {dims} repeat")
    if self.ndim == 0: return self  # a 0-d tensor takes dim 0 / -1 (torch and tinygrad): one element, nothing to reverse
    return F.Flip.apply(self, axis=dims)
  def shrink(self, arg: tuple[tuple[sint, sint] | None, ...]) -> Tensor:
    if len(arg) != self.ndim: raise ShapeError(f"shrink {arg} needs {self.ndim} entries for shape {self.shape}")
    norm = tuple(x if x is not None else (0, s) for x, s in zip(arg, self.shape))  # bounds: checked by View.shrink
    if all(x == (0, s) for x, s in zip(norm, self.shape) if isinstance(s, int) and all(isinstance(v, int) for v in x)) and \
        all_int(flatten(norm)): return self
    return F.Shrink.apply(self, arg=norm)
  def _pad_pairs(self, padding) -> tuple[tuple[sint, sint], ...]:
    """pad's argument as one (before, after) pair per dim: per-dim pairs (None for (0, 0)), or the flat torch-style form."""
    if padding and all(isinstance(p, int) for p in padding):
      if len(padding) % 2 != 0 or len(padding) // 2 > self.ndim: raise ShapeError(f"flat padding {padding} does not fit shape {self.shape}")
      pairs = [(padding[i], padding[i + 1]) for i in range(0, len(padding), 2)][::-1]
      padding = tuple([None] * (self.ndim - len(pairs)) + pairs)
    if len(padding) != self.ndim: raise ShapeError(f"padding {padding} needs {self.ndim} entries for shape {self.shape}")
    return tuple(p if p is not None else (0, 0) for p in padding)
  def pad(self, padding, mode: str = "constant", value: float | None = None) -> Tensor:
    """padding: per dimension (before, after) for every dim, or a flat torch-style tuple starting from the last dim.

    mode 'constant' fills with `value` (default 0); 'reflect', 'replicate' and 'circular' are torch's
    (numpy's reflect, edge and wrap) and take no value. Negative pads crop first, in every mode."""
    if mode not in ("constant", "reflect", "replicate", "circular"):
      raise NotImplementedError(f"unknown pad mode {mode!r}: use 'constant', 'reflect', 'replicate' or 'circular'")
    if mode != "constant":
      if value is not None: raise ArgumentError(f"pad mode {mode!r} takes no value (got value={value!r}); only 'constant' fills with one")
      return self._pad_edges(self._pad_pairs(padding), mode)
    value = 0.0 if value is None else value
    pads = self._pad_pairs(padding)
    if any(isinstance(b, int) and b < 0 or isinstance(a, int) and a < 0 for b, a in pads):
      # negative padding crops, like torch
      shr = tuple((-min(b, 0), s + min(a, 0)) for (b, a), s in zip(pads, self.shape))
      return self.shrink(shr).pad(tuple((max(b, 0), max(a, 0)) for b, a in pads), value=value)
    if all(b == 0 and a == 0 for b, a in pads if isinstance(b, int) and isinstance(a, int)) and all_int(flatten(pads)): return self
    ret = F.Pad.apply(self, arg=pads)
    if value == 0: return ret
    inside = F.Pad.apply(Tensor.ones(self.shape, dtype=dtypes.bool, device=self.device, requires_grad=False), arg=pads)
    return inside.where(ret, Tensor(dtypes.as_const(value, self.dtype), device=self.device, dtype=self.dtype))
  def _pad_edges(self, pads: tuple[tuple[sint, sint], ...], mode: str) -> Tensor:
    """reflect / replicate / circular padding from movement ops only, one dim at a time (so corners are the padding of
    the padding, as torch's). Each side is a shrunk piece of the dim (flipped for reflect, one edge element expanded for
    replicate, the far end for circular) and cat puts the three pieces together (pads and adds: it fuses like a constant
    pad). Any number of dims, where torch takes only the last 1 to 3.

    A negative pad crops, in torch's order: circular crops first and wraps what is left; reflect and replicate pad the
    whole dim and crop after (element i reads x[reflect(i - before)] of the uncropped x, so reflect takes pads up to the
    dim's full size even where the crop leaves less). A crop is done first as far as the padding on the other side does
    not read what it removes (there both orders give the same), the rest after padding."""
    if not all_int(flatten(pads)): raise ShapeError(f"pad mode {mode!r} needs int pads, got {pads}")
    first, later = [], []  # per dim: the crop done before padding, and the one left for after
    for d, ((b, a), n) in enumerate(zip(cast("tuple[tuple[int, int], ...]", pads), self.shape)):  # int pads: checked above
      cb, ca, pb, pa = max(-b, 0), max(-a, 0), max(b, 0), max(a, 0)
      if (pb or pa) and not isinstance(n, int): raise ShapeError(f"pad mode {mode!r} needs a concrete size for padded dim {d}, got {n}")
      if isinstance(n, int) and n + b + a < 0: raise ShapeError(f"pad ({b}, {a}) crops more than dim {d} of shape {self.shape} has")
      if mode == "reflect" and (pb or pa) and (pb >= n or pa >= n):
        raise ShapeError(f"reflect padding ({b}, {a}) of dim {d} must be less than its size {n} (shape {self.shape})")
      if mode == "circular":
        first.append((cb, ca)); later.append((0, 0)); continue
      # the far side's padding reads the elements next to its edge: reflect `pad` of them and the edge, replicate the edge
      def kept(p: int) -> int: return 0 if not p else (p + 1 if mode == "reflect" else 1)
      cb1, ca1 = (max(min(cb, n - kept(pa)), 0), max(min(ca, n - kept(pb)), 0)) if isinstance(n, int) else (cb, ca)
      first.append((cb1, ca1)); later.append((cb - cb1, ca - ca1))
    x = self.shrink(tuple((lo, s - hi) for (lo, hi), s in zip(first, self.shape)))
    for d, (b, a) in enumerate(cast("tuple[tuple[int, int], ...]", pads)):
      b, a, n = max(b, 0), max(a, 0), x.shape[d]
      if b == 0 and a == 0: continue
      if not isinstance(n, int): raise ShapeError(f"pad mode {mode!r} needs a concrete size for padded dim {d}, got {n}")
      if mode == "circular" and (b > n or a > n):
        raise ShapeError(f"circular padding ({b}, {a}) of dim {d} can be at most its size {n} (shape {x.shape}): it wraps once")
      if n == 0: raise ShapeError(f"pad mode {mode!r} cannot pad the empty dim {d} of shape {x.shape}")
      def piece(lo: int, hi: int) -> Tensor: return x.shrink(tuple((lo, hi) if j == d else None for j in range(x.ndim)))
      def run(t: Tensor, k: int) -> Tensor: return t.expand(tuple(k if j == d else s for j, s in enumerate(t.shape)))
      if mode == "reflect": left, right = piece(1, b + 1).flip(d), piece(n - 1 - a, n - 1).flip(d)
      elif mode == "replicate": left, right = run(piece(0, 1), b), run(piece(n - 1, n), a)
      else: left, right = piece(n - b, n), piece(0, a)
      x = Tensor.cat(*[t for t, k in ((left, b), (x, n), (right, a)) if k], dim=d)
    return x.shrink(tuple((lo, s - hi) for (lo, hi), s in zip(later, x.shape))) if any(lo or hi for lo, hi in later) else x
  def pad2d(self, padding: Sequence[int], value: float = 0.0) -> Tensor:
    """Pad the last len(padding)//2 dims with a flat (left, right, top, bottom, ...) tuple, last dim first."""
    return self.pad(tuple(padding), value=value)
  def transpose(self, dim0: int = 1, dim1: int = 0) -> Tensor:
    a, b = self._dims((dim0, dim1))
    swapped = {a: b, b: a}
    return self.permute([swapped.get(i, i) for i in range(self.ndim)])
  @property
  def T(self) -> Tensor: return self.transpose()
  # flatten, unflatten, squeeze and unsqueeze are reshapes that replace the dims [lo, hi) by others (_splice)
  def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    lo, last = self._dims((start_dim, end_dim))
    return self.reshape(_splice(self.shape, lo, last + 1, (prod(self.shape[lo:last + 1]),)))
  def unflatten(self, dim: int, sizes: tuple[int, ...]) -> Tensor:
    at = self._resolve_dim(dim)
    return self.reshape(_splice(self.shape, at, at + 1, sizes))
  def squeeze(self, dim: int | None = None) -> Tensor:
    """Drop size-1 dims: all of them, or only `dim` (a no-op when that dim is not 1)."""
    if dim is None: return self.reshape(tuple(s for s in self.shape if not (isinstance(s, int) and s == 1)))
    at = self._resolve_dim(dim)
    if not self.ndim or self.shape[at] != 1: return self
    return self.reshape(_splice(self.shape, at, at + 1, ()))
  def unsqueeze(self, dim: int) -> Tensor:
    at = self._resolve_dim(dim, extra=True)
    return self.reshape(_splice(self.shape, at, at, (1,)))
  def _resolve_dim(self, dim: int, *, extra: bool = False) -> int:
    """dim as a position in [0, ndim), or [0, ndim] with extra (an insert position); negative dims count from the end.
    A 0-d tensor takes 0 and -1 (and keeps them as given)."""
    n = self.ndim + (1 if extra else 0)
    hi = max(n, 1)
    if isinstance(dim, int) and -hi <= dim < hi: return dim if dim >= 0 else dim + n
    raise AxisError(f"dimension {dim} is out of range for a tensor of shape {self.shape} (expected [{-hi}, {hi - 1}])")
  def _dims(self, dims: Sequence[int]) -> tuple[int, ...]: return tuple(self._resolve_dim(d) for d in dims)

  # *** indexing ***
  def __iter__(self):
    for i in range(len(self)): yield self[i]
  def _normalize_indices(self, indices) -> list[Any]:
    """One entry per index item, Ellipsis expanded, lists / tuples / ndarrays turned into int index arrays
    (_sequence_index), missing trailing dims as full slices. A list that _list_is_tuple is a tuple of items."""
    if isinstance(indices, list) and _list_is_tuple(indices): indices = tuple(indices)
    items = list(indices) if isinstance(indices, tuple) else [indices]
    for i, it in enumerate(items):
      if isinstance(it, (list, tuple, np.ndarray)): items[i] = self._sequence_index(it)
      elif isinstance(it, np.integer): items[i] = int(it)  # a numpy int is an int index (numpy, torch)
      elif isinstance(it, bool) or not (it is None or it is Ellipsis or isinstance(it, (int, slice, Tensor, UOp))):
        # IndexError, as numpy, torch and tinygrad raise, and the TypeError this raised before
        raise IndexTypeError(f"invalid index {it!r} of type {type(it).__name__}: use int, slice, None, Ellipsis, or an int Tensor/list")
    if sum(1 for it in items if it is Ellipsis) > 1: raise IndexError("an index can only have a single ellipsis ('...')")
    consumed = sum(1 for it in items if it is not None and it is not Ellipsis)
    if consumed > self.ndim: raise IndexError(f"too many indices for tensor of shape {self.shape}: {consumed} indices for {self.ndim} dims")
    fill = [slice(None)] * (self.ndim - consumed)
    if any(it is Ellipsis for it in items):
      at = next(i for i, it in enumerate(items) if it is Ellipsis)
      return items[:at] + fill + items[at + 1:]
    return items + fill
  def _sequence_index(self, seq) -> Tensor | np.ndarray:
    """A list / tuple (nested or not) or ndarray used as one index item (an item of a tuple index, or a list
    _list_is_tuple leaves whole): one index array however deep, as numpy, torch and tinygrad read an item.
    Host data stays an int ndarray (__getitem__ checks its bounds); a sequence holding Tensors stacks them (ints and
    nested lists in it become Tensors first), so they must all have one shape (torch and tinygrad 0.10.0 raise
    TypeError for Tensors with dims in an item: the stack is numpy's reading)."""
    def has_tensor(v) -> bool: return isinstance(v, Tensor) or (isinstance(v, (list, tuple)) and any(has_tensor(e) for e in v))
    if isinstance(seq, (list, tuple)) and has_tensor(seq):
      def part(e) -> Tensor:
        if isinstance(e, Tensor): return e
        sub = self._sequence_index(e) if isinstance(e, (list, tuple)) else np.array(e)
        return sub if isinstance(sub, Tensor) else self._index_tensor(sub)  # a nested list of Tensors is stacked already
      parts = [part(e) for e in seq]
      if len({p.shape for p in parts}) > 1:
        raise IndexError(f"a list of index Tensors needs them all of the same shape, got {[p.shape for p in parts]}")
      if not all(dtypes.is_int(p.dtype) for p in parts):
        raise IndexError("index Tensors in a list must be int tensors (boolean masks are not supported)")
      dt = least_upper_dtype(*(p.dtype for p in parts))
      return Tensor.stack(*[p.cast(dt) for p in parts])
    try: arr = np.array(seq)
    except ValueError: raise IndexError(f"a ragged list cannot be an index: {seq!r}") from None
    if arr.dtype == np.object_: raise IndexError(f"a ragged list cannot be an index: {seq!r}")
    if arr.size == 0 and arr.dtype == np.float64: arr = arr.astype(np.int32)  # [] selects nothing
    if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer): return self._index_tensor(arr)  # raises: not ints
    # a Python list keeps the dtype Tensor(list) gives it (the default int where the values fit), as before
    info = np.iinfo(dtypes.default_int.np)
    if not isinstance(seq, np.ndarray) and (not arr.size or (info.min <= arr.min() and arr.max() <= info.max)):
      arr = arr.astype(dtypes.default_int.np)
    return arr
  def _index_tensor(self, arr: np.ndarray) -> Tensor:
    if arr.dtype == np.bool_:
      raise IndexError("boolean mask indices inside a list or tuple are not supported: index with the bool Tensor or ndarray alone "
                       "(x[mask]), or use masked_select / where")
    if not np.issubdtype(arr.dtype, np.integer): raise IndexError(f"an index must hold ints (or be an int Tensor), got {arr.dtype}")
    return Tensor(arr.astype(np.int64) if arr.dtype == np.uint64 else arr, device=self.device, requires_grad=False)
  def __getitem__(self, indices) -> Tensor:
    """numpy-style indexing: ints, slices (any step), None, Ellipsis, and int Tensors/lists (advanced indexing).

    Basic indices become shrink/flip/pad/reshape views. Tensor indices become a one-hot compare against an arange and a
    masked sum (a gather that stays lazy and differentiable); out-of-range tensor index values select zeros.
    Int indices are applied first, like torch and tinygrad, so they do not separate tensor indices when placing the
    broadcast dims: x[1, :, idx] has shape (4, *idx.shape) for x of shape (3, 4, 5) (numpy would put idx's dims first).
    A 0-d index Tensor counts as an int there too (torch's rule). A list holding a Tensor, a sequence, a slice, None or
    Ellipsis is a tuple of items, as in tinygrad and torch (x[[[0, 1], [2, 0]]] is x[[0, 1], [2, 0]], see
    _list_is_tuple); a list of ints is one index array, and a sequence as an item is one index array however deep
    (_sequence_index). Host index data out of range raises IndexError.
    """
    if (isinstance(indices, Tensor) and indices.dtype == dtypes.bool) or (isinstance(indices, np.ndarray) and indices.dtype == np.bool_):
      return self._bool_index(indices)
    items = self._normalize_indices(indices)
    x, dim = self, 0
    shrinks: list[tuple[sint, sint]] = []
    flips: list[int] = []
    steps: list[int] = []
    out_shape: list[sint] = []         # shape after the basic indices
    tensor_idx: list[tuple[int, Tensor]] = []  # (position in out_shape, index tensor)
    for it in items:
      if it is None:
        out_shape.append(1); continue
      size = self.shape[dim]
      if isinstance(it, np.ndarray):  # host index data: out of range raises, as in numpy and torch
        if it.size and isinstance(size, int) and not (-size <= int(it.min()) and int(it.max()) < size):
          raise IndexError(f"index {int(it.max()) if int(it.max()) >= size else int(it.min())} is out of bounds for dimension {dim} with size {size}")
        it = self._index_tensor(it)
      if isinstance(it, Tensor):
        if not (dtypes.is_int(it.dtype)):
          raise IndexError(f"tensors used as indices must be int tensors, got {it.dtype} "
                           "(a boolean mask works alone, x[mask], or through masked_select)")
        tensor_idx.append((len(out_shape), it))
        shrinks.append((0, size)); steps.append(1); out_shape.append(size)
      elif isinstance(it, UOp):  # a bound Variable as an int index (e.g. a KV cache position)
        shrinks.append((it, it + 1)); steps.append(1)
      elif isinstance(it, int):
        if not isinstance(size, int): raise IndexError(f"int index {it} on symbolic dimension {dim} of shape {self.shape}")
        if not -size <= it < size: raise IndexError(f"index {it} is out of bounds for dimension {dim} with size {size} (shape {self.shape})")
        i = it + size if it < 0 else it
        shrinks.append((i, i + 1)); steps.append(1)
      else:  # slice
        if not all(v is None or isinstance(v, (int, UOp)) for v in (it.start, it.stop, it.step)):
          raise TypeError(f"slice {it} must have int (or Variable) bounds")
        if it.step == 0: raise ValueError("slice step cannot be zero")
        if not isinstance(size, int) or isinstance(it.start, UOp) or isinstance(it.stop, UOp):
          # symbolic: only forward slices with step 1 and non-negative bounds
          if it.step not in (None, 1): raise IndexError(f"slice {it} with a step on a symbolic dimension of shape {self.shape}")
          lo, hi = (0 if it.start is None else it.start), (size if it.stop is None else it.stop)
          shrinks.append((lo, hi)); steps.append(1); out_shape.append(hi - lo)
        else:
          start, stop, step = it.indices(size)
          n = len(range(start, stop, step))
          if n == 0: lo = hi = 0
          elif step > 0: lo, hi = start, start + (n - 1) * step + 1
          else: lo, hi = start + (n - 1) * step, start + 1
          shrinks.append((lo, hi)); steps.append(abs(step)); out_shape.append(n)
          if step < 0: flips.append(dim)
      dim += 1
    x = x.shrink(tuple(shrinks))
    if flips: x = x.flip(flips)
    if any(st != 1 for st in steps):
      # stride: pad each dim to n*step, view it as (n, step) and keep column 0
      n_ = [(s + st - 1) // st if isinstance(s, int) else s for s, st in zip(x.shape, steps)]
      x = x.pad(tuple((0, n * st - s) if isinstance(s, int) else None for s, n, st in zip(x.shape, n_, steps)))
      x = x.reshape(flatten((n, st) for n, st in zip(n_, steps)))
      x = x.shrink(tuple(flatten(((0, n), (0, 1)) for n in n_))).reshape(n_)
    x = x.reshape(tuple(out_shape))
    if not tensor_idx: return x
    return x._index_with_tensors(tensor_idx)
  def _index_with_tensors(self, tensor_idx: list[tuple[int, Tensor]]) -> Tensor:
    dims = [d for d, _ in tensor_idx]
    sizes = [self.shape[d] for d in dims]
    idxs = [t if dtypes.is_unsigned(t.dtype) else (t < 0).where(t + s, t) for (_, t), s in zip(tensor_idx, sizes)]
    try: bshape = _broadcast_shape(*(t.shape for t in idxs))
    except ShapeError as e: raise IndexShapeError(f"index tensors do not broadcast together: {e}") from None  # numpy's, torch's IndexError
    rest = [d for d in range(self.ndim) if d not in dims]
    k, nb, nr = len(dims), len(bshape), len(rest)
    # mask[*b, i_1..i_k, *r] = all_j(idx_j[*b] == i_j), compared at the full shape: the index and the arange are
    # broadcast, not the compare's result (an expanded compare would be stored as a kernel of its own first)
    full = (*bshape, *sizes, *[self.shape[d] for d in rest])
    mask: Tensor | None = None
    for j, (t, s) in enumerate(zip(idxs, sizes)):
      ar = Tensor.arange(s, device=self.device, requires_grad=False).cast(t.dtype).reshape(*[1] * (nb + j), s, *[1] * (k - j - 1 + nr))
      m = t._broadcast_to(bshape).reshape(*bshape, *[1] * (k + nr)).expand(full) == ar.expand(full)
      mask = m if mask is None else (mask & m)
    assert mask is not None
    xp = self.permute(*dims, *rest).reshape(*[1] * nb, *sizes, *[self.shape[d] for d in rest])
    picked = mask.where(xp, Tensor(0, device=self.device, dtype=self.dtype))
    ret = picked.sum(tuple(range(nb, nb + k))).cast(self.dtype)  # one non-zero term per sum: exact for every dtype
    # numpy rule: adjacent tensor indices put the broadcast dims where they were, separated ones put them first. A 0-d
    # index counts as an int (torch's rule), so it separates nothing: only the indices with dims are checked
    scalar = {d for d, t in tensor_idx if not t.ndim}
    placed = [d for d in dims if d not in scalar] or dims
    rank = [sum(1 for e in range(d) if e not in scalar) for d in placed]  # positions with the 0-d indices taken out
    if rank == list(range(rank[0], rank[0] + len(rank))) and placed[0] > 0:
      before = sum(1 for d in rest if d < placed[0])
      order = list(range(nb, nb + before)) + list(range(nb)) + list(range(nb + before, nb + nr))
      ret = ret.permute(order)
    return ret
  def __setitem__(self, indices, v) -> None:
    """In-place write through any index __getitem__ accepts (last write wins for repeated tensor indices).

    Builds the new value with a one-hot scatter and assigns it; this costs O(numel * selected) work, fine for small updates."""
    if self.requires_grad or (isinstance(v, Tensor) and v.requires_grad):
      # NotImplementedError: tinygrad 0.10.0's type, and a RuntimeError (torch's, and ours before)
      raise NotImplementedError("setitem on a tensor that requires grad is not supported: it would break the autograd graph")
    if not all_int(self.shape): raise ValueError(f"setitem needs a concrete shape, got {self.shape}")
    n = self.numel()
    pos = Tensor.arange(n, device=self.device, requires_grad=False).reshape(self.shape)[indices]
    vt = v if isinstance(v, Tensor) else Tensor(v, device=self.device, dtype=self.dtype)
    # a value read from this tensor's own buffer through another view (t[1:] = t[:-1]) is copied out first: the write
    # may only read the buffer at the element it writes (the scheduler refuses the shifted read), and numpy, torch and
    # tinygrad give the values from before the write
    if self.lazydata.is_realized and _reads_base(vt.lazydata, self.lazydata.base): vt = vt.contiguous()
    try: vt = vt.cast(self.dtype)._broadcast_to(pos.shape)
    except ValueError: raise ShapeError(f"setitem: cannot broadcast value of shape {vt.shape} to the indexed shape {pos.shape}") from None
    m = pos.numel()
    if m == 0: return
    hit = pos.reshape(1, m) == Tensor.arange(n, device=self.device, requires_grad=False).reshape(n, 1)  # (n, m)
    slot = Tensor.arange(1, m + 1, device=self.device, requires_grad=False).reshape(1, m)
    last = hit.where(slot, 0).max(-1, keepdim=True)  # 1 + the last slot that writes each element, 0 for none
    vals = (slot == last).where(vt.reshape(1, m), Tensor(0, device=self.device, dtype=self.dtype)).sum(-1).cast(self.dtype)
    new = (last.reshape(self.shape) > 0).where(vals.reshape(self.shape), self)
    self.assign(new.contiguous() if not self.lazydata.is_realized else new)

  # *** combining and splitting ***
  def cat(self, *args: Tensor, dim: int = 0) -> Tensor:
    """Concatenate along dim: each tensor is padded to the full length and the results are added (one fused kernel)."""
    tensors = [self, *args]
    d = self._resolve_dim(dim)
    for t in args:
      if t.ndim != self.ndim or any(resolve(sym_ne(a, b)) for i, (a, b) in enumerate(zip(self.shape, t.shape)) if i != d):
        raise ShapeError(f"cat along dim {dim}: shapes {', '.join(str(x.shape) for x in tensors)} differ outside that dim")
    dt = least_upper_dtype(*(t.dtype for t in tensors))
    offsets = [0]
    for t in tensors: offsets.append(offsets[-1] + t.shape[d])
    parts = [t.cast(dt).pad(tuple((offsets[i], offsets[-1] - offsets[i + 1]) if j == d else None for j in range(t.ndim)))
             for i, t in enumerate(tensors)]
    return functools.reduce(Tensor.add, parts)
  def stack(self, *args: Tensor, dim: int = 0) -> Tensor:
    tensors = [self, *args]
    for t in args:
      if t.shape != self.shape: raise ShapeError(f"stack needs tensors of one shape, got {', '.join(str(x.shape) for x in tensors)}")
    d = self._resolve_dim(dim, extra=True)
    return Tensor.cat(*[t.unsqueeze(d) for t in tensors], dim=d)
  def meshgrid(self, *args: Tensor, indexing: str = "ij") -> tuple[Tensor, ...]:
    """Coordinate grids from 0-d or 1-d tensors (self first; also callable as Tensor.meshgrid(a, b, ...)): output k
    has tensor k laid along dim k ("ij") or, with "xy", the first two dims swapped, like torch and numpy."""
    tensors = (self,) + args
    if indexing not in ("ij", "xy"): raise ArgumentError(f"meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
    if any(t.ndim > 1 for t in tensors): raise ShapeError(f"meshgrid needs 0-d or 1-d tensors, got shapes {[t.shape for t in tensors]}")
    sizes = [t.numel() for t in tensors]
    where = list(range(len(tensors)))
    if indexing == "xy" and len(tensors) > 1: where[0], where[1] = 1, 0
    out_shape: list[sint] = [0] * len(tensors)
    for k, d in enumerate(where): out_shape[d] = sizes[k]
    def laid(t: Tensor, d: int) -> Tensor: return t.reshape(*[-1 if i == d else 1 for i in range(len(tensors))]).expand(*out_shape)
    return tuple(laid(t, d) for t, d in zip(tensors, where))
  def repeat(self, repeats, *args) -> Tensor:
    """Tile the tensor repeats[i] times along dim i (torch's repeat, numpy's tile)."""
    reps = _argfix(repeats, *args)
    if len(reps) < self.ndim: raise ShapeError(f"repeat {reps} needs at least {self.ndim} entries for shape {self.shape}")
    if any(not isinstance(r, int) or r < 0 for r in reps): raise ArgumentError(f"repeat counts must be non-negative ints, got {reps}")
    base = (1,) * (len(reps) - self.ndim) + self.shape
    return self.reshape(flatten((1, s) for s in base)).expand(flatten((r, s) for r, s in zip(reps, base))) \
      .reshape(tuple(r * s for r, s in zip(reps, base)))
  def repeat_interleave(self, repeats: int, dim: int | None = None) -> Tensor:
    """Each element `repeats` times in a row along dim (of the flattened tensor when dim is None): a new axis after dim
    is broadcast to `repeats` and merged into dim."""
    if not isinstance(repeats, (int, np.integer)) or repeats < 0:
      raise ArgumentError(f"repeat_interleave: repeats must be a non-negative int, got {repeats!r}")
    x, d = (self.flatten(), 0) if dim is None else (self, self._resolve_dim(dim))
    copies = x.unsqueeze(d + 1).expand(_splice(x.shape, d + 1, d + 1, (repeats,)))
    return copies.flatten(d, d + 1)
  def split(self, sizes: int | Sequence[int], dim: int = 0) -> tuple[Tensor, ...]:
    d = self._resolve_dim(dim)
    n = self.shape[d]
    if isinstance(sizes, int):
      if sizes <= 0: raise ArgumentError(f"split size must be positive, got {sizes}")
      sizes = [min(sizes, n - i) for i in range(0, max(1, n), sizes)]  # type: ignore[arg-type]  # a concrete dim (range raises on a UOp)
    if any(isinstance(sz, int) and sz < 0 for sz in sizes): raise ArgumentError(f"split sizes must be non-negative, got {list(sizes)}")
    if sum(sizes) != n: raise ShapeError(f"split sizes {list(sizes)} sum to {sum(sizes)}, but dim {dim} of shape {self.shape} has {n}")
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    return tuple(self.shrink(tuple((s0, s0 + sz) if j == d else None for j in range(self.ndim))) for s0, sz in zip(starts, sizes))
  def chunk(self, chunks: int, dim: int = 0) -> list[Tensor]:
    if chunks <= 0: raise ArgumentError(f"chunk needs a positive number of chunks, got {chunks}")
    n = self.shape[self._resolve_dim(dim)]
    return list(self.split(-(-n // chunks) if n else [0] * chunks, dim=dim))
  def gather(self, dim: int, index: Tensor) -> Tensor:
    """out[i][j][k] = self[index[i][j][k]][j][k] (for dim=0): a one-hot compare against an arange and a masked sum."""
    d = self._resolve_dim(dim)
    if index.ndim != self.ndim: raise ShapeError(f"gather: index has {index.ndim} dims ({index.shape}), self has {self.ndim} ({self.shape})")
    if not dtypes.is_int(index.dtype): raise DTypeError(f"gather: index must be an int tensor, got {index.dtype}")
    if any(resolve(i > s) for j, (s, i) in enumerate(zip(self.shape, index.shape)) if j != d):
      raise ShapeError(f"gather: index shape {index.shape} is larger than self {self.shape} outside dim {dim}")
    n = self.shape[d]
    x = self.shrink(tuple((0, i) if j != d else None for j, i in enumerate(index.shape))).unsqueeze(-1).transpose(-1, d)
    picks = _one_hot_mask(index, n, self.device)
    return picks.where(x, Tensor(0, device=self.device, dtype=self.dtype)).sum(-1).cast(self.dtype)
  def masked_fill(self, mask: Tensor, value) -> Tensor: return mask.where(value, self)
  def _selected(self, mask: Tensor | np.ndarray, lead: int) -> Tensor:
    """self's first `lead` dims merged into one, indexed by the row-major positions of mask's True values (the mask
    has those dims' shape; a lazy mask is realized here: the count decides the output's shape)."""
    pos = np.flatnonzero(mask.numpy() if isinstance(mask, Tensor) else mask)
    flat = self.reshape(prod(self.shape[:lead]), *self.shape[lead:])
    return flat[pos.astype(np.int32 if pos.size == 0 or pos[-1] < 2**31 else np.int64)]
  def masked_select(self, mask: Tensor) -> Tensor:
    """The elements of self where the bool `mask` is True, as a 1-D tensor in row-major order (torch's masked_select);
    self and mask broadcast together.

    The output's length is the number of True values, which the lazy graph cannot know: the mask is realized here
    (its kernels run now, and under TinyJit the recorded call's selection is replayed). self stays lazy: the selection
    is a gather (one-hot compare and sum, O(numel x count) work) and its gradient reaches the selected elements (summed
    over broadcast dims)."""
    mask = mask if isinstance(mask, Tensor) else Tensor(mask, device=self.device)
    if mask.dtype != dtypes.bool: raise DTypeError(f"masked_select needs a bool mask, got {mask.dtype}")
    shape = _broadcast_shape(self.shape, mask.shape)
    if not all_int(shape): raise ShapeError(f"masked_select needs concrete shapes, got {shape}")
    return self._broadcast_to(shape)._selected(mask._broadcast_to(shape), len(shape))
  def _bool_index(self, mask: Tensor | np.ndarray) -> Tensor:
    """x[mask] for a bool mask over x's leading dims: shape (count, *x.shape[mask.ndim:]) (torch and numpy); like
    masked_select, a Tensor mask is realized to know the count."""
    ms = tuple(mask.shape)
    if ms != tuple(self.shape[:len(ms)]):
      raise MaskShapeError(f"bool mask of shape {ms} does not match the leading dims of shape {self.shape}")
    if not all_int(self.shape): raise ShapeError(f"a bool mask index needs a concrete shape, got {self.shape}")
    return self._selected(mask, len(ms))
  @staticmethod
  def _tri(r: sint, c: sint, diagonal: int = 0, **kwargs) -> Tensor:
    """bool (r, c): True where col - row >= diagonal.

    Concrete shapes: a view of one padded constant, so the mask is VALID conditions inside the kernel that uses it and
    costs no kernel of its own. Repeat a vector u of length m = r + c row after row, and read that as rows of m - 1
    starting at element r - 1: element (i, j) is u[(i*(m-1) + j + r-1) mod m] = u[j - i + r - 1] (j - i + r - 1 lies in
    [0, m - 1), so nothing wraps). u[t] = (t >= diagonal + r - 1) is one run of ones padded on the left.
    Symbolic shapes compare two aranges instead."""
    if not (isinstance(r, int) and isinstance(c, int)) or r == 0 or c == 0:
      return Tensor.arange(r, **kwargs).unsqueeze(-1) + diagonal <= Tensor.arange(c, **kwargs)
    m = r + c
    zeros = min(max(diagonal + r - 1, 0), m)
    u = Tensor.ones(m - zeros, dtype=dtypes.bool, **kwargs).pad(((zeros, 0),))
    rows = u.reshape(1, m).expand(r, m).reshape(r * m).shrink(((r - 1, r - 1 + r * (m - 1)),)).reshape(r, m - 1)
    return rows.shrink(((0, r), (0, c)))
  def _triangle(self, diagonal: int, upper: bool) -> Tensor:
    """Zero what lies off one side of the diagonal'th diagonal of the last two dims: below it (upper) or above it.
    Both use one mask: the lower part keeps what the mask one diagonal further up does not select."""
    if self.ndim < 2: raise ShapeError(f"{'triu' if upper else 'tril'} needs at least 2 dims, got shape {self.shape}")
    on_or_above = Tensor._tri(self.shape[-2], self.shape[-1], diagonal if upper else diagonal + 1, device=self.device, requires_grad=False)
    zero = Tensor(0, device=self.device, dtype=self.dtype)
    return on_or_above.where(self, zero) if upper else on_or_above.where(zero, self)
  def triu(self, diagonal: int = 0) -> Tensor: return self._triangle(diagonal, upper=True)
  def tril(self, diagonal: int = 0) -> Tensor: return self._triangle(diagonal, upper=False)
  def one_hot(self, num_classes: int = -1) -> Tensor:
    """int32 one-hot along a new last dim; num_classes=-1 realizes self to find max+1."""
    if not dtypes.is_int(self.dtype): raise DTypeError(f"one_hot needs an int tensor, got {self.dtype}")
    if num_classes == -1: num_classes = int(self.max().item()) + 1
    return _one_hot_mask(self, num_classes, self.device).where(1, 0)
  def roll(self, shifts: int | tuple[int, ...], dims: int | tuple[int, ...]) -> Tensor:
    sh, ds = make_tuple(shifts, 1), tuple(self._resolve_dim(d) for d in make_tuple(dims, 1))
    if len(sh) != len(ds): raise ShapeError(f"roll: {len(sh)} shifts for {len(ds)} dims")
    x = self
    for s, d in zip(sh, ds):
      n = x.shape[d]
      if n == 0 or s % n == 0: continue
      s %= n
      x = x.split([n - s, s], d)[1].cat(x.split([n - s, s], d)[0], dim=d)
    return x

  # *** reduce ***
  def _axes(self, axis: int | Sequence[int] | None) -> tuple[int, ...]:
    """A reduce's `axis` argument (an int, a sequence, or None for all) as checked non-negative dims; a 0-d tensor has none."""
    if axis is None: return tuple(range(self.ndim))
    dims = tuple(map(self._resolve_dim, make_tuple(axis, 1)))
    return dims if self.ndim else ()
  def _reduce(self, fxn: type[F.Function], axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
    """fxn over `axis`; the reduced dims stay as 1s with keepdim and are dropped (one reshape) without."""
    dims = self._axes(axis)
    kept = fxn.apply(self, axis=dims)
    return kept if keepdim else kept.reshape(self._reduced_shape(dims, keepdim=False))
  def _acc_dtype(self, acc_dtype: DTypeLike | None) -> DType:
    """The dtype sum and prod produce: the one asked for, else the reduce rule's widening of self.dtype."""
    return reduce_output_dtype(self.dtype) if acc_dtype is None else to_dtype(acc_dtype)
  def sum(self, axis=None, keepdim: bool = False, acc_dtype: DTypeLike | None = None) -> Tensor:
    out_dt = self._acc_dtype(acc_dtype)
    acc = reduce_acc_dtype(out_dt)  # half sums accumulate in float32 and cast back
    ret = self.cast(acc)._reduce(F.Sum, axis, keepdim)
    return ret.cast(out_dt) if acc != out_dt else ret
  def prod(self, axis=None, keepdim: bool = False, acc_dtype: DTypeLike | None = None) -> Tensor:
    widened = self.cast(self._acc_dtype(acc_dtype))
    return widened._reduce(F.Prod, axis, keepdim)
  def max(self, axis=None, keepdim: bool = False) -> Tensor: return self._reduce(F.Max, axis, keepdim)
  def min(self, axis=None, keepdim: bool = False) -> Tensor:
    """The max of an order-reversed copy, reversed back (there is no min reduce)."""
    return self._inverse().max(axis=axis, keepdim=keepdim)._inverse()
  def mean(self, axis=None, keepdim: bool = False) -> Tensor:
    out = self.sum(axis=axis, keepdim=keepdim)
    n = prod(self.shape) // prod(out.shape) if 0 not in out.shape else 1
    dt = least_upper_float(self.dtype)
    return out.cast(dt).div(n)
  def var(self, axis=None, keepdim: bool = False, correction: int = 1) -> Tensor:
    """Squared deviations from the mean, summed over `axis` and divided by (count - correction), at least 0."""
    sq_dev = (self - self.mean(axis=axis, keepdim=True)).square()
    # the count: the sizes of the dims the reduce shrinks (a reduced dim of size 1 adds nothing)
    count = prod(n for n, m in zip(self.shape, self._reduced_shape(axis, keepdim=True)) if resolve(sym_ne(n, m)))
    dof = smax(0, count - correction)
    return sq_dev.sum(axis=axis, keepdim=keepdim).div(dof)
  def std(self, axis=None, keepdim: bool = False, correction: int = 1) -> Tensor:
    """sqrt(var). The gradient is torch's: 0 where the std is 0 (our old one was nan there, sqrt's 1/0 times 0), nan
    where it is undefined (correction >= the count, e.g. one element with correction=1: the value is nan too).
    tinygrad 0.10.0 gives 0 for that last case; nan is right (the std of one sample is undefined), so we keep it."""
    return F.StdSqrt.apply(self.var(axis, keepdim, correction)._to_float())
  def var_mean(self, axis=None, keepdim: bool = False, correction: int = 1) -> tuple[Tensor, Tensor]:
    return self.var(axis, keepdim, correction), self.mean(axis, keepdim)
  def std_mean(self, axis=None, keepdim: bool = False, correction: int = 1) -> tuple[Tensor, Tensor]:
    return self.std(axis, keepdim, correction), self.mean(axis, keepdim)
  def _reduced_shape(self, axis, keepdim: bool) -> tuple[sint, ...]:
    """The shape a reduce over `axis` leaves: reduced dims become 1 with keepdim and go away without."""
    dims = self._axes(axis)
    if keepdim: return tuple(1 if i in dims else s for i, s in enumerate(self.shape))
    return tuple(s for i, s in enumerate(self.shape) if i not in dims)
  def _inverse(self) -> Tensor:
    """An order-reversing map (argmin = argmax of it): -x for floats, ~x for ints, not x for bools."""
    return -self if dtypes.is_float(self.dtype) else (~self if dtypes.is_int(self.dtype) else self.logical_not())
  def argmax(self, axis: int | None = None, keepdim: bool = False) -> Tensor:
    """Index of the first maximum along axis (of the flattened tensor when axis is None), as int32."""
    if axis is None: return self.flatten().argmax(0, keepdim=False).reshape((1,) * self.ndim if keepdim else ())
    ax = self._resolve_dim(axis)
    n = self.shape[ax]
    hits = self == self.max(axis=ax, keepdim=True)
    # position i along ax counts n - i: of the positions holding the max, the first has the largest count, so n minus the
    # largest count among the hits is its index
    countdown = Tensor.arange(n, 0, -1, device=self.device, requires_grad=False).reshape(n, *[1] * (self.ndim - ax - 1))
    best = hits.where(countdown, 0).max(axis=ax, keepdim=keepdim)
    return (n - best).cast(dtypes.int32)
  def argmin(self, axis: int | None = None, keepdim: bool = False) -> Tensor: return self._inverse().argmax(axis=axis, keepdim=keepdim)
  SORT_LIMIT = 4096  # the most elements along the sorted dim: sort compares every pair, O(n^2) work per row
  def sort(self, dim: int = -1, descending: bool = False, stable: bool = True) -> tuple[Tensor, Tensor]:
    """(values, indices) sorted along dim, always stable (torch's stable=True: ties keep their order); nan sorts as
    the largest value, as in torch. Indices are int32, like argmax (torch's are int64).

    No data-dependent control flow: element i's place is the number of elements that go before it (smaller, or
    larger when descending; or equal and earlier), from a pairwise compare and a sum, and a one-hot of those places
    against an arange moves the values (a where and a sum, so the gradient flows back through the values) and the
    positions. That is O(n^2) work along the dim, so dims past Tensor.SORT_LIMIT (4096) raise a ShapeError."""
    if self.ndim == 0:
      self._resolve_dim(dim)
      return self, Tensor(0, dtype=dtypes.int32, device=self.device)
    ax = self._resolve_dim(dim)
    n = self.shape[ax]
    if not isinstance(n, int): raise ShapeError(f"sort needs a concrete size along dim {dim}, got {n}")
    if n > Tensor.SORT_LIMIT:
      raise ShapeError(f"sort compares every pair along the dim (O(n^2)): dim {dim} of shape {self.shape} has {n} elements, "
                       f"at most {Tensor.SORT_LIMIT}")
    x = self.transpose(ax, -1)
    if n == 0: return self, self.zeros_like(dtype=dtypes.int32)
    # (..., n_i, n_j) views of x: element i against element j (bools compare False < True). Broadcast before any
    # elementwise op (the nan tests), so nothing elementwise is expanded and has to be stored: two kernels, one per sum
    pair = (*x.shape, n)
    mine, other = (v.expand(pair) for v in (x.detach().unsqueeze(-1), x.detach().unsqueeze(-2)))
    ahead, tie = (other > mine) if descending else (other < mine), other == mine
    if dtypes.is_float(self.dtype):
      mine_nan, other_nan = mine.isnan(), other.isnan()
      ahead = ahead | ((mine_nan & other_nan.logical_not()) if not descending else (other_nan & mine_nan.logical_not()))
      tie = tie | (mine_nan & other_nan)
    pos = Tensor.arange(n, device=self.device, requires_grad=False)
    earlier = pos.reshape(1, n) < pos.reshape(n, 1)  # [i, j]: j comes before i
    place = (ahead | (tie & earlier)).sum(-1)  # (..., n_i): where element i goes
    lands = place.unsqueeze(-2) == pos.reshape(n, 1)  # (..., n_out, n_i)
    values = lands.where(x.unsqueeze(-2), Tensor(0, device=self.device, dtype=self.dtype)).sum(-1).cast(self.dtype)
    indices = lands.where(pos, 0).sum(-1).cast(dtypes.int32)
    return values.transpose(ax, -1), indices.transpose(ax, -1)
  def topk(self, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> tuple[Tensor, Tensor]:  # noqa: A002 (torch's name)
    """The k largest (smallest with largest=False) along dim, in sorted order whatever `sorted` says (torch leaves the
    order open without it), ties in index order; the first k of sort, so the same size limit."""
    ax = self._resolve_dim(dim)
    n = self.shape[ax] if self.ndim else 1
    if not isinstance(k, int) or not 0 <= k <= n: raise ShapeError(f"topk: k={k} must be in [0, {n}] for dim {dim} of shape {self.shape}")
    values, indices = self.sort(dim, descending=largest)
    if self.ndim == 0: return values, indices
    keep = tuple((0, k) if j == ax else None for j in range(self.ndim))
    return values.shrink(keep), indices.shrink(keep)
  def _softmax(self, axis: int, dtype: DTypeLike | None = None) -> tuple[Tensor, Tensor, Tensor]:
    x = self.cast(dtype) if dtype is not None else self
    # subtracting the (detached: it cancels in the gradient) max keeps exp from overflowing
    m = x - x.max(axis=axis, keepdim=True).detach()
    e = m.exp()
    return m, e, e.sum(axis=axis, keepdim=True)
  def softmax(self, axis: int = -1, dtype: DTypeLike | None = None) -> Tensor:
    _, e, ss = self._softmax(axis, dtype)
    return e.div(ss)
  def log_softmax(self, axis: int = -1, dtype: DTypeLike | None = None) -> Tensor:
    m, _, ss = self._softmax(axis, dtype)
    return m - ss.log()
  def _exp_shift(self, axis) -> Tensor:
    """What log(sum(exp)) forms subtract first and add back after the log: the (detached) max along axis keeps exp
    from overflowing; where it is infinite (all -inf or +inf rows) the shift is 0, so those rows give -inf (inf), not nan."""
    peak = self.max(axis=axis, keepdim=True).detach()
    return peak.isinf().where(0, peak)
  def logsumexp(self, axis=None, keepdim: bool = False) -> Tensor:
    shift = self._exp_shift(axis)
    lse = (self - shift).exp().sum(axis=axis, keepdim=True).log() + shift
    return lse.reshape(self._reduced_shape(axis, keepdim))
  def logcumsumexp(self, axis: int = 0) -> Tensor:
    ax = self._resolve_dim(axis)
    if self.ndim == 0: return self
    shift = self._exp_shift(ax)
    return (self - shift).exp().cumsum(ax).log() + shift
  def any(self, axis=None, keepdim: bool = False) -> Tensor: return self.bool().max(axis=axis, keepdim=keepdim)
  def all(self, axis=None, keepdim: bool = False) -> Tensor: return self.logical_not().any(axis=axis, keepdim=keepdim).logical_not()

  # *** elementwise ***
  def _convert(self, dtype: DTypeLike, bitcast: bool) -> Tensor:
    """Convert values (cast) or reinterpret their bits (bitcast) as dtype; nothing is built when the dtype is already right."""
    target = to_dtype(dtype)
    if bitcast and self.requires_grad: raise RuntimeError("can't backprop through bitcast")
    if target == self.dtype: return self
    resized = bitcast and target.itemsize != self.dtype.itemsize
    if resized and (not self.ndim or (isinstance(n := self.shape[-1], int) and n * self.dtype.itemsize % target.itemsize)):
      # a ShapeError, which is also tinygrad's and torch's RuntimeError (and the ValueError this raised before)
      raise ShapeError(f"cannot bitcast {self.dtype} of shape {self.shape} to {target}: the last dimension's bytes do not divide into {target}")
    return F.Cast.apply(self, dtype=target, bitcast=True) if bitcast else F.Cast.apply(self, dtype=target)
  def cast(self, dtype: DTypeLike) -> Tensor: return self._convert(dtype, bitcast=False)
  def bitcast(self, dtype: DTypeLike) -> Tensor: return self._convert(dtype, bitcast=True)
  def float(self) -> Tensor: return self.cast(dtypes.float32)
  def half(self) -> Tensor: return self.cast(dtypes.float16)
  def bfloat16(self) -> Tensor: return self.cast(dtypes.bfloat16)
  def double(self) -> Tensor: return self.cast(dtypes.float64)
  def int(self) -> Tensor: return self.cast(dtypes.int32)
  def long(self) -> Tensor: return self.cast(dtypes.int64)
  def bool(self) -> Tensor: return self.cast(dtypes.bool)

  def _to_float(self) -> Tensor: return self.cast(least_upper_float(self.dtype))
  def neg(self) -> Tensor: return self.logical_not() if self.dtype == dtypes.bool else F.Neg.apply(self)
  def logical_not(self) -> Tensor:
    """x == 0, as bool: a non-bool tensor is cast to bool (x != 0) first, so 2.0 and 0.5 are True and give False."""
    return F.Neq.apply(*self.bool()._broadcasted(True))
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
  # the hyperbolic functions, from exp, log and sqrt (gradients follow by autograd and equal the analytic ones)
  def sinh(self) -> Tensor:
    x = self._to_float()
    return (x.exp() - (-x).exp()) / 2
  def cosh(self) -> Tensor:
    x = self._to_float()
    return (x.exp() + (-x).exp()) / 2
  def _odd(self, f: Callable[[Tensor], Tensor]) -> Tensor:
    """An odd function from its values on x >= 0: f(|x|), negated where x < 0. |x| is a where, not x * sign(x), so
    the gradient at 0 is f'(0) (sign's gradient is 0 and would zero it), and f never sees the cancelling -|x| side."""
    x = self._to_float()
    neg = x < 0
    fy = f(neg.where(-x, x))
    return neg.where(-fy, fy)
  def asinh(self) -> Tensor: return self._odd(lambda y: (y + (y * y + 1).sqrt()).log())
  def acosh(self) -> Tensor:
    """log(x + sqrt(x^2 - 1)): nan below 1, like torch."""
    x = self._to_float()
    return (x + (x * x - 1).sqrt()).log()
  def atanh(self) -> Tensor:
    """(log(1 + x) - log(1 - x)) / 2: +-inf at +-1, nan outside [-1, 1], like torch (two logs, not the log of a
    quotient, so the gradient at +-1 is inf as torch's, not inf - inf = nan)."""
    x = self._to_float()
    return ((1 + x).log() - (1 - x).log()) / 2
  def erf(self) -> Tensor:
    """The error function, by Abramowitz and Stegun's formula 7.1.26 (absolute error below 1.5e-7 for float32):
    1 - t(a1 + t(a2 + t(a3 + t(a4 + t a5)))) e^(-x^2) with t = 1 / (1 + p x), on |x|, odd."""
    p, a = 0.3275911, (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)
    def on_nonneg(y: Tensor) -> Tensor:
      t = 1 / (1 + p * y)
      poly = functools.reduce(lambda acc, c: (acc + c) * t, reversed(a[:-1]), a[-1] * t)
      return 1 - poly * (-(y * y)).exp()
    return self._odd(on_nonneg)
  def reciprocal(self) -> Tensor: return F.Reciprocal.apply(self._to_float())
  def square(self) -> Tensor: return self * self
  def sign(self) -> Tensor: return F.Sign.apply(self)
  def abs(self) -> Tensor: return self * self.sign()
  def clip(self, min_=None, max_=None) -> Tensor:
    """Limit to [min_, max_]; either bound may be left out (not both): a maximum with the lower, then a minimum with the upper."""
    if min_ is None and max_ is None: raise ArgumentError("clip needs min_ or max_ (tinygrad and torch raise RuntimeError without both)")
    out = self
    if min_ is not None: out = out.maximum(min_)
    if max_ is not None: out = out.minimum(max_)
    return out
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
  def isinf(self, detect_positive: builtins.bool = True, detect_negative: builtins.bool = True) -> Tensor:
    return (self == math.inf) * detect_positive + (self == -math.inf) * detect_negative
  def lerp(self, end: Tensor, weight) -> Tensor:
    """self + (end - self) * weight. Integer inputs are computed in float (the difference of two uint8s would wrap
    around); the result has the promoted dtype of self, end and weight, as before (float for a float weight). torch
    has no integer lerp; tinygrad 0.10.0 wraps for a scalar weight, which we take for a bug."""
    if not dtypes.is_float(self.dtype) or (isinstance(end, Tensor) and not dtypes.is_float(end.dtype)):
      out_dtype = (self + (end - self) * weight).dtype  # the promotion only: nothing of this graph is realized
      a = self._to_float()
      b = end._to_float() if isinstance(end, Tensor) else end
      ret = a + (b - a) * weight
      return ret if ret.dtype == out_dtype else (ret.round() if dtypes.is_int(out_dtype) else ret).cast(out_dtype)
    return self + (end - self) * weight

  # activations
  def tanh(self) -> Tensor: return 2.0 * ((2.0 * self).sigmoid()) - 1.0
  def gelu(self) -> Tensor: return 0.5 * self * (1 + (math.sqrt(2 / math.pi) * (self + 0.044715 * self ** 3)).tanh())
  def quick_gelu(self) -> Tensor: return self * (self * 1.702).sigmoid()
  def silu(self) -> Tensor: return self * self.sigmoid()
  def swish(self) -> Tensor: return self.silu()
  def relu6(self) -> Tensor: return self.relu() - (self - 6).relu()
  def hardswish(self) -> Tensor: return self * (self + 3).relu6() * (1 / 6)
  def hardsigmoid(self, alpha: builtins.float = 1 / 6, beta: builtins.float = 0.5) -> Tensor:
    return (alpha * self + beta).relu() - (alpha * self + beta - 1).relu()
  def hardtanh(self, min_val: builtins.float = -1, max_val: builtins.float = 1) -> Tensor: return self.clip(min_val, max_val)
  def leakyrelu(self, neg_slope: builtins.float = 0.01) -> Tensor: return self.relu() - (-neg_slope * self).relu()
  def elu(self, alpha: builtins.float = 1.0) -> Tensor: return self.relu() - alpha * (1 - self.exp()).relu()
  def celu(self, alpha: builtins.float = 1.0) -> Tensor: return self.maximum(0) + (alpha * ((self / alpha).exp() - 1)).minimum(0)
  def softplus(self, beta: builtins.float = 1) -> Tensor:
    # log(1 + e^z) = max(z, 0) + log(1 + e^-|z|): no overflow for large z
    z = self * beta
    return (1 / beta) * (z.maximum(0) + (1 + (-z.abs()).exp()).log())
  def mish(self) -> Tensor: return self * self.softplus().tanh()
  def softsign(self) -> Tensor: return self / (1 + self.abs())

  # *** broadcasted binary ***
  def _broadcasted(self, y: Tensor | ConstType | UOp, reverse: builtins.bool = False, match_dtype: builtins.bool = True) -> tuple[Tensor, Tensor]:
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
  def add(self, x, reverse: builtins.bool = False) -> Tensor: return F.Add.apply(*self._broadcasted(x, reverse))
  def sub(self, x, reverse: builtins.bool = False) -> Tensor:
    a, b = self._broadcasted(x, reverse)
    return a + (-b)
  def mul(self, x, reverse: builtins.bool = False) -> Tensor: return F.Mul.apply(*self._broadcasted(x, reverse))
  def div(self, x, reverse: builtins.bool = False, rounding_mode: str | None = None) -> Tensor:
    a, b = self._broadcasted(x, reverse)
    if rounding_mode == "trunc": return a.idiv(b) if dtypes.is_int(a.dtype) else (a._to_float() / b._to_float()).trunc()
    if rounding_mode == "floor": return a // b if dtypes.is_int(a.dtype) else (a._to_float() / b._to_float()).floor()
    if rounding_mode is not None: raise ArgumentError(f"rounding_mode must be None, 'trunc' or 'floor', got {rounding_mode!r}")
    a, b = a._to_float(), b._to_float()
    return a * b.reciprocal()
  def idiv(self, x, reverse: builtins.bool = False) -> Tensor:
    """C-style integer division (truncates toward zero)."""
    a, b = self._broadcasted(x, reverse)
    if not dtypes.is_int(a.dtype): raise DTypeError(f"idiv needs integer tensors, got {a.dtype}")
    return F.IDiv.apply(a, b)
  def floordiv(self, x, reverse: builtins.bool = False) -> Tensor:
    """Floor division like Python, numpy and torch."""
    a, b = self._broadcasted(x, reverse)
    if not dtypes.is_int(a.dtype): return (a / b).floor().cast(a.dtype)
    q = F.IDiv.apply(a, b)
    if _const_is(b, 1): return q  # x // 1 is x (folded): no sign fix-up to compute
    # truncation rounds toward zero: step down where the signs differ and there is a remainder
    return ((q * b).ne(a) & ((a < 0).ne(b < 0))).where(q - 1, q)
  def mod(self, x, reverse: builtins.bool = False) -> Tensor:
    """Python-style modulo (the result has the sign of the divisor)."""
    a, b = self._broadcasted(x, reverse)
    if not dtypes.is_int(a.dtype): return a - (a / b).floor() * b
    r = F.Mod.apply(a, b)
    return (r.ne(0) & ((r < 0).ne(b < 0))).where(r + b, r)
  def pow(self, x, reverse: builtins.bool = False) -> Tensor:
    """self ** x (x ** self when reverse). Its gradient is torch's, for every exponent and base: d/dbase is
    e * b**(e - 1), 0 where e == 0 (so x ** 0 stays in the graph with gradient 0 everywhere, x = 0 included); d/dexp
    is b**e * log(b), 0 where b == 0 and e >= 0. So a negative base with a fractional exponent gives nan, 0 ** -1
    gives -inf, like torch (the old gradient, through exp/log, was 0 or nan there; tinygrad 0.10.0 differs too)."""
    value = self.detach()._pow_value(x.detach() if isinstance(x, Tensor) else x, reverse)
    wants = self.requires_grad or (isinstance(x, Tensor) and x.requires_grad)
    if Tensor.no_grad or not wants or not dtypes.is_float(value.dtype): return value
    base, exponent = self._broadcasted(x, reverse)
    bf, ef = base.detach().cast(value.dtype), exponent.detach().cast(value.dtype)
    scalar_e = isinstance(x, (int, float)) and not isinstance(x, bool) and not reverse
    if scalar_e: d_base = bf.zeros_like() if x == 0 else x * bf._pow_value(x - 1, False)
    else: d_base = (ef == 0).where(0.0, ef * bf._pow_value(ef - 1, False))
    # 1 ** e is 1 for every e: d/de = log(1) = 0, a constant (no kernel), as the value is
    d_exp = bf.zeros_like() if _const_is(bf, 1) else ((bf == 0) & (ef >= 0)).where(0.0, value * bf.log())
    return F.Chain.apply(base, exponent, value, d_base.cast(value.dtype), d_exp.cast(value.dtype))
  def _pow_value(self, x, reverse: builtins.bool) -> Tensor:
    """The value of pow (pow adds the gradient): exact square-and-multiply for small integer exponents, the constant 1
    for b ** 0 and 1 ** e, else exp/log."""
    if isinstance(x, (int, float)) and not isinstance(x, bool) and not reverse:
      if x == 0: return self.ones_like()
      if x == 0.5: return self.sqrt()
      if float(x).is_integer() and 0 < x <= 1024:
        # exact and cheap: square-and-multiply (x**3 is x*x*x, not exp(3*log|x|))
        half = self._pow_value(int(x) // 2, False) if x >= 2 else None
        sq = half * half if half is not None else None
        return self if sq is None else (sq * self if int(x) % 2 else sq)
      if float(x).is_integer() and -1024 <= x < 0 and not dtypes.is_int(self.dtype) and not dtypes.is_bool(self.dtype):
        return self._pow_value(-int(x), False).reciprocal()
    base, exponent = self._broadcasted(x, reverse)
    bf = base._to_float()
    ef = exponent.cast(bf.dtype)
    # b ** 0 and 1 ** e are 1 for every b and e, inf and nan included (IEEE pow, numpy, torch): a constant, no kernel
    if _const_is(ef, 0) or _const_is(bf, 1):
      one = bf.ones_like()
      return one.cast(base.dtype) if dtypes.is_int(base.dtype) and dtypes.is_int(exponent.dtype) else one
    # |b|^e, then the sign for negative bases with odd integer exponents; nan for negative bases and fractional exponents
    mag = (ef * bf.abs().log()).exp()
    is_int_exp = ef.trunc() == ef
    odd = (ef.abs() % 2) == 1
    neg = bf < 0
    signed = (neg & odd).where(-mag, mag)
    ret = (neg & ~is_int_exp).where(math.nan, signed)
    ret = ((bf == 0) & (ef == 0)).where(1.0, ret)
    # int ** int stays int (like torch), rounded so exp/log error does not truncate 2**3 to 7
    return ret.round().cast(base.dtype) if dtypes.is_int(base.dtype) and dtypes.is_int(exponent.dtype) else ret
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
    if not dtypes.is_int(self.dtype): raise DTypeError(f"bitwise_not needs an int or bool tensor, got {self.dtype}")
    return self.xor(-1 if not dtypes.is_unsigned(self.dtype) else dtypes.max(self.dtype))
  def _bitwise(self, x) -> tuple[Tensor, Tensor]:
    a, b = self._broadcasted(x)
    if not (dtypes.is_int(a.dtype) or dtypes.is_bool(a.dtype)): raise DTypeError(f"bitwise ops need int or bool tensors, got {a.dtype}")
    return a, b
  def lshift(self, x: builtins.int) -> Tensor: return F.Shl.apply(*self._bitwise(x))
  def rshift(self, x: builtins.int) -> Tensor: return F.Shr.apply(*self._bitwise(x))

  def __neg__(self) -> Tensor: return self.neg()
  def __abs__(self) -> Tensor: return self.abs()
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
    """Matrix product as a broadcasted multiply and a sum over the shared axis (one fused kernel).

    (..., n, k) becomes (..., n, 1, k) and w (..., k, m) becomes (..., 1, m, k); their product broadcasts to
    (..., n, m, k) and the sum over k is the result. A 1-D side has no n (or m) to keep apart, so it gets no extra 1."""
    if not self.ndim or not w.ndim: raise ShapeError(f"both tensors need at least 1 dimension, got {self.ndim}D and {w.ndim}D")
    w_axis = -2 if w.ndim > 1 else -1  # w's contracted axis
    inner = w.shape[w_axis]
    if resolve(sym_ne(self.shape[-1], inner)):
      raise ShapeError(f"cannot matmul shapes {self.shape} and {w.shape}: inner dimensions {self.shape[-1]} and {inner} differ")
    gap = (1,) if self.ndim > 1 and w.ndim > 1 else ()
    lhs = self.reshape(*self.shape[:-1], *gap, self.shape[-1])
    rhs = w.reshape(*w.shape[:-2], *gap, *w.shape[w_axis:]).transpose(-1, w_axis)
    out_dtype = least_upper_dtype(lhs.dtype, w.dtype) if acc_dtype is None else to_dtype(acc_dtype)
    return (lhs * rhs).sum(-1, acc_dtype=acc_dtype).cast(out_dtype)
  @staticmethod
  def einsum(formula: str, *operands, acc_dtype: DTypeLike | None = None) -> Tensor:
    """Einstein summation: 'ij,jk->ik' (matmul), 'bij,bjk->bik', 'ij->ji', 'ii->' (trace), 'ii->i' (diagonal),
    'i,j->ij' (outer), 'ijk->j' (sums), '...ij,...jk->...ik' (ellipsis), any number of operands (given spread out or as
    one list). Without '->' the output is the ellipsis dims, then the letters that appear once, in alphabetical order
    (numpy's and torch's rule). Spaces are ignored.

    torch's rules: '...' stands for the dims no letter names, right-aligned across operands and broadcast together (an
    output without '...' sums them); a letter of size 1 in one operand broadcasts against the others. A letter repeated
    within an operand takes its diagonal (movement ops); then every operand is permuted and reshaped onto one axis order
    (output labels first, then the summed ones), multiplied with broadcasting and summed over the labels the output
    leaves out: one fused multiply-reduce, as a matmul is. A letter repeated in the output raises."""
    ops = list(operands[0]) if len(operands) == 1 and isinstance(operands[0], (list, tuple)) else list(operands)
    eq = formula.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    ins = lhs.split(",")
    for sub in ins + [rhs]:
      if sub.count("...") > 1: raise ArgumentError(f"einsum {formula!r}: more than one ellipsis ('...') in {sub!r}")
      if not all(c.isalpha() and c.isascii() for c in sub.replace("...", "")):
        raise ArgumentError(f"einsum {formula!r}: subscripts must be letters a-z / A-Z and at most one '...', separated by ',' with an optional '->'")
    if len(ins) != len(ops): raise ArgumentError(f"einsum {formula!r} names {len(ins)} operands, got {len(ops)}")
    # each subscript as a list of labels: its letters, and for '...' the dims no letter names, labelled '.0', '.1', ...
    # right-aligned over the operand with the most of them (ellipsis dims broadcast like a binary op's shapes)
    ell_dims = [t.ndim - len(sub.replace("...", "")) if "..." in sub else 0 for sub, t in zip(ins, ops)]
    for k, (sub, t, ne) in enumerate(zip(ins, ops, ell_dims)):
      if ne < 0 or ("..." not in sub and len(sub) != t.ndim):
        raise ShapeError(f"einsum {formula!r}: operand {k} has {t.ndim} dims {t.shape} but {len(sub.replace('...', ''))} letters {sub!r}")
    n_ell = max(ell_dims, default=0)
    def labels(sub: str, ne: int) -> list[str]:
      head, _, tail = sub.partition("...")
      return [*head, *[f".{n_ell - ne + j}" for j in range(ne)], *tail] if "..." in sub else list(sub)
    subs = [labels(sub, ne) for sub, ne in zip(ins, ell_dims)]
    letters = [c for c in lhs if c.isalpha()]
    out = labels(rhs, n_ell) if arrow else [f".{j}" for j in range(n_ell)] + sorted(c for c in set(letters) if letters.count(c) == 1)
    if len(set(out)) != len(out): raise ArgumentError(f"einsum {formula!r}: a letter repeats in the output {rhs!r}")
    if set(out) - {c for sub in subs for c in sub} - {f".{j}" for j in range(n_ell)}:
      raise ArgumentError(f"einsum {formula!r}: output letters {sorted(set(out) - set(letters))} not in any input")
    sizes: dict[str, sint] = {}
    def size_of(c: str, n: sint) -> None:
      """c's size over all operands: equal sizes, or 1 against any size (broadcast, torch's rule)."""
      if c not in sizes or (isinstance(sizes[c], int) and sizes[c] == 1): sizes[c] = n
      elif not (isinstance(n, int) and n == 1) and resolve(sym_ne(sizes[c], n)):
        raise ShapeError(f"einsum {formula!r}: {'the ellipsis dim' if c[0] == '.' else 'letter'} {c!r} has sizes {sizes[c]} and {n}")
    prepared: list[tuple[list[str], Tensor]] = []
    for k, (labs, t) in enumerate(zip(subs, ops)):
      while (c := next((c for c in labs if labs.count(c) > 1), None)) is not None:
        i, j = labs.index(c), labs.index(c, labs.index(c) + 1)
        if resolve(sym_ne(t.shape[i], t.shape[j])):
          raise ShapeError(f"einsum {formula!r}: letter {c!r} repeats in operand {k} over dims of sizes {t.shape[i]} and {t.shape[j]}")
        t, labs = t._diagonal(i, j), labs[:j] + labs[j + 1:]
      for c, n in zip(labs, t.shape): size_of(c, n)
      prepared.append((labs, t))
    order = out + sorted(set(sizes) - set(out))
    def aligned(sub: list[str], t: Tensor) -> Tensor:
      mine = sorted(sub, key=order.index)
      t = t.permute(*[sub.index(c) for c in mine]) if t.ndim else t
      return t.reshape(tuple(t.shape[mine.index(c)] if c in sub else 1 for c in order))
    prod_ = functools.reduce(Tensor.mul, [aligned(sub, t) for sub, t in prepared])
    prod_ = prod_._broadcast_to(tuple(sizes[c] for c in order))
    summed = tuple(range(len(out), len(order)))
    return prod_.sum(summed, acc_dtype=acc_dtype) if summed else (prod_ if acc_dtype is None else prod_.cast(acc_dtype))
  def _diagonal(self, i: builtins.int, j: builtins.int) -> Tensor:
    """The diagonal of dims i < j (of one size n), in place of dim i, dim j gone: with the pair moved last and
    flattened, element k of the diagonal sits at k*(n+1), so padding to n*(n+1) and reading rows of n+1 puts the
    diagonal in column 0."""
    n = self.shape[i]
    others = [d for d in range(self.ndim) if d not in (i, j)]
    x = self.permute(*others, i, j).flatten(-2)
    x = x.pad(tuple([None] * (x.ndim - 1) + [(0, n)])).reshape(*x.shape[:-1], n, n + 1)
    x = x.shrink(tuple([None] * (x.ndim - 1) + [(0, 1)])).reshape(*x.shape[:-2], n)
    last = x.ndim - 1
    return x.permute(*range(i), last, *range(i, last))
  def matmul(self, x: Tensor, reverse: builtins.bool = False, acc_dtype: DTypeLike | None = None) -> Tensor:
    return x.dot(self, acc_dtype=acc_dtype) if reverse else self.dot(x, acc_dtype=acc_dtype)
  def linear(self, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """self @ weight + bias; a 1-D weight scales elementwise (a diagonal weight matrix)."""
    out = self * weight if weight.ndim == 1 else self @ weight
    return out if bias is None else out + bias

  def _cumsum(self, axis: builtins.int = 0) -> Tensor:
    """Inclusive prefix sum along axis via a padded, strided view and one reduce.

    As torch: a 0-d tensor is its own cumsum (axis 0 or -1), and an empty axis gives an empty result of the shape;
    both in the dtype a cumsum of that dtype has (sum's)."""
    ax = self._resolve_dim(axis)
    if self.ndim == 0: return self.reshape(1)._cumsum(0).reshape(())
    if self.shape[ax] == 0: return self.cast(reduce_output_dtype(self.dtype))  # nothing to add up
    x = self.transpose(ax, -1)
    n = x.shape[-1]
    # each output position i sums x[0..i]: pad to 2n-1, take sliding windows of length n
    padded = x.pad(tuple([None] * (x.ndim - 1) + [(n - 1, 0)]))
    windows = padded._pool((n,))
    return windows.sum(-1).transpose(ax, -1)
  def cumsum(self, axis: builtins.int = 0) -> Tensor: return self._cumsum(axis)

  def _pool(self, k_: tuple[sint, ...], stride: builtins.int | tuple[builtins.int, ...] = 1,
            dilation: builtins.int | tuple[builtins.int, ...] = 1) -> Tensor:
    """Sliding windows over the last len(k_) dims: shape (..., out_0, ..., k_0, ...), built from movement ops only.

    Along a dim of size n with kernel k, stride s and dilation d, window j tap t reads x[j*s + t*d].
    - Windows that neither overlap nor skip (k <= s, d == 1): cut the dim into blocks of s (padding the last one)
      and keep the first k elements of each block.
    - Otherwise: repeat the dim end to end and read it as k rows of n+d elements. Row t then starts at t*(n+d), which is
      t*d modulo n, so row t is x shifted left by t*d; its first o*s elements, taken every s-th, are tap t of each window.
      No window reaches past n, so the wrap-around of the repeats is never read.
    """
    nk = len(k_)
    if self.ndim < nk: raise ShapeError(f"can't pool {self.shape} with kernel {k_}")
    s_, d_ = make_tuple(stride, nk), make_tuple(dilation, nk)
    if len(s_) != nk or len(d_) != nk: raise ShapeError(f"stride/dilation mismatch kernel={k_}, stride={s_}, dilation={d_}")
    lead = [None] * (self.ndim - nk)  # the batch/channel dims ride along untouched
    n_ = self.shape[-nk:]
    def view(x: Tensor, per_dim) -> Tensor: return x.reshape(*lead, *flatten(per_dim))
    def head(x: Tensor, per_dim) -> Tensor: return x.shrink(tuple(lead + [(0, v) for v in flatten(per_dim)]))
    def windows_first(x: Tensor, window_parity: int) -> Tensor:
      # the pooled dims come in (window, tap) or (tap, window) pairs: gather every window axis, then every tap axis
      pairs = sorted(range(2 * nk), key=lambda j: (j % 2 != window_parity, j))
      return x.permute(*range(len(lead)), *[len(lead) + j for j in pairs])
    if all(k <= s for k, s in zip(k_, s_)) and all(d == 1 for d in d_):
      o_ = [(n + (s - k)) // s for n, s, k in zip(n_, s_, k_)]
      # no window fits (a kernel over an empty or too small dim): tinygrad asserts, torch raises, as the path below does
      if any(isinstance(o, int) and o <= 0 for o in o_): raise ShapeError(f"kernel {k_} is larger than the input {n_}")
      blocks = [o * s for o, s in zip(o_, s_)]
      x = self.pad(tuple(lead + [(0, max(0, b - n)) for b, n in zip(blocks, n_)]))
      x = view(head(x, [(b,) for b in blocks]), zip(o_, s_))
      return windows_first(head(x, zip(o_, k_)), 0)
    o_ = [(n - d * (k - 1) - 1) // s + 1 for n, k, s, d in zip(n_, k_, s_, d_)]
    if any(o <= 0 for o in o_): raise ShapeError(f"kernel {k_} (dilation {d_}) is larger than the input {n_}")
    rows = [(k, n + d) for k, n, d in zip(k_, n_, d_)]
    copies = [math.ceil(k * w / n) for (k, w), n in zip(rows, n_)]  # type: ignore[operator]  # enough repeats of the dim to fill the k rows
    x = view(self, [(1, n) for n in n_]).expand(*lead, *flatten(zip(copies, n_)))
    x = view(head(view(x, [(c * n,) for c, n in zip(copies, n_)]), [(k * w,) for k, w in rows]), rows)
    x = view(head(x, [(k, o * s) for k, o, s in zip(k_, o_, s_)]), zip(k_, o_, s_))
    return windows_first(view(head(x, [(k, o, 1) for k, o in zip(k_, o_)]), zip(k_, o_)), 1)

  # *** neural network ops ***
  def _padding_flat(self, padding: builtins.int | Sequence[builtins.int], dims: builtins.int) -> tuple[builtins.int, ...]:
    """int, per-dim tuple (before = after), or the flat 2*dims form (left, right, top, bottom: last dim first)."""
    if isinstance(padding, int): return (padding,) * (2 * dims)
    padding = tuple(padding)
    if len(padding) == 2 * dims: return padding
    if len(padding) == dims: return tuple(flatten((p, p) for p in reversed(padding)))
    raise ShapeError(f"padding {padding} must be an int, {dims} ints, or {2 * dims} ints for {dims} spatial dims")
  def conv2d(self, weight: Tensor, bias: Tensor | None = None, groups: builtins.int = 1, stride: builtins.int | tuple[builtins.int, ...] = 1,
             dilation: builtins.int | tuple[builtins.int, ...] = 1, padding: builtins.int | Sequence[builtins.int] = 0,
             acc_dtype: DTypeLike | None = None) -> Tensor:
    """N-d convolution (NCHW input, (cout, cin/groups, *kernel) weight) from _pool windows, a multiply and a sum."""
    if self.ndim < 3 or weight.ndim != self.ndim:
      raise ShapeError(f"conv2d: input {self.shape} and weight {weight.shape} need the same number (>= 3) of dims")
    (bs, cin_), (cout, cin), hw = self.shape[:2], weight.shape[:2], weight.shape[2:]
    if groups * cin != cin_:
      raise ShapeError(f"conv2d: input {self.shape} has {cin_} channels, weight {weight.shape} expects {cin} per group x {groups} groups")
    if cout % groups != 0: raise ShapeError(f"conv2d: {cout} output channels do not divide into {groups} groups")
    if bias is not None and bias.shape != (cout,): raise ShapeError(f"conv2d: bias shape {bias.shape} must be ({cout},)")
    x = self.pad(self._padding_flat(padding, len(hw)))._pool(hw, stride, dilation)  # (bs, groups*cin, *oyx, *hw)
    rcout, oyx = cout // groups, x.shape[2:-len(hw)]
    nd = len(oyx)
    # broadcast to (bs, groups, rcout, *oyx, cin, *hw) and reduce cin and the kernel window
    x = x.reshape(bs, groups, cin, 1, *oyx, *hw).expand(bs, groups, cin, rcout, *oyx, *hw) \
      .permute(0, 1, 3, *[4 + i for i in range(nd)], 2, *[4 + nd + i for i in range(len(hw))])
    ret = (x * weight.reshape(1, groups, rcout, *[1] * nd, cin, *hw)).sum([-1 - i for i in range(1 + len(hw))], keepdim=True, acc_dtype=acc_dtype)
    ret = ret.reshape(bs, cout, *oyx)
    return ret if bias is None else ret.add(bias.reshape(1, -1, *[1] * nd))
  def conv_transpose2d(self, weight: Tensor, bias: Tensor | None = None, groups: builtins.int = 1,
                       stride: builtins.int | tuple[builtins.int, ...] = 1, dilation: builtins.int | tuple[builtins.int, ...] = 1,
                       padding: builtins.int | tuple[builtins.int, ...] = 0, output_padding: builtins.int | tuple[builtins.int, ...] = 0) -> Tensor:
    """Transposed convolution (weight (cin, cout/groups, *kernel)) as a conv2d over the stride-dilated input with a flipped kernel."""
    hw = weight.shape[2:]
    if weight.ndim != self.ndim or weight.shape[0] != self.shape[1] or weight.shape[0] % groups != 0:
      raise ShapeError(f"conv_transpose2d: input {self.shape} and weight {weight.shape} (cin, cout/groups, *kernel) do not fit with groups={groups}")
    s_, d_, p_, op_ = (make_tuple(v, len(hw)) for v in (stride, dilation, padding, output_padding))
    cin, cout_g = weight.shape[:2]
    # (cin, cout/g, *k) -> (g, cin/g, cout/g, *k) -> (g, cout/g, cin/g, *k) with the kernel flipped -> conv2d's (cout, cin/g, *k)
    per_group = weight.reshape(groups, cin // groups, *weight.shape[1:]).transpose(1, 2)
    w = per_group.flip(*range(3, weight.ndim + 1)).reshape(groups * cout_g, cin // groups, *hw)
    # the full correlation: (k-1)*d - p on the left, plus output_padding on the right (flat form, last dim first)
    reach = [(k - 1) * d - p for k, d, p in zip(hw, d_, p_)]
    pads = flatten((r, r + op) for r, op in reversed(list(zip(reach, op_))))
    return self._spread(s_).conv2d(w, bias=bias, groups=groups, dilation=d_, padding=pads)
  def _spread(self, stride: tuple[builtins.int, ...]) -> Tensor:
    """Put s-1 zeros between neighbouring elements of each spatial dim (dims 2 on): length k becomes k*s - (s-1).
    Each element gets a new axis of 1 that is zero padded to s; merging the pair and cutting the trailing s-1 zeros is the result."""
    if all(s <= 1 for s in stride): return self
    lead, spatial = self.shape[:2], self.shape[2:]
    x = self.reshape(*lead, *flatten((k, 1) for k in spatial)).pad((None, None, *flatten((None, (0, s - 1)) for s in stride)))
    x = x.reshape(*lead, *[k * s for k, s in zip(spatial, stride)])
    return x.shrink((None, None, *[(0, k * s - (s - 1)) for k, s in zip(spatial, stride)]))
  def _pool_pads(self, padding: builtins.int | Sequence[builtins.int], k_: tuple[builtins.int, ...], stride, dilation,
                 ceil_mode: builtins.bool) -> tuple[list[builtins.int], list[builtins.int]]:
    """(regular flat pads, pads with extra right padding for ceil_mode). Flat form: last dim first."""
    pads = list(self._padding_flat(padding, len(k_)))
    if not ceil_mode: return pads, pads
    s_, d_ = make_tuple(stride, len(k_)), make_tuple(dilation, len(k_))
    ceil_pads = list(pads)
    for i, (n, k, s, d) in enumerate(zip(self.shape[-len(k_):], k_, s_, d_)):
      j = len(k_) - 1 - i  # this dim's slot in the flat (last dim first) form
      pb, pa = pads[2 * j], pads[2 * j + 1]
      eff_k = d * (k - 1) + 1
      o = -(-(n + pb + pa - eff_k) // s) + 1
      if (o - 1) * s >= n + pb: o -= 1  # a window may not start in the right padding (torch's rule)
      ceil_pads[2 * j + 1] = pa + max(0, (o - 1) * s + eff_k - (n + pb + pa))
    return pads, ceil_pads
  def max_pool2d(self, kernel_size: builtins.int | tuple[builtins.int, ...] = (2, 2), stride=None, dilation=1, padding=0,
                 ceil_mode: builtins.bool = False) -> Tensor:
    k_, st, axes = _window_spec(kernel_size, stride)
    # pad with the dtype's lowest value, so padding never wins a window's max
    padded = self.pad(tuple(self._pool_pads(padding, k_, st, dilation, ceil_mode)[1]), value=dtypes.min(self.dtype))
    return padded._pool(k_, st, dilation).max(axes)
  def avg_pool2d(self, kernel_size: builtins.int | tuple[builtins.int, ...] = (2, 2), stride=None, dilation=1, padding=0,
                 ceil_mode: builtins.bool = False, count_include_pad: builtins.bool = True) -> Tensor:
    k_, st, axes = _window_spec(kernel_size, stride)
    reg, ceil = self._pool_pads(padding, k_, st, dilation, ceil_mode)
    windows = functools.partial(Tensor._pool, k_=k_, stride=st, dilation=dilation)
    if not ceil_mode and count_include_pad: return windows(self.pad(tuple(reg))).mean(axes)
    # otherwise a sum over each window divided by how many of its elements count: the padding never does without
    # count_include_pad; with it, ceil_mode still leaves out the extra right padding (only the regular one counts), like torch
    total = windows(self.pad(tuple(ceil))).sum(axes)
    if not count_include_pad: counted = self.ones_like().pad(tuple(ceil))
    else: counted = self.pad(tuple(reg)).ones_like().pad(tuple(c - r for c, r in zip(ceil, reg)))
    return total / windows(counted).sum(axes)
  def max_pool1d(self, kernel_size: builtins.int = 2, stride=None, dilation=1, padding=0, ceil_mode: builtins.bool = False) -> Tensor:
    return self.max_pool2d((kernel_size,), stride, dilation, padding, ceil_mode)
  def avg_pool1d(self, kernel_size: builtins.int = 2, stride=None, dilation=1, padding=0, ceil_mode: builtins.bool = False,
                 count_include_pad: builtins.bool = True) -> Tensor:
    return self.avg_pool2d((kernel_size,), stride, dilation, padding, ceil_mode, count_include_pad)
  def layernorm(self, axis=-1, eps: builtins.float = 1e-5) -> Tensor:
    """(x - mean) / sqrt(mean of the squared deviations + eps) over `axis`, without an affine part."""
    centered = self - self.mean(axis, keepdim=True)
    return centered * (centered.square().mean(axis, keepdim=True) + eps).rsqrt()
  def batchnorm(self, weight: Tensor | None, bias: Tensor | None, mean: Tensor, invstd: Tensor,
                axis: builtins.int | tuple[builtins.int, ...] = 1) -> Tensor:
    """(x - mean) * invstd * weight + bias, with the per-channel tensors broadcast along `axis`.

    invstd may also come already shaped to broadcast against x (more dims than `axis` names): it is used as given."""
    channel_dims = tuple(map(self._resolve_dim, make_tuple(axis, 1)))
    per_channel = tuple(n if i in channel_dims else 1 for i, n in enumerate(self.shape))
    out = self - mean.reshape(per_channel)
    if weight is not None: out = out * weight.reshape(per_channel)
    out = out.mul(invstd if invstd.ndim != len(channel_dims) else invstd.reshape(per_channel))
    if bias is not None: out = out + bias.reshape(per_channel)
    return out
  def dropout(self, p: builtins.float = 0.5) -> Tensor:
    """Zero each element with probability p and scale the rest by 1/(1-p); identity unless Tensor.training."""
    if not 0 <= p <= 1: raise ValueError(f"dropout probability must be in [0, 1], got {p}")
    if not Tensor.training or p == 0: return self
    if p == 1: return self * 0
    keep = Tensor.rand(*self.shape, device=self.device, requires_grad=False) >= p
    return keep.where(self, Tensor(0, device=self.device, dtype=self.dtype)) * (1.0 / (1.0 - p))
  def scaled_dot_product_attention(self, key: Tensor, value: Tensor, attn_mask: Tensor | None = None, dropout_p: builtins.float = 0.0,
                                   is_causal: builtins.bool = False) -> Tensor:
    """softmax(q @ k^T / sqrt(d) + mask) @ v; a bool mask keeps the True positions.

    The mask enters as an additive bias: a bool mask becomes 0 where kept and -inf where dropped; is_causal builds the
    bool mask that lets query i see keys 0..i. Scores accumulate in at least float32."""
    # torch 2.13 raises RuntimeError for both together; ArgumentError is that and the ValueError we raised before
    if is_causal and attn_mask is not None:
      raise ArgumentError("scaled_dot_product_attention: pass attn_mask or is_causal, not both (torch raises for both too): "
                          "fold the causal mask into attn_mask, e.g. attn_mask & Tensor.ones(L, S, dtype=dtypes.bool).tril()")
    bias = attn_mask
    if is_causal:
      q_len, k_len = self.shape[-2], key.shape[-2]
      bias = Tensor.ones(q_len, k_len, device=self.device, requires_grad=False, dtype=dtypes.bool).tril(0)
    if bias is not None and bias.dtype == dtypes.bool: bias = bias.where(0.0, -math.inf)
    score_dtype = least_upper_dtype(self.dtype, key.dtype, dtypes.float32)
    scores = self.matmul(key.transpose(-2, -1), acc_dtype=score_dtype) / math.sqrt(self.shape[-1])  # type: ignore[arg-type]  # a concrete head dim
    if bias is not None: scores = scores + bias
    weights = scores.softmax(-1).cast(self.dtype).dropout(dropout_p)
    return weights @ value

  # *** losses ***
  def _do_reduction(self, reduction: str = "mean") -> Tensor:
    if reduction not in ("none", "sum", "mean"): raise ArgumentError(f"reduction must be 'none', 'sum' or 'mean', got {reduction!r}")
    return self.sum() if reduction == "sum" else self.mean() if reduction == "mean" else self
  def binary_crossentropy(self, Y: Tensor, reduction: str = "mean") -> Tensor:
    """BCE on probabilities (self in (0, 1))."""
    return (-Y * self.log() - (1 - Y) * (1 - self).log())._do_reduction(reduction)
  def binary_crossentropy_logits(self, Y: Tensor, reduction: str = "mean") -> Tensor:
    """BCE on logits, in the stable form max(x, 0) - x*y + log(1 + exp(-|x|))."""
    return (self.maximum(0) - Y * self + (1 + self.abs().neg().exp()).log())._do_reduction(reduction)
  def sparse_categorical_crossentropy(self, Y: Tensor, ignore_index: builtins.int = -1, label_smoothing: builtins.float = 0.0,
                                      reduction: str = "mean") -> Tensor:
    """Cross entropy of logits (..., classes) against int labels Y (...); labels equal to ignore_index add nothing and are not counted."""
    if not 0.0 <= label_smoothing <= 1.0: raise ArgumentError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
    if not dtypes.is_int(Y.dtype): raise DTypeError(f"sparse_categorical_crossentropy: labels must be an int tensor, got {Y.dtype}")
    if Y.shape != self.shape[:-1]:
      raise ShapeError(f"sparse_categorical_crossentropy: labels {Y.shape} must have the shape of logits {self.shape} without the class dim")
    if reduction not in ("none", "sum", "mean"): raise ArgumentError(f"reduction must be 'none', 'sum' or 'mean', got {reduction!r}")
    log_probs = self.log_softmax()
    # like tinygrad, ignore_index=-1 (the default) ignores nothing
    loss_mask = Y != ignore_index if ignore_index != -1 else Y.ones_like(dtype=dtypes.bool)
    y = _one_hot_mask(Y, self.shape[-1], self.device) & loss_mask.unsqueeze(-1)
    unreduced = y.where(log_probs, 0).sum(-1)
    # the smoothing term only when there is one: 0 * x is not folded for floats (inf * 0 is nan), so it would be computed
    if label_smoothing: unreduced = (1 - label_smoothing) * unreduced + label_smoothing * (log_probs.mean(-1) * loss_mask)
    # mean over the counted labels only, so Tensor.mean does not fit
    if reduction == "mean": return -unreduced.sum() / loss_mask.sum()
    return -(unreduced.sum() if reduction == "sum" else unreduced)
  def cross_entropy(self, Y: Tensor, reduction: str = "mean", label_smoothing: builtins.float = 0.0) -> Tensor:
    """torch-style: logits (N, C, ...) with int labels (N, ...) or class probabilities (N, C, ...)."""
    if not 0.0 <= label_smoothing <= 1.0: raise ArgumentError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
    if self.ndim < 2: raise ShapeError(f"cross_entropy needs logits with a class dim (N, C, ...), got {self.shape}")
    if Y.ndim == self.ndim - 1:
      Y = Y.one_hot(num_classes=self.shape[1])  # type: ignore[arg-type]  # a concrete class dim
      if self.ndim > 2: Y = Y.permute(0, Y.ndim - 1, *range(1, Y.ndim - 1))
    if Y.shape != self.shape: raise ShapeError(f"cross_entropy: target {Y.shape} does not fit logits {self.shape}")
    if label_smoothing: Y = (1 - label_smoothing) * Y + label_smoothing / self.shape[1]  # type: ignore[operator]  # a concrete class dim
    return (-self.log_softmax(axis=1).mul(Y).sum(axis=1))._do_reduction(reduction)
  def nll_loss(self, Y: Tensor, weight: Tensor | None = None, ignore_index: builtins.int | None = None, reduction: str = "mean") -> Tensor:
    """torch-style negative log likelihood of log-probabilities (N, C, ...) and int labels (N, ...)."""
    if Y.ndim != self.ndim - 1: raise ShapeError(f"nll_loss: labels {Y.shape} must have one dim less than input {self.shape}")
    # each label's weight: its class weight (1 without `weight`), 0 for ignored labels
    label_w = Y.ones_like(dtype=self.dtype, requires_grad=False) if weight is None else weight[Y]
    if ignore_index is not None: label_w = label_w * (Y != ignore_index)
    target_logp = self.gather(1, Y.unsqueeze(1)).squeeze(1)
    losses = -target_logp * label_w
    # torch's weighted mean: divide by the total weight of the counted labels, not by their number
    if reduction == "mean": return losses.sum() / label_w.sum()
    return losses._do_reduction(reduction)
  def sequential(self, ll: Sequence[Callable[[Tensor], Tensor]]) -> Tensor: return functools.reduce(lambda x, f: f(x), ll, self)
  def interpolate(self, size: tuple[builtins.int, ...], mode: str = "linear", align_corners: builtins.bool = False) -> Tensor:
    """Resize the last len(size) dims: mode 'linear' (bi/trilinear), 'nearest' or 'nearest-exact'."""
    if not isinstance(size, (tuple, list)) or not all_int(size) or not 0 < len(size) <= self.ndim:
      raise ArgumentError(f"interpolate: size must be a tuple of at most {self.ndim} ints, got {size}")
    if mode not in ("linear", "nearest", "nearest-exact"): raise ArgumentError(f"interpolate: unknown mode {mode!r}")
    if mode == "linear" and self.dtype == dtypes.uint8: return self._linear_uint8(size, align_corners)
    # other integers resize in float and round back half up once, not in their own wrapping dtype (torch has no
    # linear resize for them; tinygrad 0.10.0 wraps around)
    x, expand = (self if dtypes.is_float(self.dtype) else self._to_float()), list(self.shape)
    for i in range(-1, -len(size) - 1, -1):
      n_in, n_out = self.shape[i], size[i]
      reshape = [1] * self.ndim
      reshape[i] = expand[i] = n_out
      arr = Tensor.arange(n_out, dtype=dtypes.float32, device=self.device, requires_grad=False)
      if mode == "linear":
        if align_corners: index = arr * ((n_in - 1) / (n_out - 1) if n_out > 1 else 0.0)
        else: index = ((arr + 0.5) * (n_in / n_out) - 0.5).clip(0, n_in - 1)  # type: ignore[operator]  # concrete dims
        low, high = index.floor(), index.ceil()
        perc = (index - low).reshape(reshape).expand(expand)
        lo_i, hi_i = (y.cast(dtypes.int32).reshape(reshape).expand(expand) for y in (low, high))
        x = x.gather(i, lo_i).lerp(x.gather(i, hi_i), perc)
      else:
        scale = n_in / n_out  # type: ignore[operator]  # concrete dims
        index = (arr * scale).floor() if mode == "nearest" else ((arr + 0.5) * scale).floor()
        x = x.gather(i, index.clip(0, n_in - 1).cast(dtypes.int32).reshape(reshape).expand(expand))
    if not dtypes.is_float(self.dtype) and mode == "linear": x = (x + 0.5).floor()
    return x.cast(self.dtype)
  def _linear_uint8(self, size: Sequence[builtins.int], align_corners: builtins.bool) -> Tensor:
    """Linear resize of uint8 as torch's bilinear does it, bit for bit (tinygrad 0.10.0 matches it too): one dim at a
    time, last dim first (a dim whose size stays is skipped), each output the fixed-point sum lo * w_lo + hi * w_hi with
    integer weights of P fraction bits, rounded half up and shifted back to uint8 before the next dim. P is the most bits
    (at most 22) that keep the largest weight of that dim under 2**15 once rounded. Where the source position falls
    outside the input it is clamped, so both taps are the edge element and it gets the whole weight."""
    x = self.cast(dtypes.int32)
    for i in range(-1, -len(size) - 1, -1):
      n_in, n_out = cast(builtins.int, self.shape[i]), size[i]
      if n_in == n_out: continue
      lo, hi, w_lo, w_hi = [], [], [], []
      for o in range(n_out):
        if align_corners: src = o * (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
        else: src = max((o + 0.5) * n_in / n_out - 0.5, 0.0)
        a = min(math.floor(src), n_in - 1)
        b, frac = min(a + 1, n_in - 1), src - a
        lo.append(a); hi.append(b)
        w_lo.append(1.0 if a == b else 1.0 - frac); w_hi.append(0.0 if a == b else frac)
      biggest = max(w_lo + w_hi)
      bits = max(p for p in range(23) if math.floor(biggest * 2 ** p + 0.5) < 2 ** 15)
      shape = [1] * self.ndim
      shape[i] = n_out
      def taps(ix: list) -> Tensor:
        index = Tensor(np.array(ix, np.int32), device=self.device, requires_grad=False).reshape(shape)
        return x.gather(i, index.expand(_splice(x.shape, self.ndim + i, self.ndim + i + 1, (n_out,))))
      def fixed(ws: list) -> Tensor:
        return Tensor(np.floor(np.array(ws) * 2 ** bits + 0.5).astype(np.int32), device=self.device, requires_grad=False).reshape(shape)
      x = (taps(lo) * fixed(w_lo) + taps(hi) * fixed(w_hi) + (1 << (bits - 1))).idiv(1 << bits)
    return x.cast(dtypes.uint8)

  # *** training / inference switches ***
  def requires_grad_(self, requires_grad: builtins.bool = True) -> Tensor:
    self.requires_grad = requires_grad
    return self
  class train(contextlib.ContextDecorator):
    """`with Tensor.train():` sets Tensor.training (dropout, BatchNorm batch statistics, optimizer steps) inside the block."""
    def __init__(self, mode: bool = True): self.mode = mode
    def __enter__(self): self.prev, Tensor.training = Tensor.training, self.mode
    def __exit__(self, *exc): Tensor.training = self.prev
  class test(contextlib.ContextDecorator):
    """`with Tensor.test():` sets Tensor.no_grad inside the block (no autograd graph is recorded), like tinygrad."""
    def __init__(self, mode: bool = True): self.mode = mode
    def __enter__(self): self.prev, Tensor.no_grad = Tensor.no_grad, self.mode
    def __exit__(self, *exc): Tensor.no_grad = self.prev


def _const_is(t: Tensor, v: ConstType) -> bool:
  """Whether `t` is the constant `v` everywhere (an unrealized, unpadded CONST): what pow and floordiv fold."""
  lb = t.lazydata
  return lb.is_unrealized_unmasked_const and not isinstance(lb.base.arg, bool) and lb.base.arg == v

def _list_dtype(data: list | tuple) -> DType:
  """The dtype a list of Python scalars gets (dtypes.from_py); numpy scalars and arrays in it count as the Python
  values they hold (bool, int or float), as tinygrad and torch take them."""
  try: return dtypes.from_py(data)
  except TypeError:
    try: kind = np.array(data).dtype.kind
    except ValueError: kind = "O"  # ragged: the conversion below says so
    if kind == "b": return dtypes.bool
    return dtypes.default_int if kind in "iu" else dtypes.default_float

def _reads_base(lb: LazyBuffer, base: LazyBuffer) -> bool:
  """Whether the lazy graph of `lb` reads the buffer of `base` (walks the unscheduled sources)."""
  seen: set[int] = set()
  todo = [lb]
  while todo:
    b = todo.pop().base
    if b is base: return True
    if id(b) in seen: continue
    seen.add(id(b))
    todo.extend(b.__dict__.get("srcs", ()))  # a realized base has no sources left
  return False

def _list_is_tuple(idx: list) -> bool:
  """Whether a list index is a tuple of index items, x[[i, j]] = x[i, j]: when it holds a Tensor, a sequence, a slice,
  None or Ellipsis and has fewer than 32 items, torch's rule (tinygrad 0.10.0 reads any list that is not all ints as a
  tuple). A list of ints, or of 32 or more items, is one index array (numpy's rule, where torch agrees with it)."""
  return len(idx) < 32 and any(e is None or e is Ellipsis or isinstance(e, (Tensor, list, tuple, np.ndarray, slice)) for e in idx)

def _argfix(*x: Any) -> tuple:
  """Shapes and dim lists may come spread out, f(2, 3), or as one tuple or list, f((2, 3)): both give (2, 3)."""
  packed = bool(x) and type(x[0]) in (tuple, list)
  if not packed: return x
  if len(x) > 1: raise ValueError(f"bad arguments: {x}")
  return tuple(x[0])

def _check_dims(shape: tuple, what: str, infer: bool = False) -> tuple:
  """`shape` unchanged if no dim is a negative int (-1 may be, with `infer`: reshape's and expand's "this one as it
  is"). Checked before any arithmetic on it, so a creation function or a reshape fails with one clear error (a
  ShapeError: tinygrad's ValueError/AssertionError, torch's RuntimeError), not with whatever the arithmetic hits first
  (a ZeroDivisionError from 0 ** -0.5 in scaled_uniform)."""
  if any(isinstance(s, (int, np.integer)) and not isinstance(s, bool) and s < (-1 if infer else 0) for s in shape):
    raise ShapeError(f"{what}: negative dimension in shape {tuple(shape)}")
  return shape

def _input_grads(ctx: F.Function, out_grad: Tensor) -> list[LazyBuffer | None]:
  """ctx's backward for out_grad, one entry per parent; what it builds is labelled as the backward of ctx's method."""
  token = METADATA.set(Metadata(name=ctx.metadata.name, backward=True) if ctx.metadata else None)
  try: grads = ctx.backward(out_grad.lazydata)
  finally: METADATA.reset(token)
  return [grads] if len(ctx.parents) == 1 else list(grads)

def _add_to_parent_grads(ctx: F.Function, grads: list[LazyBuffer | None], device: str) -> None:
  for parent, g in zip(ctx.parents, grads):
    if g is None or not parent.requires_grad: continue
    if g.shape != parent.shape:
      raise RuntimeError(f"gradient shape {g.shape} does not match tensor shape {parent.shape} in {type(ctx).__name__}")
    g_t = Tensor(g, device=device, requires_grad=False)
    parent.grad = g_t if parent.grad is None else parent.grad + g_t

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
                "element_size", "nbytes", "ndim", "is_floating_point", "_resolve_dim", "_axes", "_dims", "assign"}
def _install_metadata() -> None:
  for name, fn in list(vars(Tensor).items()):
    if name in _NO_METADATA or not callable(fn) or isinstance(fn, property): continue
    if isinstance(fn, staticmethod): setattr(Tensor, name, staticmethod(_wrap_metadata(fn.__func__, name)))
    elif callable(fn) and not isinstance(fn, type): setattr(Tensor, name, _wrap_metadata(fn, name.strip("_")))

_install_metadata()
F.register_tensor(Tensor)  # Function results are Tensors (function.py cannot import this module, which builds on it)
