"""Autograd primitives: each Function computes its forward on LazyBuffers and knows its gradient.

Every differentiable Tensor method is built from these; Tensor.backward walks the recorded graph.
"""
from __future__ import annotations
import math

from tinysched.dtype import dtypes, DType
from tinysched.ops import Ops
from tinysched.uop import sint, resolve, sym_ne
from tinysched.reduce import acc_dtype
from tinysched.lazy import LazyBuffer
from tinysched.helpers import argsort

class Function:
  differentiable = True  # False for comparisons and integer/bitwise ops: their outputs never require grad (like torch)
  def __init__(self, device: str, *tensors, metadata=None):
    self.device = device
    self.needs_input_grad = [t.requires_grad for t in tensors]
    self.requires_grad = True if any(self.needs_input_grad) else None if None in self.needs_input_grad else False
    if not self.differentiable: self.requires_grad = False
    if self.requires_grad: self.parents = tensors
    self.metadata = metadata
  def forward(self, *args, **kwargs): raise NotImplementedError(f"forward not implemented for {type(self)}")
  def backward(self, *args, **kwargs): raise RuntimeError(f"backward not implemented for {type(self).__name__}")
  @classmethod
  def apply(cls, *x, **kwargs):
    from tinysched.tensor import Tensor
    from tinysched.lazy import METADATA
    ctx = cls(x[0].device, *x, metadata=METADATA.get())
    ret = Tensor.__new__(Tensor)
    ret.lazydata, ret.requires_grad, ret.grad = ctx.forward(*[t.lazydata for t in x], **kwargs), ctx.requires_grad, None
    ret._ctx = ctx if ctx.requires_grad and not Tensor.no_grad else None
    return ret

# *** unary ***

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
    # a cast from float to int/bool is a step function: its gradient is 0 (so floor/round/trunc have torch's zero gradient)
    if dtypes.is_float(self.input_dtype) and not dtypes.is_float(grad.dtype): return grad.cast(self.input_dtype).const_like(0)
    return grad.cast(self.input_dtype)

class Neg(Function):
  def forward(self, x: LazyBuffer) -> LazyBuffer: return x.alu(Ops.NEG)
  def backward(self, grad: LazyBuffer) -> LazyBuffer: return grad.alu(Ops.NEG)

class Reciprocal(Function):
  def forward(self, x: LazyBuffer) -> LazyBuffer:
    self.ret = x.alu(Ops.RECIP)
    return self.ret
  def backward(self, grad: LazyBuffer) -> LazyBuffer: return grad.alu(Ops.NEG).alu(Ops.MUL, self.ret).alu(Ops.MUL, self.ret)

class Sin(Function):
  def forward(self, x: LazyBuffer) -> LazyBuffer:
    self.x = x
    return x.alu(Ops.SIN)
  def backward(self, grad: LazyBuffer) -> LazyBuffer:
    return self.x.const_like(math.pi / 2).alu(Ops.ADD, self.x.alu(Ops.NEG)).alu(Ops.SIN).alu(Ops.MUL, grad)

class Relu(Function):
  def forward(self, x: LazyBuffer) -> LazyBuffer:
    self.ret = x.alu(Ops.MAX, x.const_like(0))
    return self.ret
  def backward(self, grad: LazyBuffer) -> LazyBuffer:
    return self.ret.const_like(0).alu(Ops.CMPLT, self.ret).cast(grad.dtype).alu(Ops.MUL, grad)

class Log(Function):
  def forward(self, x: LazyBuffer) -> LazyBuffer:
    self.x = x
    return x.alu(Ops.LOG2).alu(Ops.MUL, x.const_like(math.log(2)))
  def backward(self, grad: LazyBuffer) -> LazyBuffer: return grad.alu(Ops.MUL, self.x.alu(Ops.RECIP))

class Exp(Function):
  def forward(self, x: LazyBuffer) -> LazyBuffer:
    self.ret = x.alu(Ops.MUL, x.const_like(1 / math.log(2))).alu(Ops.EXP2)
    return self.ret
  def backward(self, grad: LazyBuffer) -> LazyBuffer: return self.ret.alu(Ops.MUL, grad)

