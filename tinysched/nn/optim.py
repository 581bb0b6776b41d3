"""Optimizers that update parameters in place through Tensor.assign, following tinygrad's `nn.optim`.

`step()` builds the update of every parameter and optimizer state as lazy assigns and realizes them together, so one
step is one schedule. The learning rate is a realized 1-element Tensor (`opt.lr`): changing it with
`opt.lr.assign(Tensor([new_lr]))` (or setting a float) does not change the kernels.
"""
from __future__ import annotations
import numpy as np
from tinysched.tensor import Tensor
from tinysched.dtype import DType, dtypes

class Optimizer:
  def __init__(self, params: list[Tensor], lr: float):
    trainable, frozen = _split_trainable(params)
    if not trainable: raise ValueError("optimizer needs at least one parameter that requires grad")
    self.params: list[Tensor] = trainable
    self.device = trainable[0].device
    self.buffers: list[Tensor] = frozen  # realized with the step, not updated
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
    self.params: list[Tensor] = []
    self.buffers: list[Tensor] = []
    for o in optimizers:
      self.params += o.params
      self.buffers += o.buffers
  def __getitem__(self, i: int) -> Optimizer: return self.optimizers[i]
  def zero_grad(self) -> None:
    for o in self.optimizers: o.zero_grad()
  def _step(self) -> list[Tensor]:
    states: list[Tensor] = []
    for o in self.optimizers: states.extend(o._step())
    return states

class SGD(Optimizer):
  """SGD with optional momentum (torch's form: b = momentum*b + g), Nesterov momentum and L2 weight decay."""
  def __init__(self, params: list[Tensor], lr: float = 0.001, momentum: float = 0.0, weight_decay: float = 0.0, nesterov: bool = False):
    super().__init__(params, lr)
    if nesterov and momentum <= 0: raise ValueError("nesterov momentum needs momentum > 0")
    self.wd, self.momentum, self.nesterov = weight_decay, momentum, nesterov
    self.b: list[Tensor] = []  # with momentum: one buffer per parameter, in its dtype
    if momentum: self.b = [_state_buffer(p.shape, p.dtype, p.device) for p in self.params]
  def _step(self) -> list[Tensor]:
    lr = self._lr()
    for i, p in enumerate(self.params):
      direction = self._direction(i, p)
      p.assign((p.detach() - direction * lr).cast(p.dtype))
    return self.b
  def _direction(self, i: int, p: Tensor) -> Tensor:
    """Where parameter i moves (before the learning rate): its gradient plus L2 decay, through the momentum buffer
    (updated here) when there is one, and with Nesterov's look-ahead when asked."""
    assert p.grad is not None
    g = p.grad + self.wd * p.detach() if self.wd else p.grad
    if not self.momentum: return g
    buf = self.b[i]
    buf.assign((self.momentum * buf + g).cast(buf.dtype))
    return g + self.momentum * buf if self.nesterov else buf

class LAMB(Optimizer):
  """LAMB (layer-wise trust ratio on top of Adam); with adam=True it is AdamW (decoupled weight decay), like tinygrad.

  m and v live in float32 whatever the parameter dtype; b1_t/b2_t hold b1^t and b2^t for the bias correction.
  Per parameter p with gradient g, at step t:
    m = b1*m + (1-b1)*g,  v = b2*v + (1-b2)*g^2          (the moment estimates, updated in place)
    u = (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps) + wd*p    (the Adam direction with decoupled decay)
    p -= lr * r * u,  r = ||p|| / ||u|| (1 where either norm is 0) for LAMB, r = 1 for Adam
  """
  def __init__(self, params: list[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-6,
               weight_decay: float = 0.0, adam: bool = False):
    super().__init__(params, lr)
    self.b1, self.b2, self.eps, self.wd, self.adam = b1, b2, eps, weight_decay, adam
    self.b1_t, self.b2_t = self._power(), self._power()
    self.m, self.v = self._moment(), self._moment()
  def _power(self) -> Tensor: return _state_buffer((1,), dtypes.float32, self.device, 1.0)  # b^t, from t = 0
  def _moment(self) -> list[Tensor]: return [_state_buffer(p.shape, dtypes.float32, p.device) for p in self.params]
  def _step(self) -> list[Tensor]:
    for power, beta in ((self.b1_t, self.b1), (self.b2_t, self.b2)): power.assign(power * beta)
    lr = self._lr()
    c1, c2 = (1.0 - self.b1_t.reshape(())), (1.0 - self.b2_t.reshape(()))  # bias corrections 1 - b^t
    for p, m, v in zip(self.params, self.m, self.v):
      assert p.grad is not None
      g = p.grad.float()
      _ema(m, self.b1, g)
      _ema(v, self.b2, g * g)
      u = self._adam_direction(p, m / c1, v / c2)
      ratio: Tensor | float = 1.0 if self.adam else _trust_ratio(p, u)
      p.assign((p.detach() - lr * ratio * u).cast(p.dtype))
    return [self.b1_t, self.b2_t] + self.m + self.v
  def _adam_direction(self, p: Tensor, m_hat: Tensor, v_hat: Tensor) -> Tensor:
    u = m_hat / (v_hat.sqrt() + self.eps)
    return u + self.wd * p.detach().float() if self.wd else u  # 0 * p is not folded for floats (inf * 0 is nan)

def _ema(state: Tensor, beta: float, x: Tensor) -> None:
  """state = beta * state + (1 - beta) * x, in place."""
  state.assign(beta * state + (1.0 - beta) * x)

def _trust_ratio(p: Tensor, u: Tensor) -> Tensor:
  """LAMB's layer-wise scale ||p|| / ||u||: 1 where either norm is 0 (a fresh zero layer, or no update)."""
  p_norm, u_norm = p.detach().float().square().sum().sqrt(), u.square().sum().sqrt()
  return (p_norm > 0).where((u_norm > 0).where(p_norm / u_norm, 1.0), 1.0)

def AdamW(params: list[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8, weight_decay: float = 0.01) -> LAMB:
  """Adam with decoupled weight decay: p -= lr * (m_hat / (sqrt(v_hat) + eps) + wd * p), the same as torch.optim.AdamW."""
  return LAMB(params, lr, b1, b2, eps, weight_decay, adam=True)
def Adam(params: list[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8) -> LAMB:
  return LAMB(params, lr, b1, b2, eps, 0.0, adam=True)

def _state_buffer(shape: tuple, dtype: DType, device: str, fill: float = 0.0) -> Tensor:
  """A realized buffer of its own (from host memory), so every step updates it in place.

  Not `Tensor.zeros(...).contiguous()`: the lazy graph shares equal nodes, so two of those would alias one buffer."""
  return Tensor(np.full(shape, fill, dtype=dtype.np), device=device, requires_grad=False)

def _split_trainable(params: list[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
  """(trainable, frozen), each without repeats, in first-seen order. Like tinygrad, a parameter whose requires_grad
  is unset becomes trainable."""
  for p in params:
    if p.requires_grad is None: p.requires_grad = True
  return _dedup_tensors([p for p in params if p.requires_grad]), _dedup_tensors([p for p in params if not p.requires_grad])

def _dedup_tensors(ts: list[Tensor]) -> list[Tensor]:
  # Tensor.__eq__ is elementwise, so dedup by identity
  return list({id(t): t for t in ts}.values())

__all__ = ["Optimizer", "OptimizerGroup", "SGD", "LAMB", "AdamW", "Adam"]
