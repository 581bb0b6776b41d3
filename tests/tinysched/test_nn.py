"""nn layers against numpy references (always) and torch.nn (when installed): outputs, gradients, running statistics."""
from __future__ import annotations
import math
import numpy as np
import pytest
from tinysched import Tensor, dtypes, nn
from tinysched.nn.state import get_state_dict
from tests.helpers import rand, assert_close, torch, needs_torch

# *** numpy references ***

def test_linear_numpy_and_init():
  lin = nn.Linear(6, 3)
  assert lin.weight.shape == (3, 6) and lin.bias is not None and lin.bias.shape == (3,)
  w, b = lin.weight.numpy(), lin.bias.numpy()
  bound = 1 / math.sqrt(6)
  assert np.abs(w).max() <= bound and np.abs(b).max() <= bound and w.std() > bound / 4  # uniform(-bound, bound)
  x = rand(4, 6)
  assert_close(lin(Tensor(x)), x @ w.T + b, atol=1e-5)
  assert nn.Linear(6, 3, bias=False).bias is None
  assert nn.Linear(2, 4)(Tensor(rand(5, 3, 2))).shape == (5, 3, 4)
  with pytest.raises(ValueError, match=r"\(4, 5\) has 5 features.*expects 6"): lin(Tensor(rand(4, 5)))

def test_conv2d_init_shapes():
  c = nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2)
  assert c.weight.shape == (6, 2, 3, 3) and c.bias.shape == (6,)
  bound = 1 / math.sqrt(2 * 9)  # kaiming_uniform(a=sqrt(5)) gives the same bound as the bias: 1/sqrt(fan_in)
  assert np.abs(c.weight.numpy()).max() <= bound + 1e-6 and np.abs(c.bias.numpy()).max() <= bound
  assert c(Tensor(rand(2, 4, 7, 7))).shape == (2, 6, 4, 4)
  assert nn.Conv2d(3, 5, (3, 1), padding="same")(Tensor(rand(1, 3, 6, 5))).shape == (1, 5, 6, 5)
  assert nn.Conv2d(3, 5, 4, padding="same", dilation=2)(Tensor(rand(1, 3, 6, 5))).shape == (1, 5, 6, 5)
  assert nn.Conv1d(3, 2, 3)(Tensor(rand(2, 3, 8))).shape == (2, 2, 6)
  assert nn.ConvTranspose2d(3, 4, 3, stride=2)(Tensor(rand(1, 3, 4, 4))).shape == (1, 4, 9, 9)
  with pytest.raises(ValueError, match="divide by groups"): nn.Conv2d(3, 6, 3, groups=2)
  with pytest.raises(ValueError, match="'same'"): nn.Conv2d(3, 6, 3, padding="valid")

def test_layernorm_rmsnorm_groupnorm_numpy():
  x = rand(2, 3, 4)
  ln = nn.LayerNorm(4)
  ln.weight, ln.bias = Tensor(rand(4, seed=1)), Tensor(rand(4, seed=2))
  m, v = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
  assert_close(ln(Tensor(x)), (x - m) / np.sqrt(v + 1e-5) * ln.weight.numpy() + ln.bias.numpy(), atol=1e-5)
  ln2 = nn.LayerNorm((3, 4), elementwise_affine=False)
  m2, v2 = x.mean((1, 2), keepdims=True), x.var((1, 2), keepdims=True)
  assert_close(ln2(Tensor(x)), (x - m2) / np.sqrt(v2 + 1e-5), atol=1e-5)
  assert ln2.weight is None and list(get_state_dict(ln2)) == []
  with pytest.raises(ValueError, match=r"\(3, 4\)"): ln2(Tensor(rand(2, 4, 3)))
  rms = nn.RMSNorm(4, eps=1e-6)
  rms.weight = Tensor(rand(4, seed=3))
  assert_close(rms(Tensor(x)), x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) * rms.weight.numpy(), atol=1e-5)
  xh = rand(2, 4, dtype=np.float16)
  rh = nn.RMSNorm(4)
  assert rh(Tensor(xh)).dtype == dtypes.float32  # the float32 weight promotes, like tinygrad
  rh.weight = rh.weight.half()
  out = rh(Tensor(xh))
  assert out.dtype == dtypes.float16  # normalized in float32, cast back
  assert_close(out, xh / np.sqrt((xh.astype(np.float32) ** 2).mean(-1, keepdims=True) + 1e-6), atol=1e-2)
  gn = nn.GroupNorm(2, 4)
  xg = rand(2, 4, 3, 3)
  g = xg.reshape(2, 2, -1)
  want = ((g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + 1e-5)).reshape(xg.shape)
  assert_close(gn(Tensor(xg)), want, atol=1e-5)
  with pytest.raises(ValueError, match="divide"): nn.GroupNorm(3, 4)