class Sqrt(Function):
  def forward(self, x: LazyBuffer) -> LazyBuffer:
    self.ret = x.alu(Ops.SQRT)
    return self.ret
  def backward(self, grad: LazyBuffer) -> LazyBuffer: return grad.alu(Ops.MUL, self.ret.alu(Ops.MUL, self.ret.const_like(2)).alu(Ops.RECIP))

class Sigmoid(Function):
  def forward(self, x: LazyBuffer) -> LazyBuffer:
    self.ret = x.const_like(1).alu(Ops.ADD, x.alu(Ops.MUL, x.const_like(-1 / math.log(2))).alu(Ops.EXP2)).alu(Ops.RECIP)
    return self.ret
  def backward(self, grad: LazyBuffer) -> LazyBuffer:
    return self.ret.alu(Ops.MUL, self.ret.const_like(1).alu(Ops.ADD, self.ret.alu(Ops.NEG))).alu(Ops.MUL, grad)

class Sign(Function):
  def forward(self, x: LazyBuffer) -> LazyBuffer:
    return x.alu(Ops.CMPNE, x.const_like(0)).alu(Ops.WHERE, x.alu(Ops.CMPLT, x.const_like(0)).alu(Ops.WHERE, x.const_like(-1),
                                                                                                      x.const_like(1)), x.const_like(0))
  def backward(self, grad: LazyBuffer) -> LazyBuffer: return grad.const_like(0)

# *** binary ***

