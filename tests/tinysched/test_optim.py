"""Optimizers against pure-numpy reference implementations (always) and torch.optim (when installed)."""
from __future__ import annotations
import numpy as np
import pytest
from tinysched import Tensor, dtypes, nn
from tinysched.nn.optim import SGD, Adam, AdamW, LAMB, OptimizerGroup
from tinysched.nn.state import get_parameters
from tests.helpers import rand, assert_close, torch, needs_torch

@pytest.fixture(autouse=True)
def training():
  with Tensor.train(): yield

# loss(p) = sum(c * p + d * p^2): gradient c + 2 d p, easy to write in numpy
C_, D_ = rand(3, 4, seed=1), rand(3, 4, seed=2, low=0.1, high=1.0)

def _loss(p: Tensor) -> Tensor: return (p * Tensor(C_) + p * p * Tensor(D_)).sum()
def _np_grad(p: np.ndarray) -> np.ndarray: return C_ + 2 * D_ * p

def np_sgd(p, steps, lr, momentum=0.0, wd=0.0, nesterov=False):
  b = np.zeros_like(p)
  for _ in range(steps):
    g = _np_grad(p) + wd * p
    if momentum:
      b = momentum * b + g
      g = g + momentum * b if nesterov else b
    p = p - lr * g
  return p

def np_adam(p, steps, lr, b1=0.9, b2=0.999, eps=1e-8, wd=0.0, lamb=False):
  m, v = np.zeros_like(p), np.zeros_like(p)
  for t in range(1, steps + 1):
    g = _np_grad(p)
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    up = (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps) + wd * p
    r = 1.0
    if lamb:
      r1, r2 = np.sqrt((p * p).sum()), np.sqrt((up * up).sum())
      r = r1 / r2 if r1 > 0 and r2 > 0 else 1.0
    p = p - lr * r * up
  return p

def _run(make_opt, steps: int = 3, p0: np.ndarray | None = None, dtype=np.float32) -> Tensor:
  p = Tensor((rand(3, 4, seed=3) if p0 is None else p0).astype(dtype), requires_grad=True)
  opt = make_opt([p])
  for _ in range(steps):
    opt.zero_grad()
    _loss(p).backward()
    opt.step()
  return p

@pytest.mark.parametrize("kw", [dict(), dict(momentum=0.9), dict(momentum=0.9, nesterov=True), dict(weight_decay=0.1),
                                dict(momentum=0.5, weight_decay=0.01, nesterov=True)])
def test_sgd_numpy(kw):
  p = _run(lambda ps: SGD(ps, lr=0.05, **kw))
  assert_close(p, np_sgd(rand(3, 4, seed=3), 3, 0.05, kw.get("momentum", 0.0), kw.get("weight_decay", 0.0), kw.get("nesterov", False)),
               atol=1e-5, rtol=1e-5)

@pytest.mark.parametrize("name,make,ref", [
  ("adam", lambda ps: Adam(ps, lr=0.1), lambda p: np_adam(p, 3, 0.1)),
  ("adam_betas", lambda ps: Adam(ps, lr=0.01, b1=0.8, b2=0.9, eps=1e-6), lambda p: np_adam(p, 3, 0.01, 0.8, 0.9, 1e-6)),
  ("adamw", lambda ps: AdamW(ps, lr=0.1, weight_decay=0.1), lambda p: np_adam(p, 3, 0.1, wd=0.1)),
  ("lamb", lambda ps: LAMB(ps, lr=0.1, weight_decay=0.01), lambda p: np_adam(p, 3, 0.1, eps=1e-6, wd=0.01, lamb=True))])
def test_adam_family_numpy(name, make, ref):
  assert_close(_run(make), ref(rand(3, 4, seed=3)), atol=1e-5, rtol=1e-5)

def test_updates_are_in_place():
  p = Tensor(rand(3, 4, seed=3), requires_grad=True).realize()
  opt = Adam([p], lr=0.1)
  buf, m_buf = p.lazydata.base.buffer, opt.m[0].lazydata.base.buffer
  for _ in range(2):
    opt.zero_grad(); _loss(p).backward(); opt.step()
    assert p.lazydata.base.buffer is buf and opt.m[0].lazydata.base.buffer is m_buf
    assert p.lazydata.is_realized
  # every state tensor has a buffer of its own
  bufs = [t.lazydata.base.buffer for t in [opt.b1_t, opt.b2_t, *opt.m, *opt.v]]
  assert len({id(b) for b in bufs}) == len(bufs)

def test_learning_rate_changes():
  p_ref = np_sgd(rand(3, 4, seed=3), 1, 0.1)
  p = Tensor(rand(3, 4, seed=3), requires_grad=True)
  opt = SGD([p], lr=0.5)
  opt.lr.assign(Tensor([0.1]))  # the learning rate is a realized tensor
  opt.zero_grad(); _loss(p).backward(); opt.step()
  assert_close(p, p_ref, atol=1e-6)
  opt.lr = 0.2  # a float works too
  opt.zero_grad(); _loss(p).backward(); opt.step()
  assert_close(p, p_ref - 0.2 * _np_grad(p_ref), atol=1e-5)

