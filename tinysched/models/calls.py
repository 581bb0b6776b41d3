"""Model calls: small whole workloads of the front end (Tensor API, autograd, `nn`, optimizers, the reduce rules), each
one call of a model as a user makes it: a forward pass, a backward pass, one optimizer step, one KV-cache decode step.

replay captures them at its `model` level and runs them again on every change (replay/levels/model.py): the graphs a
call builds and the numbers it returns are what the front end owns, and no stored kernel or schedule reaches them.

A call is `fn(dtype, seed) -> {output name: Tensor or array}`: it makes its weights and data from `seed` on the host
(numpy, float32), casts them to `dtype`, and returns its outputs unrealized or as arrays. The same call with dtype
float64 is its reference (a float16 model's numbers are judged against its float64 twin). Everything is sized so a call
runs in well under a second on the NUMPY interpreter, but the vocabulary-size decode step keeps GPT-2's 50257 rows.
Outputs that are deltas (an optimizer step's `w_after - w_before`) are returned as such: a weight changes by lr-sized
amounts, and an error in the update would hide under the weight itself.
"""
from __future__ import annotations
from dataclasses import dataclass
from typing import Any, Callable
import numpy as np
from tinysched import Tensor, nn
from tinysched.dtype import DType
from tinysched.nn.state import get_parameters

Outputs = dict[str, Any]

@dataclass(frozen=True)
class ModelCall:
  """One registered call: `fn(dtype, seed)`, the float dtype it runs in, the scheduler flags set around it (ContextFlags:
  FUSE_ARANGE, FUSE_CONV_BW), its seed, and one line saying what it is."""
  name: str
  fn: Callable[[DType, int], Outputs]
  dtype: str
  what: str
  flags: tuple[tuple[str, int], ...] = ()
  seed: int = 0

def _normal(rng: np.random.Generator, *shape: int, std: float = 1.0) -> np.ndarray:
  return rng.normal(0.0, std, shape).astype(np.float32)

def _param(arr: np.ndarray, dt: DType, requires_grad: bool = True) -> Tensor:
  return Tensor(arr, dtype=dt, requires_grad=requires_grad).realize()

def _set(layer: Any, dt: DType, **arrays: np.ndarray) -> Any:
  """A layer with its weights replaced by seeded host arrays in `dt` (its own init draws from Tensor's RNG otherwise)."""
  for k, v in arrays.items(): setattr(layer, k, _param(v, dt))
  return layer

# *** an MLP (the matmuls a float16/bfloat16 sum rule reaches: 4096-long dot products) ***

class _MLP:
  def __init__(self, dt: DType, rng: np.random.Generator, sizes: tuple[int, ...] = (4096, 256, 10)):
    # weights with a positive mean: with positive inputs the 4096-long sums grow, as after a ReLU or in a pooling layer
    self.layers = [_set(nn.Linear(a, b), dt, weight=_normal(rng, b, a, std=a ** -0.5) + 0.5 * a ** -0.5, bias=_normal(rng, b, std=0.1))
                   for a, b in zip(sizes[:-1], sizes[1:])]
  def __call__(self, x: Tensor) -> Tensor:
    for i, lin in enumerate(self.layers):
      x = lin(x)
      if i < len(self.layers) - 1: x = x.relu()
    return x

def _mlp_data(dt: DType, rng: np.random.Generator, batch: int = 8, features: int = 4096) -> tuple[Tensor, Tensor]:
  # inputs with a positive mean: long sums then grow, as activations after a ReLU do, and a narrow accumulator shows
  x = np.abs(_normal(rng, batch, features)) + 0.25
  return Tensor(x, dtype=dt), Tensor(rng.integers(0, 10, batch).astype(np.int32))

def mlp_forward(dt: DType, seed: int) -> Outputs:
  rng = np.random.default_rng(seed)
  model = _MLP(dt, rng)
  x, _ = _mlp_data(dt, rng)
  return {"logits": model(x)}

def mlp_backward(dt: DType, seed: int) -> Outputs:
  rng = np.random.default_rng(seed)
  model = _MLP(dt, rng)
  x, y = _mlp_data(dt, rng)
  with Tensor.train():
    loss = model(x).sparse_categorical_crossentropy(y)
    loss.backward()
  l0, l1 = model.layers
  return {"loss": loss, "grad_w0": l0.weight.grad, "grad_b0": l0.bias.grad, "grad_w1": l1.weight.grad, "grad_b1": l1.bias.grad}

# *** optimizer steps: the update itself is the output ***

def _step_deltas(params: dict[str, Tensor], step: Callable[[], Tensor]) -> Outputs:
  before = {k: p.numpy().astype(np.float64) for k, p in params.items()}
  loss = step()
  out: Outputs = {"loss": loss.numpy()}
  out.update({f"delta_{k}": p.numpy().astype(np.float64) - before[k] for k, p in params.items()})
  return out

def _training_step(model: Callable[[Tensor], Tensor], opt: Any, x: Tensor, y: Tensor) -> Callable[[], Tensor]:
  """One optimizer step on the cross-entropy of model(x) against y, as a function (returns the loss)."""
  def step() -> Tensor:
    with Tensor.train():
      opt.zero_grad()
      loss = model(x).sparse_categorical_crossentropy(y)
      loss.backward()
      opt.step()
    return loss
  return step

