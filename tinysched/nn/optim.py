"""Optimizers that update parameters in place through Tensor.assign, following tinygrad's `nn.optim`.

`step()` builds the update of every parameter and optimizer state as lazy assigns and realizes them together, so one
step is one schedule. The learning rate is a realized 1-element Tensor (`opt.lr`): changing it with
`opt.lr.assign(Tensor([new_lr]))` (or setting a float) does not change the kernels.
"""
from __future__ import annotations
from tinysched.tensor import Tensor
import numpy as np
from tinysched.dtype import DType, dtypes

class Optimizer:
  def __init__(self, params: list[Tensor], lr: float):
    # like tinygrad: parameters whose requires_grad is unset become trainable
    for x in params:
      if x.requires_grad is None: x.requires_grad = True
    self.params: list[Tensor] = _dedup_tensors([x for x in params if x.requires_grad])
    if not self.params: raise ValueError("optimizer needs at least one parameter that requires grad")
    self.device = self.params[0].device
    self.buffers: list[Tensor] = _dedup_tensors([x for x in params if not x.requires_grad])  # realized with the step, not updated
    self.lr: Tensor | float = _state_buffer((1,), dtypes.float32, self.device, lr)
  def _lr(self) -> Tensor:
    """The learning rate as a 0-d Tensor (a view of the realized buffer, or a constant if the user set a float)."""
    return self.lr.reshape(()) if isinstance(self.lr, Tensor) else Tensor(float(self.lr), device=self.device, requires_grad=False)
  def zero_grad(self) -> None:
    for p in self.params: p.grad = None
  def step(self) -> None:
    """Apply one update to every parameter and optimizer state, realized as one schedule."""
    Tensor.realize(*self.schedule_step())
  def schedule_step(self) -> list[Tensor]:
    """The updated tensors (lazy assigns) of one step, for a caller that realizes them with other work."""
    if not Tensor.training:
      raise RuntimeError("optimizer step needs Tensor.training = True (set it, or use `with Tensor.train():`), like tinygrad")
    for i, p in enumerate(self.params):
      if p.grad is None: raise RuntimeError(f"parameter {i} (shape {p.shape}) has no gradient: call backward() on a loss that uses it")
    return self._step() + self.params + self.buffers
  def _step(self) -> list[Tensor]: raise NotImplementedError

class OptimizerGroup(Optimizer):
  """Several optimizers stepped together (e.g. different learning rates per parameter group)."""
  def __init__(self, *optimizers: Optimizer):
    self.optimizers = optimizers
    self.params, self.buffers = [x for o in optimizers for x in o.params], [x for o in optimizers for x in o.buffers]
  def __getitem__(self, i: int) -> Optimizer: return self.optimizers[i]
  def zero_grad(self) -> None:
    for o in self.optimizers: o.zero_grad()
  def _step(self) -> list[Tensor]: return [x for o in self.optimizers for x in o._step()]

class SGD(Optimizer):
  """SGD with optional momentum (torch's form: b = momentum*b + g), Nesterov momentum and L2 weight decay."""
  def __init__(self, params: list[Tensor], lr: float = 0.001, momentum: float = 0.0, weight_decay: float = 0.0, nesterov: bool = False):
    super().__init__(params, lr)
    if nesterov and momentum <= 0: raise ValueError("nesterov momentum needs momentum > 0")
    self.momentum, self.wd, self.nesterov = momentum, weight_decay, nesterov
    self.b = [_state_buffer(t.shape, t.dtype, t.device) for t in self.params] if momentum else []
  def _step(self) -> list[Tensor]:
    lr = self._lr()
    for i, t in enumerate(self.params):
      assert t.grad is not None
      g = t.grad + self.wd * t.detach() if self.wd else t.grad
      if self.momentum:
        self.b[i].assign((self.momentum * self.b[i] + g).cast(self.b[i].dtype))
        g = (g + self.momentum * self.b[i]) if self.nesterov else self.b[i]
      t.assign((t.detach() - g * lr).cast(t.dtype))
    return self.b

class LAMB(Optimizer):
  """LAMB (layer-wise trust ratio on top of Adam); with adam=True it is AdamW (decoupled weight decay), like tinygrad.

  m and v live in float32 whatever the parameter dtype; b1_t/b2_t hold b1^t and b2^t for the bias correction.
  """
  def __init__(self, params: list[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-6,
               weight_decay: float = 0.0, adam: bool = False):
    super().__init__(params, lr)
    self.b1, self.b2, self.eps, self.wd, self.adam = b1, b2, eps, weight_decay, adam
    self.b1_t, self.b2_t = (_state_buffer((1,), dtypes.float32, self.device, 1.0) for _ in (b1, b2))
    self.m = [_state_buffer(t.shape, dtypes.float32, t.device) for t in self.params]
    self.v = [_state_buffer(t.shape, dtypes.float32, t.device) for t in self.params]
  def _step(self) -> list[Tensor]:
    self.b1_t.assign(self.b1_t * self.b1)
    self.b2_t.assign(self.b2_t * self.b2)
    lr = self._lr()
    b1_t, b2_t = self.b1_t.reshape(()), self.b2_t.reshape(())
    for i, t in enumerate(self.params):
      assert t.grad is not None
      g = t.grad.float()
      self.m[i].assign(self.b1 * self.m[i] + (1.0 - self.b1) * g)
      self.v[i].assign(self.b2 * self.v[i] + (1.0 - self.b2) * (g * g))
      m_hat = self.m[i] / (1.0 - b1_t)
      v_hat = self.v[i] / (1.0 - b2_t)
      up = (m_hat / (v_hat.sqrt() + self.eps)) + self.wd * t.detach().float()
      if not self.adam:
        r1 = t.detach().float().square().sum().sqrt()
        r2 = up.square().sum().sqrt()
        r: Tensor | float = (r1 > 0).where((r2 > 0).where(r1 / r2, 1.0), 1.0)
      else: r = 1.0
      t.assign((t.detach() - lr * r * up).cast(t.dtype))
    return [self.b1_t, self.b2_t] + self.m + self.v

def AdamW(params: list[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8, weight_decay: float = 0.01) -> LAMB:
  """Adam with decoupled weight decay: p -= lr * (m_hat / (sqrt(v_hat) + eps) + wd * p), the same as torch.optim.AdamW."""
  return LAMB(params, lr, b1, b2, eps, weight_decay, adam=True)
def Adam(params: list[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8) -> LAMB:
  return LAMB(params, lr, b1, b2, eps, 0.0, adam=True)

def _state_buffer(shape: tuple, dtype: DType, device: str, fill: float = 0.0) -> Tensor:
  """A realized buffer of its own (from host memory), so every step updates it in place.

  Not `Tensor.zeros(...).contiguous()`: the lazy graph shares equal nodes, so two of those would alias one buffer."""
  return Tensor(np.full(shape, fill, dtype=dtype.np), device=device, requires_grad=False)

def _dedup_tensors(ts: list[Tensor]) -> list[Tensor]:
  # Tensor.__eq__ is elementwise, so dedup by identity
  return list({id(t): t for t in ts}.values())

__all__ = ["Optimizer", "OptimizerGroup", "SGD", "LAMB", "AdamW", "Adam"]