def test_embedding_numpy_and_grad():
  emb = nn.Embedding(5, 3)
  w = emb.weight.numpy()
  assert w.shape == (5, 3) and np.abs(w).max() <= math.sqrt(6 / 8)  # glorot_uniform
  idx = np.array([[0, 4, 4], [2, 1, 0]], np.int32)
  assert_close(emb(Tensor(idx)), w[idx])
  emb.weight.requires_grad = True
  (emb(Tensor(idx)) * Tensor(rand(2, 3, 3))).sum().backward()
  want = np.zeros((5, 3), np.float32)
  np.add.at(want, idx, rand(2, 3, 3))  # repeated indices accumulate
  assert_close(emb.weight.grad, want, atol=1e-6)
  assert list(get_state_dict(emb)) == ["weight"]  # nothing cached on the layer
  with pytest.raises(TypeError, match="int tensor"): emb(Tensor([0.0, 1.0]))

def test_batchnorm_train_eval_numpy():
  bn = nn.BatchNorm2d(3, momentum=0.1)
  x = rand(4, 3, 2, 2)
  bn.weight, bn.bias = Tensor(rand(3, seed=1)), Tensor(rand(3, seed=2))
  w, b = bn.weight.numpy().reshape(1, 3, 1, 1), bn.bias.numpy().reshape(1, 3, 1, 1)
  mean, var = x.mean((0, 2, 3)), x.var((0, 2, 3))
  with Tensor.train():
    out = bn(Tensor(x))
    Tensor.realize(out, bn.running_mean, bn.running_var, bn.num_batches_tracked)
  assert_close(out, (x - mean.reshape(1, 3, 1, 1)) / np.sqrt(var.reshape(1, 3, 1, 1) + 1e-5) * w + b, atol=1e-5)
  assert_close(bn.running_mean, 0.1 * mean, atol=1e-6)
  assert_close(bn.running_var, 0.9 + 0.1 * x.var((0, 2, 3), ddof=1), atol=1e-6)
  assert bn.num_batches_tracked.tolist() == [1]
  # second step: the running stats are realized now, so they update in place
  buf = bn.running_mean.lazydata.base.buffer
  with Tensor.train():
    Tensor.realize(bn(Tensor(x * 2)), bn.running_mean, bn.running_var)
  assert bn.running_mean.lazydata.base.buffer is buf
  assert_close(bn.running_mean, 0.9 * 0.1 * mean + 0.1 * 2 * mean, atol=1e-6)
  # eval: the running statistics
  rm, rv = bn.running_mean.numpy().reshape(1, 3, 1, 1), bn.running_var.numpy().reshape(1, 3, 1, 1)
  assert_close(bn(Tensor(x)), (x - rm) / np.sqrt(rv + 1e-5) * w + b, atol=1e-5)
  # without running stats: batch statistics always, nothing to update
  bn2 = nn.BatchNorm(3, affine=False, track_running_stats=False)
  assert bn2.weight is None and not hasattr(bn2, "running_mean")
  assert_close(bn2(Tensor(x)), (x - mean.reshape(1, 3, 1, 1)) / np.sqrt(var.reshape(1, 3, 1, 1) + 1e-5), atol=1e-5)
  bn1 = nn.BatchNorm1d(3)
  x2 = x[:, :, 0, 0]
  with Tensor.train(): assert_close(bn1(Tensor(x2)), (x2 - x2.mean(0)) / np.sqrt(x2.var(0) + 1e-5), atol=1e-5)

def test_state_dict_names_of_layers():
  bn = nn.BatchNorm(2)
  assert list(get_state_dict(bn)) == ["weight", "bias", "num_batches_tracked", "running_mean", "running_var"]
  assert list(get_state_dict(nn.Conv2d(1, 1, 1))) == ["weight", "bias"]

# *** torch ***

def _copy(t: torch.Tensor) -> Tensor: return Tensor(t.detach().numpy().copy(), requires_grad=True)

