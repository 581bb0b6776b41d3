"""Autograd primitives: each Function computes its forward on LazyBuffers and knows its gradient.

Every differentiable Tensor method is built from these; Tensor.backward walks the recorded graph.
The Functions come in families that share their plumbing: elementwise ops (a formula each way), ops with no
gradient (one ALU op), reductions (what the gradient needs is kept at forward) and movement ops (the gradient
is the inverse view). A Function keeps exactly the LazyBuffers its gradient reads and no more: they stay
alive as long as the graph does.
"""
from __future__ import annotations
import math
from typing import Any, Callable

from tinysched.dtype import dtypes, DType
from tinysched.ops import Ops
from tinysched.uop import sint, resolve, sym_ne
from tinysched.reduce import acc_dtype
from tinysched.lazy import LazyBuffer, METADATA
from tinysched.helpers import argsort

Box = tuple[tuple[sint, sint], ...]  # (start, end) or (before, after) per dim: the argument of shrink and pad

def _any_needs_grad(flags: list[bool | None]) -> bool | None:
  """requires_grad of an output from its inputs': True if one needs it, None (undecided) if one is undecided, else False."""
  if any(flags): return True
  return None if None in flags else False

# the Tensor class that wraps a Function's result: tensor.py builds on this module, so it registers the class at its import
_Tensor: Any = None
def register_tensor(cls: type) -> None:
  global _Tensor
  _Tensor = cls

class Function:
  """One recorded op: `forward` builds the result, `backward` maps the result's gradient to the inputs' gradients."""
  differentiable = True  # False for comparisons and integer/bitwise ops: their outputs never require grad (like torch)
  def __init__(self, device: str, *tensors, metadata=None):
    flags = [t.requires_grad for t in tensors]
    out_needs = _any_needs_grad(flags) if self.differentiable else False
    self.device, self.metadata, self.needs_input_grad, self.requires_grad = device, metadata, flags, out_needs
    if out_needs: self.parents = tensors  # only a graph that will be walked keeps its inputs
  def forward(self, *args, **kwargs): raise NotImplementedError(f"forward not implemented for {type(self)}")
  def backward(self, *args, **kwargs): raise RuntimeError(f"backward not implemented for {type(self).__name__}")
  @classmethod
  def apply(cls, *x, **kwargs):
    """Run the op on Tensors (the LazyBuffer graph grows by the forward) and wrap the result."""
    fn = cls(x[0].device, *x, metadata=METADATA.get())
    return fn._result(fn.forward(*[t.lazydata for t in x], **kwargs))
  def _result(self, lb: LazyBuffer):
    """The output Tensor; it records this Function as its context while grad mode is on and a gradient can flow."""
    out = _Tensor.__new__(_Tensor)
    out.lazydata, out.grad, out.requires_grad = lb, None, self.requires_grad
    out._ctx = None if _Tensor.no_grad or not self.requires_grad else self
    return out
  def _per_input(self, *grads: Callable[[], LazyBuffer | None]) -> tuple[LazyBuffer | None, ...]:
    """The gradient of each input, built only for the inputs that need one (the others get None)."""
    return tuple(g() if need else None for need, g in zip(self.needs_input_grad, grads))

# *** formula helpers: the gradients below are written with these so they read as the math they are ***

def _add(a: LazyBuffer, b: LazyBuffer) -> LazyBuffer: return a.alu(Ops.ADD, b)
def _mul(a: LazyBuffer, b: LazyBuffer) -> LazyBuffer: return a.alu(Ops.MUL, b)
def _neg(a: LazyBuffer) -> LazyBuffer: return a.alu(Ops.NEG)
def _recip(a: LazyBuffer) -> LazyBuffer: return a.alu(Ops.RECIP)
def _times(a: LazyBuffer, k: float) -> LazyBuffer: return a.alu(Ops.MUL, a.const_like(k))
def _one_minus(a: LazyBuffer) -> LazyBuffer: return _add(a.const_like(1), _neg(a))
def _equal(a: LazyBuffer, b: LazyBuffer, dtype: DType) -> LazyBuffer:
  """1 where a == b, else 0, in dtype. There is no CMPEQ: it is (a != b) != True."""
  return a.alu(Ops.CMPNE, b).alu(Ops.CMPNE, a.const_like(1).cast(dtypes.bool)).cast(dtype)

_LN2 = math.log(2)  # exp and log run on the hardware's base-2 EXP2/LOG2

# *** elementwise, one input ***