def test_half_params_keep_dtype():
  p = _run(lambda ps: Adam(ps, lr=0.01), dtype=np.float16)
  assert p.dtype == dtypes.float16
  assert_close(p, np_adam(rand(3, 4, seed=3).astype(np.float16).astype(np.float32), 3, 0.01), atol=5e-3)

def test_optimizer_bookkeeping_and_errors():
  a, b = Tensor([1.0, 2.0]), Tensor([3.0], requires_grad=False)
  opt = SGD([a, b, a], lr=0.1)
  assert a.requires_grad is True and opt.params == [a] and opt.buffers == [b]  # unset requires_grad becomes True; dedup
  with pytest.raises(RuntimeError, match=r"parameter 0 \(shape \(2,\)\) has no gradient"): opt.step()
  (a * a).sum().backward()
  opt.zero_grad()
  assert a.grad is None
  (a * a).sum().backward()
  with Tensor.train(False):
    with pytest.raises(RuntimeError, match="Tensor.training"): opt.step()
  opt.step()
  assert_close(a, np.array([0.8, 1.6], np.float32))
  with pytest.raises(ValueError, match="at least one parameter"): Adam([Tensor([1.0], requires_grad=False)])
  with pytest.raises(ValueError, match="nesterov"): SGD([Tensor([1.0])], nesterov=True)

def test_optimizer_group():
  p1, p2 = Tensor(rand(3, 4, seed=3), requires_grad=True), Tensor(rand(3, 4, seed=3), requires_grad=True)
  opt = OptimizerGroup(SGD([p1], lr=0.05), Adam([p2], lr=0.1))
  for _ in range(3):
    opt.zero_grad(); (_loss(p1) + _loss(p2)).backward(); opt.step()
  assert_close(p1, np_sgd(rand(3, 4, seed=3), 3, 0.05), atol=1e-5)
  assert_close(p2, np_adam(rand(3, 4, seed=3), 3, 0.1), atol=1e-5)
  assert isinstance(opt[0], SGD)

# *** an MLP trained with Adam for 3 steps: numpy reference (manual backprop) ***

class MLP:
  def __init__(self):
    self.l1, self.l2 = nn.Linear(4, 8), nn.Linear(8, 3)
  def __call__(self, x: Tensor) -> Tensor: return self.l2(self.l1(x).relu())

def _np_mlp_adam(params: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray, steps: int, lr: float) -> tuple[list[float], dict]:
  p = {k: v.astype(np.float64) for k, v in params.items()}
  m = {k: np.zeros_like(v) for k, v in p.items()}
  v = {k: np.zeros_like(v) for k, v in p.items()}
  losses = []
  for t in range(1, steps + 1):
    h_pre = x @ p["l1.weight"].T + p["l1.bias"]
    h = np.maximum(h_pre, 0)
    out = h @ p["l2.weight"].T + p["l2.bias"]
    diff = out - y
    losses.append(float((diff ** 2).mean()))
    d_out = 2 * diff / diff.size
    g = {"l2.weight": d_out.T @ h, "l2.bias": d_out.sum(0)}
    d_h = (d_out @ p["l2.weight"]) * (h_pre > 0)
    g["l1.weight"], g["l1.bias"] = d_h.T @ x, d_h.sum(0)
    for k in p:
      m[k] = 0.9 * m[k] + 0.1 * g[k]
      v[k] = 0.999 * v[k] + 0.001 * g[k] ** 2
      p[k] = p[k] - lr * (m[k] / (1 - 0.9 ** t)) / (np.sqrt(v[k] / (1 - 0.999 ** t)) + 1e-8)
  return losses, p

def test_mlp_adam_three_steps_numpy():
  Tensor.manual_seed(7)
  model = MLP()
  from tinysched.nn.state import get_state_dict
  init = {k: t.numpy() for k, t in get_state_dict(model).items()}
  x, y = rand(6, 4, seed=11), rand(6, 3, seed=12)
  opt = Adam(get_parameters(model), lr=0.01)
  losses = []
  for _ in range(3):
    opt.zero_grad()
    loss = ((model(Tensor(x)) - Tensor(y)) ** 2).mean()
    loss.backward()
    # realized with the step: the scheduler runs the loss kernel before the assigns overwrite the weights
    # (left lazy until after step(), the loss would read the updated weights, as in tinygrad)
    Tensor.realize(loss, *opt.schedule_step())
    losses.append(loss.item())
  want_losses, want_p = _np_mlp_adam(init, x, y, 3, 0.01)
  np.testing.assert_allclose(losses, want_losses, rtol=1e-5)
  assert losses[2] < losses[0]
  for k, t in get_state_dict(model).items(): assert_close(t, want_p[k], atol=1e-5, rtol=1e-4)