@needs_torch
def test_linear_conv_vs_torch_with_grads():
  tl = torch.nn.Linear(5, 3)
  lin = nn.Linear(5, 3)
  lin.weight, lin.bias = _copy(tl.weight), _copy(tl.bias)
  x = rand(4, 5)
  tx, xx = torch.tensor(x, requires_grad=True), Tensor(x, requires_grad=True)
  tout, out = tl(tx), lin(xx)
  assert_close(out, tout, atol=1e-5)
  (tout.tanh().sum()).backward(); out.tanh().sum().backward()
  for mine, ref in [(lin.weight, tl.weight), (lin.bias, tl.bias), (xx, tx)]: assert_close(mine.grad, ref.grad, atol=1e-5)
  for kw in [dict(stride=2, padding=1), dict(groups=2, dilation=2), dict(padding="same")]:
    tc = torch.nn.Conv2d(4, 6, 3, **kw)
    c = nn.Conv2d(4, 6, 3, **kw)
    c.weight, c.bias = _copy(tc.weight), _copy(tc.bias)
    xi = rand(2, 4, 6, 6, seed=3)
    tx, xx = torch.tensor(xi, requires_grad=True), Tensor(xi, requires_grad=True)
    tout, out = tc(tx), c(xx)
    assert_close(out, tout, atol=1e-5)
    tout.square().sum().backward(); out.square().sum().backward()
    for mine, ref in [(c.weight, tc.weight), (c.bias, tc.bias), (xx, tx)]: assert_close(mine.grad, ref.grad, atol=1e-4, rtol=1e-4)
  tct = torch.nn.ConvTranspose2d(4, 2, 3, stride=2, padding=1, output_padding=1)
  ct = nn.ConvTranspose2d(4, 2, 3, stride=2, padding=1, output_padding=1)
  ct.weight, ct.bias = _copy(tct.weight), _copy(tct.bias)
  assert_close(ct(Tensor(rand(1, 4, 3, 3))), tct(torch.tensor(rand(1, 4, 3, 3))), atol=1e-5)

@needs_torch
def test_batchnorm_vs_torch_train_steps_and_grads():
  tbn = torch.nn.BatchNorm2d(3, momentum=0.2)
  bn = nn.BatchNorm2d(3, momentum=0.2)
  with torch.no_grad():
    tbn.weight.copy_(torch.tensor(rand(3, seed=1))); tbn.bias.copy_(torch.tensor(rand(3, seed=2)))
  bn.weight, bn.bias = _copy(tbn.weight), _copy(tbn.bias)
  tbn.train()
  with Tensor.train():
    for step in range(3):
      x = rand(4, 3, 3, 2, seed=10 + step)
      tx, xx = torch.tensor(x, requires_grad=True), Tensor(x, requires_grad=True)
      tout, out = tbn(tx), bn(xx)
      (tout * torch.tensor(rand(*x.shape, seed=50))).sum().backward()
      (out * Tensor(rand(*x.shape, seed=50))).sum().backward()
      Tensor.realize(out, bn.running_mean, bn.running_var, bn.num_batches_tracked)
      assert_close(out, tout, atol=1e-5)
      assert_close(xx.grad, tx.grad, atol=1e-4)
      assert_close(bn.running_mean, tbn.running_mean, atol=1e-6)
      assert_close(bn.running_var, tbn.running_var, atol=1e-6)
  assert_close(bn.weight.grad, tbn.weight.grad, atol=1e-4)
  assert_close(bn.bias.grad, tbn.bias.grad, atol=1e-4)
  assert bn.num_batches_tracked.item() == tbn.num_batches_tracked.item() == 3
  tbn.eval()
  x = rand(2, 3, 2, 2, seed=99)
  assert_close(bn(Tensor(x)), tbn(torch.tensor(x)), atol=1e-5)

@needs_torch
def test_norms_embedding_vs_torch():
  x = rand(2, 4, 3, 3)
  tgn, gn = torch.nn.GroupNorm(2, 4), nn.GroupNorm(2, 4)
  with torch.no_grad(): tgn.weight.copy_(torch.tensor(rand(4, seed=1)))
  gn.weight = _copy(tgn.weight)
  assert_close(gn(Tensor(x)), tgn(torch.tensor(x)), atol=1e-5)
  tin, inn = torch.nn.InstanceNorm2d(4, affine=True), nn.InstanceNorm(4)
  assert_close(inn(Tensor(x)), tin(torch.tensor(x)), atol=1e-5)
  tln, ln = torch.nn.LayerNorm((3, 3)), nn.LayerNorm((3, 3))
  with torch.no_grad(): tln.bias.copy_(torch.tensor(rand(3, 3, seed=2)))
  ln.bias = _copy(tln.bias)
  xx, tx = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
  out, tout = ln(xx), tln(tx)
  assert_close(out, tout, atol=1e-5)
  (out * out).sum().backward(); (tout * tout).sum().backward()
  assert_close(xx.grad, tx.grad, atol=1e-4)
  trms, rms = torch.nn.RMSNorm(3, eps=1e-6), nn.RMSNorm(3, eps=1e-6)
  assert_close(rms(Tensor(x)), trms(torch.tensor(x)), atol=1e-5)
  temb, emb = torch.nn.Embedding(6, 4), nn.Embedding(6, 4)
  emb.weight = _copy(temb.weight)
  idx = np.array([[1, 5], [0, 1]])
  assert_close(emb(Tensor(idx.astype(np.int32))), temb(torch.tensor(idx)), atol=1e-6)
