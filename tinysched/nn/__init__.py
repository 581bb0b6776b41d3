"""Neural network layers over Tensor, following tinygrad's `nn` (names, arguments and initialization).

Layers are plain objects: their Tensors are attributes, so `nn.state.get_state_dict` finds them by walking `__dict__`.
"""
from __future__ import annotations
import math
from typing import Sequence
from tinysched.tensor import Tensor
from tinysched.dtype import dtypes
from tinysched.helpers import prod, make_tuple
from tinysched.nn import optim, state  # noqa: F401  (tinygrad exposes nn.optim and nn.state)

class BatchNorm:
  """Batch normalization over dim 1 (any rank >= 2).

  In training (Tensor.training) it normalizes with the batch statistics and updates running_mean/running_var in place
  (through assign) with `momentum`; otherwise it uses the running statistics (when track_running_stats).
  """
  def __init__(self, sz: int, eps: float = 1e-5, affine: bool = True, track_running_stats: bool = True, momentum: float = 0.1):
    self.eps, self.track_running_stats, self.momentum = eps, track_running_stats, momentum
    self.weight: Tensor | None = Tensor.ones(sz) if affine else None
    self.bias: Tensor | None = Tensor.zeros(sz) if affine else None
    self.num_batches_tracked = Tensor.zeros(1, dtype=dtypes.int32, requires_grad=False)
    if track_running_stats: self.running_mean, self.running_var = Tensor.zeros(sz, requires_grad=False), Tensor.ones(sz, requires_grad=False)
  def calc_stats(self, x: Tensor) -> tuple[Tensor, Tensor]:
    shape_mask = [1, -1, *([1] * (x.ndim - 2))]
    if self.track_running_stats and not Tensor.training: return self.running_mean, self.running_var.reshape(shape_mask).expand(x.shape)
    reduce_axes = tuple(a for a in range(x.ndim) if a != 1)
    batch_mean = x.mean(axis=reduce_axes)
    # d(var)/d(mean) is 0, so detaching the mean here leaves the gradient unchanged and the graph smaller
    y = x - batch_mean.detach().reshape(shape_mask)
    return batch_mean, (y * y).mean(axis=reduce_axes)
  def __call__(self, x: Tensor) -> Tensor:
    if x.ndim < 2: raise ValueError(f"BatchNorm needs an input with a channel dim 1, got shape {x.shape}")
    batch_mean, batch_var = self.calc_stats(x)
    if self.track_running_stats and Tensor.training:
      n = prod(x.shape) // x.shape[1]
      # the running variance is the unbiased one (n / (n - 1)), like torch
      self.running_mean.assign((1 - self.momentum) * self.running_mean + self.momentum * batch_mean.detach())
      self.running_var.assign((1 - self.momentum) * self.running_var + self.momentum * (n / max(n - 1, 1)) * batch_var.detach())
      self.num_batches_tracked.assign(self.num_batches_tracked + 1)
    return x.batchnorm(self.weight, self.bias, batch_mean, batch_var.add(self.eps).rsqrt())
BatchNorm2d = BatchNorm3d = BatchNorm1d = BatchNorm

def Conv1d(in_channels: int, out_channels: int, kernel_size: int, stride: int = 1, padding: int | str = 0, dilation: int = 1,
           groups: int = 1, bias: bool = True) -> Conv2d:
  return Conv2d(in_channels, out_channels, (kernel_size,), stride, padding, dilation, groups, bias)