class Contiguous(Function):
  def forward(self, x: LazyBuffer) -> LazyBuffer: return x.contiguous()
  def backward(self, grad: LazyBuffer) -> LazyBuffer: return grad

class ContiguousBackward(Function):
  def forward(self, x: LazyBuffer) -> LazyBuffer: return x
  def backward(self, grad: LazyBuffer) -> LazyBuffer: return grad.contiguous()

class Cast(Function):
  def forward(self, x: LazyBuffer, dtype: DType, bitcast: bool = False) -> LazyBuffer:
    self.input_dtype, self.bitcast = x.dtype, bitcast
    return x.cast(dtype, bitcast)
  def backward(self, grad: LazyBuffer) -> LazyBuffer:
    if self.bitcast: raise RuntimeError("bitcast cannot backward")
    back = grad.cast(self.input_dtype)
    # a cast from float to int/bool is a step function: its gradient is 0 (so floor/round/trunc have torch's zero gradient)
    step = dtypes.is_float(self.input_dtype) and not dtypes.is_float(grad.dtype)
    return back.const_like(0) if step else back

class Neg(Function):
  def forward(self, x: LazyBuffer) -> LazyBuffer: return _neg(x)
  def backward(self, grad: LazyBuffer) -> LazyBuffer: return _neg(grad)

class Reciprocal(Function):
  def forward(self, x: LazyBuffer) -> LazyBuffer:
    self.ret = _recip(x)
    return self.ret
  def backward(self, grad: LazyBuffer) -> LazyBuffer: return _mul(_mul(_neg(grad), self.ret), self.ret)  # -g/x^2 = -g*r*r

class Sin(Function):
  def forward(self, x: LazyBuffer) -> LazyBuffer:
    self.x = x
    return x.alu(Ops.SIN)
  def backward(self, grad: LazyBuffer) -> LazyBuffer:
    cos_x = _add(self.x.const_like(math.pi / 2), _neg(self.x)).alu(Ops.SIN)  # cos x = sin(pi/2 - x): there is no COS op
    return _mul(cos_x, grad)

class Relu(Function):
  def forward(self, x: LazyBuffer) -> LazyBuffer:
    self.ret = x.alu(Ops.MAX, x.const_like(0))
    return self.ret
  def backward(self, grad: LazyBuffer) -> LazyBuffer:
    active = self.ret.const_like(0).alu(Ops.CMPLT, self.ret)
    return _mul(active.cast(grad.dtype), grad)

class Log(Function):
  def forward(self, x: LazyBuffer) -> LazyBuffer:
    self.x = x
    return _times(x.alu(Ops.LOG2), _LN2)
  def backward(self, grad: LazyBuffer) -> LazyBuffer: return _mul(grad, _recip(self.x))

class Exp(Function):
  def forward(self, x: LazyBuffer) -> LazyBuffer:
    self.ret = _times(x, 1 / _LN2).alu(Ops.EXP2)
    return self.ret
  def backward(self, grad: LazyBuffer) -> LazyBuffer: return _mul(self.ret, grad)

class Sqrt(Function):
  def forward(self, x: LazyBuffer) -> LazyBuffer:
    self.ret = x.alu(Ops.SQRT)
    return self.ret
  def backward(self, grad: LazyBuffer) -> LazyBuffer: return _mul(grad, _recip(_times(self.ret, 2)))

class StdSqrt(Sqrt):
  """The sqrt that ends std: its gradient is 0 where the std is 0 (a constant row, or one element with correction=0)
  instead of 0 * inf = nan, like torch. Where the std is undefined (nan: correction >= count) it stays nan."""
  def backward(self, grad: LazyBuffer) -> LazyBuffer:
    nonzero = self.ret.alu(Ops.CMPNE, self.ret.const_like(0))
    return nonzero.alu(Ops.WHERE, super().backward(grad), grad.const_like(0))

class Sigmoid(Function):
  def forward(self, x: LazyBuffer) -> LazyBuffer:
    self.ret = _recip(_add(x.const_like(1), _times(x, -1 / _LN2).alu(Ops.EXP2)))  # 1 / (1 + e^-x)
    return self.ret
  def backward(self, grad: LazyBuffer) -> LazyBuffer: return _mul(_mul(self.ret, _one_minus(self.ret)), grad)

