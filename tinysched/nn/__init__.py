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

def _ones_zeros(shape: tuple[int, ...], **kwargs) -> tuple[Tensor, Tensor]:
  """Ones and zeros of `shape`: the identity scale and shift of a norm layer (and a fresh running variance and mean)."""
  return Tensor.ones(*shape, **kwargs), Tensor.zeros(*shape, **kwargs)

def _affine_params(shape: tuple[int, ...], affine: bool) -> tuple[Tensor | None, Tensor | None]:
  """(weight, bias) of a norm layer, starting as the identity; (None, None) without an affine transform."""
  return _ones_zeros(shape) if affine else (None, None)

def _per_channel(x: Tensor) -> tuple[int, ...]:
  """The shape that broadcasts a per-channel (dim 1) vector against x: (1, -1, 1, ...)."""
  return (1, -1) + (1,) * (x.ndim - 2)

def _scale_shift(y: Tensor, weight: Tensor | None, bias: Tensor | None, per_channel: bool = False) -> Tensor:
  """The affine step after a normalization: y * weight + bias, with the parameters broadcast along dim 1 when
  `per_channel` (else elementwise over the trailing dims); y as it is when the layer has no parameters."""
  if weight is None or bias is None: return y
  if per_channel: weight, bias = weight.reshape(_per_channel(y)), bias.reshape(_per_channel(y))
  return y * weight + bias

def _fan_in_uniform(*shape: int, fan_in: int) -> Tensor:
  """Uniform in +-1/sqrt(fan_in): torch's default for Linear weights and for the biases of Linear and Conv."""
  bound = 1 / math.sqrt(fan_in)
  return Tensor.uniform(*shape, low=-bound, high=bound)