class Conv2d:
  """y = conv2d(x, weight, bias); weight (out, in/groups, *kernel) with kaiming_uniform(a=sqrt(5)) like torch and tinygrad."""
  def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, ...], stride: int | tuple[int, ...] = 1,
               padding: int | tuple[int, ...] | str = 0, dilation: int | tuple[int, ...] = 1, groups: int = 1, bias: bool = True):
    if in_channels % groups or out_channels % groups:
      raise ValueError(f"Conv2d: in_channels {in_channels} and out_channels {out_channels} must divide by groups {groups}")
    self.kernel_size = make_tuple(kernel_size, 2)
    if isinstance(padding, str):
      if padding.lower() != "same": raise ValueError(f"Conv2d: padding string must be 'same', got {padding!r}")
      if stride != 1 and make_tuple(stride, len(self.kernel_size)) != (1,) * len(self.kernel_size):
        raise ValueError("Conv2d: padding='same' needs stride 1")
      # total padding d*(k-1), the extra one on the right like torch
      pads = [(d * (k - 1) // 2, d * (k - 1) - d * (k - 1) // 2) for d, k in zip(make_tuple(dilation, len(self.kernel_size)), self.kernel_size)]
      padding = tuple(p for pair in reversed(pads) for p in pair)
    self.stride, self.dilation, self.groups, self.padding = stride, dilation, groups, padding
    self.weight = Tensor.kaiming_uniform(out_channels, in_channels // groups, *self.kernel_size, a=math.sqrt(5))
    bound = 1 / math.sqrt(prod(self.weight.shape[1:]))
    self.bias: Tensor | None = Tensor.uniform(out_channels, low=-bound, high=bound) if bias else None
  def __call__(self, x: Tensor) -> Tensor:
    return x.conv2d(self.weight, self.bias, groups=self.groups, stride=self.stride, dilation=self.dilation, padding=self.padding)

class ConvTranspose2d(Conv2d):
  """Transposed convolution; weight (in, out/groups, *kernel)."""
  def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, ...], stride: int | tuple[int, ...] = 1,
               padding: int | tuple[int, ...] = 0, output_padding: int | tuple[int, ...] = 0, dilation: int | tuple[int, ...] = 1,
               groups: int = 1, bias: bool = True):
    super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias)
    self.output_padding = output_padding
    self.weight = Tensor.kaiming_uniform(in_channels, out_channels // groups, *self.kernel_size, a=math.sqrt(5))
    bound = 1 / math.sqrt(prod(self.weight.shape[1:]))
    self.bias = Tensor.uniform(out_channels, low=-bound, high=bound) if bias else None
  def __call__(self, x: Tensor) -> Tensor:
    return x.conv_transpose2d(self.weight, self.bias, groups=self.groups, stride=self.stride, dilation=self.dilation,
                              padding=self.padding, output_padding=self.output_padding)

class Linear:
  """y = x @ weight.T + bias; weight (out, in), both uniform in +-1/sqrt(in) like torch's default."""
  def __init__(self, in_features: int, out_features: int, bias: bool = True):
    bound = 1 / math.sqrt(in_features)
    self.weight = Tensor.uniform(out_features, in_features, low=-bound, high=bound)
    self.bias: Tensor | None = Tensor.uniform(out_features, low=-bound, high=bound) if bias else None
  def __call__(self, x: Tensor) -> Tensor:
    if x.shape[-1] != self.weight.shape[1]:
      raise ValueError(f"Linear: input {x.shape} has {x.shape[-1]} features, weight {self.weight.shape} expects {self.weight.shape[1]}")
    return x.linear(self.weight.transpose(), self.bias)

class GroupNorm:
  def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True):
    if num_channels % num_groups: raise ValueError(f"GroupNorm: {num_channels} channels do not divide into {num_groups} groups")
    self.num_groups, self.num_channels, self.eps = num_groups, num_channels, eps
    self.weight: Tensor | None = Tensor.ones(num_channels) if affine else None
    self.bias: Tensor | None = Tensor.zeros(num_channels) if affine else None
  def __call__(self, x: Tensor) -> Tensor:
    x = x.reshape(x.shape[0], self.num_groups, -1).layernorm(eps=self.eps).reshape(x.shape)
    if self.weight is None or self.bias is None: return x
    return x * self.weight.reshape(1, -1, *[1] * (x.ndim - 2)) + self.bias.reshape(1, -1, *[1] * (x.ndim - 2))