class Sign(Function):
  def forward(self, x: LazyBuffer) -> LazyBuffer:
    zero = x.const_like(0)
    minus_or_plus = x.alu(Ops.CMPLT, zero).alu(Ops.WHERE, x.const_like(-1), x.const_like(1))
    return x.alu(Ops.CMPNE, zero).alu(Ops.WHERE, minus_or_plus, zero)
  def backward(self, grad: LazyBuffer) -> LazyBuffer: return grad.const_like(0)

# *** ops without a gradient: comparisons, integer division and bitwise ops are one ALU op each ***

class _NoGrad(Function):
  differentiable = False
  op: Ops
  def forward(self, *srcs: LazyBuffer) -> LazyBuffer: return srcs[0].alu(self.op, *srcs[1:])
  def backward(self, grad: LazyBuffer) -> tuple[None, ...]: return tuple(None for _ in self.needs_input_grad)

class Less(_NoGrad): op = Ops.CMPLT
class Neq(_NoGrad): op = Ops.CMPNE
class Xor(_NoGrad): op = Ops.XOR
class BitwiseAnd(_NoGrad): op = Ops.AND
class BitwiseOr(_NoGrad): op = Ops.OR
class IDiv(_NoGrad): op = Ops.IDIV
class Mod(_NoGrad): op = Ops.MOD
class Shl(_NoGrad): op = Ops.SHL
class Shr(_NoGrad): op = Ops.SHR

# *** elementwise, several inputs ***