class Less(Function):
  differentiable = False
  def forward(self, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer: return x.alu(Ops.CMPLT, y)
  def backward(self, grad: LazyBuffer) -> tuple[LazyBuffer | None, LazyBuffer | None]: return None, None

class Neq(Function):
  differentiable = False
  def forward(self, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer: return x.alu(Ops.CMPNE, y)
  def backward(self, grad: LazyBuffer) -> tuple[LazyBuffer | None, LazyBuffer | None]: return None, None

class Xor(Function):
  differentiable = False
  def forward(self, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer: return x.alu(Ops.XOR, y)
class BitwiseAnd(Function):
  differentiable = False
  def forward(self, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer: return x.alu(Ops.AND, y)
class BitwiseOr(Function):
  differentiable = False
  def forward(self, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer: return x.alu(Ops.OR, y)
class IDiv(Function):
  differentiable = False
  def forward(self, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer: return x.alu(Ops.IDIV, y)
class Mod(Function):
  differentiable = False
  def forward(self, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer: return x.alu(Ops.MOD, y)
class Shl(Function):
  differentiable = False
  def forward(self, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer: return x.alu(Ops.SHL, y)
class Shr(Function):
  differentiable = False
  def forward(self, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer: return x.alu(Ops.SHR, y)

class Add(Function):
  def forward(self, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer: return x.alu(Ops.ADD, y)
  def backward(self, grad: LazyBuffer) -> tuple[LazyBuffer | None, LazyBuffer | None]:
    return grad if self.needs_input_grad[0] else None, grad if self.needs_input_grad[1] else None

class Mul(Function):
  def forward(self, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer:
    self.x, self.y = x, y
    return x.alu(Ops.MUL, y)
  def backward(self, grad: LazyBuffer) -> tuple[LazyBuffer | None, LazyBuffer | None]:
    return self.y.alu(Ops.MUL, grad) if self.needs_input_grad[0] else None, self.x.alu(Ops.MUL, grad) if self.needs_input_grad[1] else None

class Maximum(Function):
  def forward(self, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer:
    self.x, self.y = x, y
    return x.alu(Ops.MAX, y)
  def backward(self, grad: LazyBuffer) -> tuple[LazyBuffer | None, LazyBuffer | None]:
    # ties share the gradient equally, like tinygrad and torch's amax
    xgt = self.y.alu(Ops.CMPLT, self.x).cast(grad.dtype)
    eq = self.x.alu(Ops.CMPNE, self.y).alu(Ops.CMPNE, self.x.const_like(True).cast(dtypes.bool)).cast(grad.dtype)
    half = eq.alu(Ops.MUL, eq.const_like(0.5))
    gx = xgt.alu(Ops.ADD, half)
    gy = gx.const_like(1).alu(Ops.ADD, gx.alu(Ops.NEG))
    return gx.alu(Ops.MUL, grad) if self.needs_input_grad[0] else None, gy.alu(Ops.MUL, grad) if self.needs_input_grad[1] else None

class Where(Function):
  def forward(self, x: LazyBuffer, y: LazyBuffer, z: LazyBuffer) -> LazyBuffer:
    self.x = x
    return x.alu(Ops.WHERE, y, z)
  def backward(self, grad: LazyBuffer) -> tuple[None, LazyBuffer | None, LazyBuffer | None]:
    return None, self.x.alu(Ops.WHERE, grad, grad.const_like(0)) if self.needs_input_grad[1] else None, \
      self.x.alu(Ops.WHERE, grad.const_like(0), grad) if self.needs_input_grad[2] else None

# *** reduce ***

class Sum(Function):
  def forward(self, x: LazyBuffer, axis: tuple[int, ...]) -> LazyBuffer:
    self.input_shape = x.shape
    return x.r(Ops.ADD, axis)
  def backward(self, grad: LazyBuffer) -> LazyBuffer: return grad.expand(self.input_shape)

class Prod(Function):
  def forward(self, x: LazyBuffer, axis: tuple[int, ...]) -> LazyBuffer:
    self.x, self.ret = x, x.r(Ops.MUL, axis)
    return self.ret
  def backward(self, grad: LazyBuffer) -> LazyBuffer:
    return grad.alu(Ops.MUL, self.ret).expand(self.x.shape).alu(Ops.MUL, self.x.alu(Ops.RECIP))

class Max(Function):
  def forward(self, x: LazyBuffer, axis: tuple[int, ...]) -> LazyBuffer:
    self.x, self.ret, self.axis = x, x.r(Ops.MAX, axis), axis
    return self.ret
  def backward(self, grad: LazyBuffer) -> LazyBuffer:
    # 1 where the input equals the max, split evenly between ties
    max_is_1s = self.x.alu(Ops.CMPNE, self.ret.expand(self.x.shape)).alu(Ops.CMPNE, self.x.const_like(1).cast(dtypes.bool)).cast(grad.dtype)
    div = max_is_1s.r(Ops.ADD, self.axis).expand(self.x.shape)
    return max_is_1s.alu(Ops.MUL, div.alu(Ops.RECIP)).alu(Ops.MUL, grad.expand(self.x.shape))

# *** movement ***

class Expand(Function):
  def forward(self, x: LazyBuffer, shape: tuple[sint, ...]) -> LazyBuffer:
    self.expanded_axis = tuple(i for i, (si, so) in enumerate(zip(x.shape, shape)) if resolve(sym_ne(si, so)))
    return x.expand(shape)
  def backward(self, grad: LazyBuffer) -> LazyBuffer:
    return grad.cast(acc_dtype(grad.dtype)).r(Ops.ADD, self.expanded_axis).cast(grad.dtype)

class Reshape(Function):
  def forward(self, x: LazyBuffer, shape: tuple[sint, ...]) -> LazyBuffer:
    self.input_shape = x.shape
    return x.reshape(shape)
  def backward(self, grad: LazyBuffer) -> LazyBuffer: return grad.reshape(self.input_shape)

class Permute(Function):
  def forward(self, x: LazyBuffer, order: tuple[int, ...]) -> LazyBuffer:
    self.input_order = order
    return x.permute(order)
  def backward(self, grad: LazyBuffer) -> LazyBuffer: return grad.permute(tuple(argsort(list(self.input_order))))

class Pad(Function):
  def forward(self, x: LazyBuffer, arg: tuple[tuple[sint, sint], ...]) -> LazyBuffer:
    self.narg = tuple((p[0], s + p[0]) for s, p in zip(x.shape, arg))
    return x.pad(arg)
  def backward(self, grad: LazyBuffer) -> LazyBuffer: return grad.shrink(self.narg)

class Shrink(Function):
  def forward(self, x: LazyBuffer, arg: tuple[tuple[sint, sint], ...]) -> LazyBuffer:
    self.narg = tuple((p[0], s - p[1]) for s, p in zip(x.shape, arg))
    return x.shrink(arg)
  def backward(self, grad: LazyBuffer) -> LazyBuffer: return grad.pad(self.narg)

class Flip(Function):
  def forward(self, x: LazyBuffer, axis: tuple[int, ...]) -> LazyBuffer:
    self.arg = tuple(-1 if i in axis else 1 for i in range(len(x.shape)))
    return x.stride(self.arg)
  def backward(self, grad: LazyBuffer) -> LazyBuffer: return grad.stride(self.arg)