def _small_mlp_step(dt: DType, seed: int, make_opt: Callable[[list[Tensor]], Any]) -> Outputs:
  rng = np.random.default_rng(seed)
  model = _MLP(dt, rng, (64, 32, 10))
  x, y = Tensor(_normal(rng, 48, 64), dtype=dt), Tensor(rng.integers(0, 10, 48).astype(np.int32))
  params = {f"{i}.{k}": getattr(lin, k) for i, lin in enumerate(model.layers) for k in ("weight", "bias")}
  step = _training_step(model, make_opt(list(params.values())), x, y)
  # two steps: Adam's second step is the first to read its moments back (bias correction with t = 2)
  step()
  return _step_deltas(params, step)

def adam_step(dt: DType, seed: int) -> Outputs: return _small_mlp_step(dt, seed, lambda ps: nn.optim.Adam(ps, lr=1e-2))
def sgd_step(dt: DType, seed: int) -> Outputs:
  return _small_mlp_step(dt, seed, lambda ps: nn.optim.SGD(ps, lr=0.05, momentum=0.9, weight_decay=1e-3, nesterov=True))

def lamb_step(dt: DType, seed: int) -> Outputs:
  return _small_mlp_step(dt, seed, lambda ps: nn.optim.LAMB(ps, lr=1e-2, weight_decay=0.01))

# *** the other normalizations and activations, forward and backward ***

def norms_backward(dt: DType, seed: int) -> Outputs:
  rng = np.random.default_rng(seed)
  x = Tensor(_normal(rng, 4, 8, 6, 6), dtype=dt, requires_grad=True)
  aff = lambda n: {"weight": 1 + _normal(rng, n, std=0.1), "bias": _normal(rng, n, std=0.1)}
  gn, inorm, ln = _set(nn.GroupNorm(2, 8), dt, **aff(8)), _set(nn.InstanceNorm(8), dt, **aff(8)), _set(nn.LayerNorm(6), dt, **aff(6))
  rms = _set(nn.RMSNorm(6), dt, weight=1 + _normal(rng, 6, std=0.1))
  with Tensor.train():
    y = gn(x).silu() + inorm(x).sigmoid() * ln(x).softmax(-1) + rms(x).log_softmax(-1).exp() + x.cumsum(-1) * 0.1 + x.abs().sqrt()
    loss = y.square().mean() + y.max(axis=(2, 3)).mean() - y.min(-1).var()
    loss.backward()
  return {"y": y, "loss": loss, "grad_x": x.grad, "grad_gn": gn.weight.grad, "grad_in": inorm.bias.grad, "grad_ln": ln.weight.grad,
          "grad_rms": rms.weight.grad}

# *** a CNN training step: conv, BatchNorm in training mode (running statistics assigned), max-pool, AdamW ***

def _batchnorm(n: int, dt: DType, rng: np.random.Generator) -> nn.BatchNorm:
  bn = _set(nn.BatchNorm2d(n), dt, weight=1 + _normal(rng, n, std=0.1), bias=_normal(rng, n, std=0.1))
  # running statistics in the model's dtype (a float64 twin assigns float64 statistics)
  bn.running_mean, bn.running_var = _param(np.zeros(n, np.float32), dt, False), _param(np.ones(n, np.float32), dt, False)
  return bn

class _CNN:
  def __init__(self, dt: DType, rng: np.random.Generator):
    self.conv1 = _set(nn.Conv2d(1, 8, 3, padding=1, bias=False), dt, weight=_normal(rng, 8, 1, 3, 3, std=1 / 3))
    self.conv2 = _set(nn.Conv2d(8, 16, 3, padding=1, bias=False), dt, weight=_normal(rng, 16, 8, 3, 3, std=(1 / 72) ** 0.5))
    self.bn1, self.bn2 = _batchnorm(8, dt, rng), _batchnorm(16, dt, rng)
    self.fc = _set(nn.Linear(64, 10), dt, weight=_normal(rng, 10, 64, std=0.125), bias=_normal(rng, 10, std=0.1))
  def __call__(self, x: Tensor) -> Tensor:
    x = self.bn1(self.conv1(x)).relu().max_pool2d(2)
    x = self.bn2(self.conv2(x)).relu().max_pool2d(2)
    return self.fc(x.flatten(1))

def cnn_train_step(dt: DType, seed: int) -> Outputs:
  rng = np.random.default_rng(seed)
  model = _CNN(dt, rng)
  x, y = Tensor(_normal(rng, 16, 1, 8, 8), dtype=dt), Tensor(rng.integers(0, 10, 16).astype(np.int32))
  params = {"conv1": model.conv1.weight, "conv2": model.conv2.weight, "bn1.weight": model.bn1.weight, "fc.weight": model.fc.weight}
  out = _step_deltas(params, _training_step(model, nn.optim.AdamW(get_parameters(model), lr=1e-2, weight_decay=0.05), x, y))
  out["bn2.running_mean"], out["bn2.running_var"] = model.bn2.running_mean.numpy(), model.bn2.running_var.numpy()
  return out