# *** torch ***

@needs_torch
@pytest.mark.parametrize("name", ["sgd", "sgd_momentum", "sgd_nesterov_wd", "adam", "adamw"])
def test_vs_torch_optim(name):
  mine = {"sgd": lambda ps: SGD(ps, lr=0.05), "sgd_momentum": lambda ps: SGD(ps, lr=0.05, momentum=0.9),
          "sgd_nesterov_wd": lambda ps: SGD(ps, lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.05),
          "adam": lambda ps: Adam(ps, lr=0.1), "adamw": lambda ps: AdamW(ps, lr=0.1, weight_decay=0.05)}[name]
  ref = {"sgd": lambda ps: torch.optim.SGD(ps, lr=0.05), "sgd_momentum": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9),
         "sgd_nesterov_wd": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.05),
         "adam": lambda ps: torch.optim.Adam(ps, lr=0.1), "adamw": lambda ps: torch.optim.AdamW(ps, lr=0.1, weight_decay=0.05)}[name]
  p = _run(mine)
  tp = torch.tensor(rand(3, 4, seed=3), requires_grad=True)
  topt = ref([tp])
  for _ in range(3):
    topt.zero_grad()
    (tp * torch.tensor(C_) + tp * tp * torch.tensor(D_)).sum().backward()
    topt.step()
  assert_close(p, tp, atol=1e-5, rtol=1e-5)

@needs_torch
def test_mlp_adamw_vs_torch():
  Tensor.manual_seed(1)
  model = MLP()
  tmodel = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
  with torch.no_grad():
    for tl, l in [(tmodel[0], model.l1), (tmodel[2], model.l2)]:
      tl.weight.copy_(torch.tensor(l.weight.numpy())); tl.bias.copy_(torch.tensor(l.bias.numpy()))
  opt, topt = AdamW(get_parameters(model), lr=0.01, weight_decay=0.1), torch.optim.AdamW(tmodel.parameters(), lr=0.01, weight_decay=0.1)
  x, y = rand(6, 4, seed=11), np.array([0, 2, 1, 1, 0, 2], np.int32)
  for _ in range(3):
    opt.zero_grad(); topt.zero_grad()
    loss = model(Tensor(x)).sparse_categorical_crossentropy(Tensor(y))
    tloss = torch.nn.functional.cross_entropy(tmodel(torch.tensor(x)), torch.tensor(y, dtype=torch.long))
    loss.backward(); tloss.backward()
    loss.realize()
    opt.step(); topt.step()
    assert abs(loss.item() - tloss.item()) < 1e-5
  assert_close(model.l1.weight, tmodel[0].weight, atol=1e-5)
  assert_close(model.l2.bias, tmodel[2].bias, atol=1e-5)

@needs_torch
def test_cnn_training_steps_vs_torch():
  """conv -> batchnorm -> relu -> maxpool -> linear, SGD with momentum: losses, weights and running stats over 3 steps."""
  Tensor.manual_seed(2)
  conv, bn, fc = nn.Conv2d(2, 4, 3, padding=1), nn.BatchNorm2d(4), nn.Linear(16, 3)
  tconv, tbn, tfc = torch.nn.Conv2d(2, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.Linear(16, 3)
  with torch.no_grad():
    for mine, ref in [(conv, tconv), (fc, tfc)]:
      ref.weight.copy_(torch.tensor(mine.weight.numpy())); ref.bias.copy_(torch.tensor(mine.bias.numpy()))
  params = get_parameters([conv, bn, fc])
  opt = SGD(params, lr=0.1, momentum=0.9)
  assert len(opt.buffers) == 3  # running_mean, running_var, num_batches_tracked: realized with every step
  topt = torch.optim.SGD([*tconv.parameters(), *tbn.parameters(), *tfc.parameters()], lr=0.1, momentum=0.9)
  def fwd(x): return fc(bn(conv(x)).relu().max_pool2d(2).flatten(1))
  def tfwd(x): return tfc(torch.nn.functional.max_pool2d(torch.relu(tbn(tconv(x))), 2).flatten(1))
  for step in range(3):
    x, y = rand(3, 2, 4, 4, seed=20 + step), np.array([0, 2, 1], np.int32)
    opt.zero_grad(); topt.zero_grad()
    loss = fwd(Tensor(x)).sparse_categorical_crossentropy(Tensor(y))
    tloss = torch.nn.functional.cross_entropy(tfwd(torch.tensor(x)), torch.tensor(y, dtype=torch.long))
    loss.backward(); tloss.backward()
    Tensor.realize(loss, *opt.schedule_step())
    topt.step()
    assert abs(loss.item() - tloss.item()) < 1e-5, step
  assert_close(conv.weight, tconv.weight, atol=1e-5)
  assert_close(fc.bias, tfc.bias, atol=1e-5)
  assert_close(bn.running_var, tbn.running_var, atol=1e-5)
  assert_close(bn.weight, tbn.weight, atol=1e-5)