class Add(Function):
  def forward(self, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer: return _add(x, y)
  def backward(self, grad: LazyBuffer) -> tuple[LazyBuffer | None, ...]: return self._per_input(lambda: grad, lambda: grad)

class Mul(Function):
  def forward(self, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer:
    self.x, self.y = x, y
    return _mul(x, y)
  def backward(self, grad: LazyBuffer) -> tuple[LazyBuffer | None, ...]:
    return self._per_input(lambda: _mul(self.y, grad), lambda: _mul(self.x, grad))

class Maximum(Function):
  def forward(self, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer:
    self.x, self.y = x, y
    return x.alu(Ops.MAX, y)
  def backward(self, grad: LazyBuffer) -> tuple[LazyBuffer | None, ...]:
    # the larger input takes the gradient; ties share it equally, like tinygrad and torch's amax
    x_wins = self.y.alu(Ops.CMPLT, self.x).cast(grad.dtype)
    share_x = _add(x_wins, _times(_equal(self.x, self.y, grad.dtype), 0.5))
    share_y = _one_minus(share_x)
    return self._per_input(lambda: _mul(share_x, grad), lambda: _mul(share_y, grad))

class Where(Function):
  def forward(self, x: LazyBuffer, y: LazyBuffer, z: LazyBuffer) -> LazyBuffer:
    self.cond = x
    return x.alu(Ops.WHERE, y, z)
  def backward(self, grad: LazyBuffer) -> tuple[LazyBuffer | None, ...]:
    # the condition gets no gradient; each branch gets grad where it was picked and 0 elsewhere
    zero = grad.const_like(0)
    def picked(on_true: LazyBuffer, on_false: LazyBuffer) -> LazyBuffer: return self.cond.alu(Ops.WHERE, on_true, on_false)
    return self._per_input(lambda: None, lambda: picked(grad, zero), lambda: picked(zero, grad))

class Chain(Function):
  """An op whose forward value and local derivatives were built elsewhere (from other Tensor ops, outside the graph):
  forward passes `value` through; backward multiplies the gradient by each input's derivative (the chain rule).
  apply(x, y, ..., value, dx, dy, ...): the value and derivatives come detached and get no gradient themselves."""
  def forward(self, *srcs: LazyBuffer) -> LazyBuffer:
    n = (len(srcs) - 1) // 2
    self.derivs = srcs[n + 1:]
    return srcs[n]
  def backward(self, grad: LazyBuffer) -> tuple[LazyBuffer | None, ...]:
    n = len(self.derivs)
    per = tuple((lambda d=d: _mul(grad, d)) for d in self.derivs) + tuple((lambda: None) for _ in range(n + 1))
    return self._per_input(*per)

# *** reductions: forward reduces with `op` (keeping dims), `_keep` saves what the gradient reads ***

class _Reduce(Function):
  op: Ops
  def forward(self, x: LazyBuffer, axis: tuple[int, ...]) -> LazyBuffer:
    out = x.r(self.op, axis)
    self._keep(x, out, axis)
    return out
  def _keep(self, x: LazyBuffer, out: LazyBuffer, axis: tuple[int, ...]) -> None: raise NotImplementedError

class Sum(_Reduce):
  """The adjoint of Expand: a sum's gradient is the gradient broadcast back."""
  op = Ops.ADD
  def _keep(self, x: LazyBuffer, out: LazyBuffer, axis: tuple[int, ...]) -> None: self.input_shape = x.shape
  def backward(self, grad: LazyBuffer) -> LazyBuffer: return grad.expand(self.input_shape)

class Prod(_Reduce):
  op = Ops.MUL
  def _keep(self, x: LazyBuffer, out: LazyBuffer, axis: tuple[int, ...]) -> None: self.x, self.ret = x, out
  def backward(self, grad: LazyBuffer) -> LazyBuffer:
    return _mul(_mul(grad, self.ret).expand(self.x.shape), _recip(self.x))  # d prod / d x_i = prod / x_i

class Max(_Reduce):
  op = Ops.MAX
  def _keep(self, x: LazyBuffer, out: LazyBuffer, axis: tuple[int, ...]) -> None: self.x, self.ret, self.axis = x, out, axis
  def backward(self, grad: LazyBuffer) -> LazyBuffer:
    full = self.x.shape
    # the gradient goes to the elements equal to the max, split evenly between ties
    is_max = _equal(self.x, self.ret.expand(full), grad.dtype)
    ties = is_max.r(Ops.ADD, self.axis).expand(full)
    return _mul(_mul(is_max, _recip(ties)), grad.expand(full))

# *** movement ***

def _sum_to(x: LazyBuffer, shape: tuple[sint, ...]) -> LazyBuffer:
  """x summed down to `shape` (the axes where they differ become size 1), accumulated in acc_dtype and cast back."""
  grown = tuple(i for i, sizes in enumerate(zip(shape, x.shape)) if resolve(sym_ne(*sizes)))
  dt = x.dtype
  return x.cast(acc_dtype(dt)).r(Ops.ADD, grown).cast(dt)

class Expand(Function):
  """The adjoint of Sum: an expand's gradient is summed back down to the input's shape."""
  def forward(self, x: LazyBuffer, shape: tuple[sint, ...]) -> LazyBuffer:
    self.input_shape = x.shape
    return x.expand(shape)
  def backward(self, grad: LazyBuffer) -> LazyBuffer: return _sum_to(grad, self.input_shape)

# the view that undoes each view op (pad and shrink undo each other; the others undo themselves)
_UNDO = {"reshape": "reshape", "permute": "permute", "pad": "shrink", "shrink": "pad", "stride": "stride"}

class _View(Function):
  """A view op: forward applies the LazyBuffer method `view`, backward applies `_UNDO[view]` to the gradient with the
  argument forward worked out from the input's shape. That argument is all it keeps (no LazyBuffer)."""
  view: str
  def _apply(self, x: LazyBuffer, arg: Any, undo_arg: Any) -> LazyBuffer:
    self.undo_arg = undo_arg
    return getattr(x, self.view)(arg)
  def backward(self, grad: LazyBuffer) -> LazyBuffer:
    undo = getattr(LazyBuffer, _UNDO[self.view])
    return undo(grad, self.undo_arg)

class Reshape(_View):
  view = "reshape"
  def forward(self, x: LazyBuffer, shape: tuple[sint, ...]) -> LazyBuffer: return self._apply(x, shape, x.shape)

class Permute(_View):
  view = "permute"
  def forward(self, x: LazyBuffer, order: tuple[int, ...]) -> LazyBuffer: return self._apply(x, order, tuple(argsort(list(order))))

class Pad(_View):
  view = "pad"
  def forward(self, x: LazyBuffer, arg: Box) -> LazyBuffer:
    inside = tuple((before, before + n) for n, (before, _) in zip(x.shape, arg))  # the input's box within the padded result
    return self._apply(x, arg, inside)

class Shrink(_View):
  view = "shrink"
  def forward(self, x: LazyBuffer, arg: Box) -> LazyBuffer:
    cut = tuple((start, n - end) for n, (start, end) in zip(x.shape, arg))  # what was cut off on each side, padded back
    return self._apply(x, arg, cut)

class Flip(_View):
  """Reverses `axis` as a stride of -1; flipping twice is the identity, so it undoes itself."""
  view = "stride"
  def forward(self, x: LazyBuffer, axis: tuple[int, ...]) -> LazyBuffer:
    strides = [1] * len(x.shape)
    for d in axis: strides[d] = -1
    return self._apply(x, tuple(strides), tuple(strides))