class BatchNorm:
  """Batch normalization over dim 1 (any rank >= 2).

  In training (Tensor.training) it normalizes with the batch statistics and updates running_mean/running_var in place
  (through assign) with `momentum`; otherwise it uses the running statistics (when track_running_stats).
  """
  def __init__(self, sz: int, eps: float = 1e-5, affine: bool = True, track_running_stats: bool = True, momentum: float = 0.1):
    # the Tensors are set in state-dict order: weight, bias, num_batches_tracked, running_mean, running_var
    self.weight, self.bias = _affine_params((sz,), affine)
    self.num_batches_tracked = Tensor.zeros(1, dtype=dtypes.int32, requires_grad=False)
    if track_running_stats:
      var, mean = _ones_zeros((sz,), requires_grad=False)
      self.running_mean, self.running_var = mean, var
    self.eps, self.momentum, self.track_running_stats = eps, momentum, track_running_stats
  def calc_stats(self, x: Tensor) -> tuple[Tensor, Tensor]:
    """(mean, variance) per channel: the batch's while training or without running statistics, else the running ones
    (the variance then comes broadcast to x's shape)."""
    if self.track_running_stats and not Tensor.training: return self.running_mean, self.running_var.reshape(_per_channel(x)).expand(x.shape)
    others = (0, *range(2, x.ndim))
    mean = x.mean(axis=others)
    # d(var)/d(mean) is 0, so detaching the mean here leaves the gradient unchanged and the graph smaller
    dev = x - mean.detach().reshape(_per_channel(x))
    return mean, (dev * dev).mean(axis=others)
  def __call__(self, x: Tensor) -> Tensor:
    if x.ndim < 2: raise ValueError(f"BatchNorm needs an input with a channel dim 1, got shape {x.shape}")
    mean, var = self.calc_stats(x)
    if Tensor.training and self.track_running_stats: self._track(mean.detach(), var.detach(), prod(x.shape) // x.shape[1])
    return x.batchnorm(self.weight, self.bias, mean, var.add(self.eps).rsqrt())
  def _track(self, mean: Tensor, var: Tensor, n: int) -> None:
    """Move the running statistics toward this batch's by `momentum`; the running variance is the unbiased one
    (times n / (n - 1) for n values per channel), like torch."""
    keep = 1 - self.momentum
    self.running_mean.assign(keep * self.running_mean + self.momentum * mean)
    self.running_var.assign(keep * self.running_var + self.momentum * (n / max(n - 1, 1)) * var)
    self.num_batches_tracked.assign(self.num_batches_tracked + 1)
BatchNorm2d = BatchNorm3d = BatchNorm1d = BatchNorm

def Conv1d(in_channels: int, out_channels: int, kernel_size: int, stride: int = 1, padding: int | str = 0, dilation: int = 1,
           groups: int = 1, bias: bool = True) -> Conv2d:
  return Conv2d(in_channels, out_channels, (kernel_size,), stride, padding, dilation, groups, bias)

def _same_padding(kernel_size: tuple[int, ...], stride, dilation) -> tuple[int, ...]:
  """padding='same' as Tensor.conv2d's flat (left, right) pairs, last dim first: d*(k-1) in all, the odd one on the
  right like torch. Only for stride 1."""
  if stride != 1 and make_tuple(stride, len(kernel_size)) != (1,) * len(kernel_size):
    raise ValueError("Conv2d: padding='same' needs stride 1")
  totals = [d * (k - 1) for d, k in zip(make_tuple(dilation, len(kernel_size)), kernel_size)]
  return tuple(p for total in reversed(totals) for p in (total // 2, total - total // 2))

class Conv2d:
  """y = conv2d(x, weight, bias); weight (out, in/groups, *kernel) with kaiming_uniform(a=sqrt(5)) like torch and tinygrad."""
  def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, ...], stride: int | tuple[int, ...] = 1,
               padding: int | tuple[int, ...] | str = 0, dilation: int | tuple[int, ...] = 1, groups: int = 1, bias: bool = True):
    if in_channels % groups or out_channels % groups:
      raise ValueError(f"Conv2d: in_channels {in_channels} and out_channels {out_channels} must divide by groups {groups}")
    self.kernel_size = make_tuple(kernel_size, 2)
    if isinstance(padding, str):
      if padding.lower() != "same": raise ValueError(f"Conv2d: padding string must be 'same', got {padding!r}")
      padding = _same_padding(self.kernel_size, stride, dilation)
    self.stride, self.dilation, self.groups, self.padding = stride, dilation, groups, padding
    self.weight, self.bias = self._params(in_channels, out_channels, bias)
  def _params(self, in_channels: int, out_channels: int, bias: bool) -> tuple[Tensor, Tensor | None]:
    """(weight, bias): weight (out, in/groups, *kernel), drawn first; the bias by the weight's fan-in."""
    weight = Tensor.kaiming_uniform(out_channels, in_channels // self.groups, *self.kernel_size, a=math.sqrt(5))
    return weight, _fan_in_uniform(out_channels, fan_in=prod(weight.shape[1:])) if bias else None
  _op = "conv2d"  # the Tensor method that applies the layer
  def _options(self) -> dict:
    return {"groups": self.groups, "stride": self.stride, "dilation": self.dilation, "padding": self.padding}
  def __call__(self, x: Tensor) -> Tensor:
    conv = getattr(x, self._op)
    return conv(self.weight, self.bias, **self._options())

class ConvTranspose2d(Conv2d):
  """Transposed convolution; weight (in, out/groups, *kernel)."""
  def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, ...], stride: int | tuple[int, ...] = 1,
               padding: int | tuple[int, ...] = 0, output_padding: int | tuple[int, ...] = 0, dilation: int | tuple[int, ...] = 1,
               groups: int = 1, bias: bool = True):
    super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias)
    self.output_padding = output_padding
  def _params(self, in_channels: int, out_channels: int, bias: bool) -> tuple[Tensor, Tensor | None]:
    """The plain Conv2d draws come first (they advance the random state), then the transposed weight (in, out/groups, *kernel)
    and its bias."""
    super()._params(in_channels, out_channels, bias)
    weight = Tensor.kaiming_uniform(in_channels, out_channels // self.groups, *self.kernel_size, a=math.sqrt(5))
    return weight, _fan_in_uniform(out_channels, fan_in=prod(weight.shape[1:])) if bias else None
  _op = "conv_transpose2d"
  def _options(self) -> dict: return {**super()._options(), "output_padding": self.output_padding}

class Linear:
  """y = x @ weight.T + bias; weight (out, in), both uniform in +-1/sqrt(in) like torch's default."""
  def __init__(self, in_features: int, out_features: int, bias: bool = True):
    self.weight = _fan_in_uniform(out_features, in_features, fan_in=in_features)
    self.bias: Tensor | None = _fan_in_uniform(out_features, fan_in=in_features) if bias else None
  def __call__(self, x: Tensor) -> Tensor:
    if x.shape[-1] != self.weight.shape[1]:
      raise ValueError(f"Linear: input {x.shape} has {x.shape[-1]} features, weight {self.weight.shape} expects {self.weight.shape[1]}")
    return x.linear(self.weight.transpose(), self.bias)

class _Norm:
  """A normalization layer: `_normalize`, then the affine step with weight and bias (per channel or elementwise)."""
  per_channel = False
  weight: Tensor | None
  bias: Tensor | None
  def _normalize(self, x: Tensor) -> Tensor: raise NotImplementedError
  def __call__(self, x: Tensor) -> Tensor:
    y = self._normalize(x)
    return _scale_shift(y, self.weight, self.bias, self.per_channel)

class _GroupedNorm(_Norm):
  """Groups of channels of every sample normalized on their own, then a per-channel affine step (GroupNorm, InstanceNorm)."""
  per_channel = True
  eps: float
  def _groups(self) -> int: raise NotImplementedError
  def _normalize(self, x: Tensor) -> Tensor:
    # a group is the flattened rest of the dims after dim 1: layernorm over the last dim normalizes it
    grouped = x.reshape(x.shape[0], self._groups(), -1)
    return grouped.layernorm(eps=self.eps).reshape(x.shape)

class GroupNorm(_GroupedNorm):
  """num_groups groups of num_channels // num_groups channels each."""
  def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True):
    if num_channels % num_groups: raise ValueError(f"GroupNorm: {num_channels} channels do not divide into {num_groups} groups")
    self.num_groups, self.num_channels, self.eps = num_groups, num_channels, eps
    self.weight, self.bias = _affine_params((num_channels,), affine)
  def _groups(self) -> int: return self.num_groups