class InstanceNorm:
  def __init__(self, num_features: int, eps: float = 1e-5, affine: bool = True):
    self.num_features, self.eps = num_features, eps
    self.weight: Tensor | None = Tensor.ones(num_features) if affine else None
    self.bias: Tensor | None = Tensor.zeros(num_features) if affine else None
  def __call__(self, x: Tensor) -> Tensor:
    x = x.reshape(x.shape[0], self.num_features, -1).layernorm(eps=self.eps).reshape(x.shape)
    if self.weight is None or self.bias is None: return x
    return x * self.weight.reshape(1, -1, *[1] * (x.ndim - 2)) + self.bias.reshape(1, -1, *[1] * (x.ndim - 2))

class LayerNorm:
  """Normalize over the last len(normalized_shape) dims, then scale and shift elementwise."""
  def __init__(self, normalized_shape: int | Sequence[int], eps: float = 1e-5, elementwise_affine: bool = True):
    self.normalized_shape: tuple[int, ...] = make_tuple(normalized_shape, 1)
    self.axis, self.eps, self.elementwise_affine = tuple(-1 - i for i in range(len(self.normalized_shape))), eps, elementwise_affine
    self.weight: Tensor | None = Tensor.ones(*self.normalized_shape) if elementwise_affine else None
    self.bias: Tensor | None = Tensor.zeros(*self.normalized_shape) if elementwise_affine else None
  def __call__(self, x: Tensor) -> Tensor:
    if x.shape[-len(self.normalized_shape):] != self.normalized_shape:
      raise ValueError(f"LayerNorm: last dims of input {x.shape} must be {self.normalized_shape}")
    x = x.layernorm(eps=self.eps, axis=self.axis)
    if not self.elementwise_affine: return x
    return x * self.weight + self.bias

class LayerNorm2d(LayerNorm):
  """LayerNorm over the channel dim of an NCHW tensor."""
  def __call__(self, x: Tensor) -> Tensor: return super().__call__(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)

class RMSNorm:
  """x / sqrt(mean(x^2) + eps) * weight over the last dim, computed in float32 and cast back."""
  def __init__(self, dim: int, eps: float = 1e-6):
    self.eps, self.weight = eps, Tensor.ones(dim)
  def _norm(self, x: Tensor) -> Tensor: return x * (x.square().mean(-1, keepdim=True) + self.eps).rsqrt()
  def __call__(self, x: Tensor) -> Tensor: return self._norm(x.float()).cast(x.dtype) * self.weight

class Embedding:
  """Rows of `weight` (vocab_size, embed_size) picked by int indices, lazily: a compare against an arange and a masked sum."""
  def __init__(self, vocab_size: int, embed_size: int):
    self.vocab_sz, self.embed_sz = vocab_size, embed_size
    self.weight = Tensor.glorot_uniform(vocab_size, embed_size)
  def __call__(self, idx: Tensor) -> Tensor:
    if not dtypes.is_int(idx.dtype): raise TypeError(f"Embedding: indices must be an int tensor, got {idx.dtype}")
    # not cached on self: it would show up in get_state_dict
    arange = Tensor.arange(self.vocab_sz, requires_grad=False, device=self.weight.device).cast(idx.dtype).unsqueeze(-1)
    big_shp = idx.shape + (self.vocab_sz, self.embed_sz)
    hit = arange.expand(big_shp) == idx.reshape(idx.shape + (1, 1)).expand(big_shp)
    return hit.where(self.weight.expand(big_shp), 0).sum(-2).cast(self.weight.dtype)

__all__ = ["BatchNorm", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "Conv1d", "Conv2d", "ConvTranspose2d", "Linear", "GroupNorm",
           "InstanceNorm", "LayerNorm", "LayerNorm2d", "RMSNorm", "Embedding", "optim", "state"]