# *** attention: a pre-LayerNorm transformer block (LayerNorm, softmax attention, GELU) forward and backward ***

def _block(dt: DType, rng: np.random.Generator, d: int = 64, heads: int = 4):
  w = {k: _param(_normal(rng, *s, std=std), dt) for k, s, std in
       (("qkv", (d, 3 * d), 1.6 * d ** -0.5), ("proj", (d, d), 0.8 * d ** -0.5), ("fc", (d, 4 * d), 0.8 * d ** -0.5),
        ("out", (4 * d, d), 0.4 * d ** -0.5))}
  ln = [_set(nn.LayerNorm(d), dt, weight=1 + _normal(rng, d, std=0.1), bias=_normal(rng, d, std=0.1)) for _ in range(2)]
  def block(x: Tensor) -> Tensor:
    b, t, _ = x.shape
    q, k, v = (z.reshape(b, t, heads, d // heads).transpose(1, 2) for z in ln[0](x).matmul(w["qkv"]).chunk(3, dim=-1))
    a = q.scaled_dot_product_attention(k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
    x = x + a.matmul(w["proj"])
    return x + ln[1](x).matmul(w["fc"]).gelu().matmul(w["out"])
  return block, w, ln

def block_forward(dt: DType, seed: int) -> Outputs:
  rng = np.random.default_rng(seed)
  block, _, _ = _block(dt, rng)
  return {"hidden": block(Tensor(_normal(rng, 2, 16, 64), dtype=dt))}

def block_backward(dt: DType, seed: int) -> Outputs:
  rng = np.random.default_rng(seed)
  block, w, ln = _block(dt, rng)
  x = Tensor(_normal(rng, 2, 16, 64), dtype=dt, requires_grad=True)
  with Tensor.train():
    loss = block(x).square().mean()
    loss.backward()
  return {"loss": loss, "grad_x": x.grad, "grad_qkv": w["qkv"].grad, "grad_out": w["out"].grad, "grad_ln0": ln[0].weight.grad}

# *** a KV-cache decode step of a GPT-2 with GPT-2's vocabulary ***

def gpt2_decode_step(dt: DType, seed: int) -> Outputs:
  from tinysched.models.gpt2 import GPT2, GPT2_TINY, random_gpt2_weights  # (the weights are 13 MB of host arrays: made when called)
  model = GPT2(GPT2_TINY, random_gpt2_weights(GPT2_TINY, seed), dtype=dt)
  prompt = [5, 17, 42, 99, 3]
  logits0, tok0 = model.forward(prompt, 0)
  Tensor.realize(logits0, tok0)
  first = int(tok0.numpy()[0])
  logits1, tok1 = model.forward([first], model.start_pos_var.bind(len(prompt)))
  return {"prefill_logits": logits0, "prefill_token": tok0, "decode_logits": logits1, "decode_token": tok1}

FUSED = (("FUSE_ARANGE", 1), ("FUSE_CONV_BW", 1))
UNFUSED = (("FUSE_ARANGE", 0), ("FUSE_CONV_BW", 0))

CALLS: dict[str, ModelCall] = {c.name: c for c in (
  ModelCall("mlp_forward_f16", mlp_forward, "float16", "4096-256-10 MLP forward in float16"),
  ModelCall("mlp_backward_f16", mlp_backward, "float16", "4096-256-10 MLP cross-entropy loss and gradients in float16"),
  ModelCall("mlp_backward_bf16", mlp_backward, "bfloat16", "4096-256-10 MLP cross-entropy loss and gradients in bfloat16"),
  ModelCall("block_forward_bf16", block_forward, "bfloat16", "pre-LayerNorm attention block (causal softmax, GELU) forward in bfloat16"),
  ModelCall("block_backward_bf16", block_backward, "bfloat16", "attention block loss and gradients in bfloat16"),
  ModelCall("adam_step", adam_step, "float32", "Adam's second step on a small MLP: the loss and every parameter's update"),
  ModelCall("sgd_step", sgd_step, "float32", "SGD (Nesterov momentum, weight decay) second step on a small MLP"),
  ModelCall("lamb_step", lamb_step, "float32", "LAMB's second step on a small MLP (layer-wise trust ratio)"),
  ModelCall("norms_backward", norms_backward, "float32", "GroupNorm, InstanceNorm, LayerNorm, RMSNorm, softmax, cumsum, var: loss and gradients"),
  ModelCall("cnn_train_step_fused", cnn_train_step, "float32", "conv-BatchNorm-maxpool CNN AdamW step, FUSE_ARANGE=1 FUSE_CONV_BW=1", FUSED),
  ModelCall("cnn_train_step_unfused", cnn_train_step, "float32", "the same step with FUSE_ARANGE=0 FUSE_CONV_BW=0", UNFUSED),
  ModelCall("gpt2_decode_step", gpt2_decode_step, "float32", "GPT-2 (vocabulary 50257, 2 layers) prefill + one symbolic KV-cache decode step"),
)}

__all__ = ["ModelCall", "CALLS", "Outputs"]