class InstanceNorm(_GroupedNorm):
  """Every channel is a group of its own."""
  def __init__(self, num_features: int, eps: float = 1e-5, affine: bool = True):
    self.num_features, self.eps = num_features, eps
    self.weight, self.bias = _affine_params((num_features,), affine)
  def _groups(self) -> int: return self.num_features

class LayerNorm(_Norm):
  """Normalize over the last len(normalized_shape) dims, then scale and shift elementwise."""
  def __init__(self, normalized_shape: int | Sequence[int], eps: float = 1e-5, elementwise_affine: bool = True):
    dims: tuple[int, ...] = make_tuple(normalized_shape, 1)
    self.normalized_shape, self.eps, self.elementwise_affine = dims, eps, elementwise_affine
    self.axis = tuple(-d for d in range(1, len(dims) + 1))  # -1, -2, ...: the normalized dims, innermost first
    self.weight, self.bias = _affine_params(dims, elementwise_affine)
  def _normalize(self, x: Tensor) -> Tensor:
    if x.shape[-len(self.axis):] != self.normalized_shape:  # one axis per normalized dim
      raise ValueError(f"LayerNorm: last dims of input {x.shape} must be {self.normalized_shape}")
    return x.layernorm(eps=self.eps, axis=self.axis)

class LayerNorm2d(LayerNorm):
  """LayerNorm over the channel dim of an NCHW tensor: channels moved last, normalized, moved back."""
  _CHANNELS_LAST, _CHANNELS_FIRST = (0, 2, 3, 1), (0, 3, 1, 2)
  def __call__(self, x: Tensor) -> Tensor:
    normed = super().__call__(x.permute(self._CHANNELS_LAST))
    return normed.permute(self._CHANNELS_FIRST)

class RMSNorm:
  """x / sqrt(mean(x^2) + eps) * weight over the last dim, computed in float32 and cast back."""
  def __init__(self, dim: int, eps: float = 1e-6):
    self.eps, self.weight = eps, Tensor.ones(dim)
  def _norm(self, x: Tensor) -> Tensor:
    mean_square = x.square().mean(-1, keepdim=True)
    return x * (mean_square + self.eps).rsqrt()
  def __call__(self, x: Tensor) -> Tensor:
    in_dtype = x.dtype
    return self._norm(x.float()).cast(in_dtype) * self.weight

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
