"""Gradients of every differentiable op: against torch (skipped without it) and central finite differences (always)."""
from __future__ import annotations
from dataclasses import dataclass, field
from typing import Any, Callable
import numpy as np
import pytest
from tinysched import Tensor, dtypes
from tests.helpers import rand, assert_close, numerical_grad, torch, needs_torch

if torch is not None: import torch.nn.functional as TF

@dataclass
class Case:
  name: str
  shapes: list[tuple[int, ...]]
  tfn: Callable[..., Tensor]             # on tinysched Tensors
  torchfn: Callable[..., Any] | None     # on torch tensors (None: same method name as tfn works)
  low: float = -2.0
  high: float = 2.0
  atol: float = 1e-4
  extra: dict = field(default_factory=dict)

def _same(method: str, *args, **kwargs) -> tuple[Callable, Callable]:
  return (lambda *x: getattr(x[0], method)(*x[1:], *args, **kwargs)), (lambda *x: getattr(x[0], method)(*x[1:], *args, **kwargs))

def C(name, shapes, pair, **kw) -> Case: return Case(name, shapes, pair[0], pair[1], **kw)

S = (3, 4)
CASES = [
  # elementwise unary
  C("neg", [S], (lambda x: -x, lambda x: -x)), C("exp", [S], _same("exp")), C("log", [S], _same("log"), low=0.2),
  C("log2", [S], _same("log2"), low=0.2), C("exp2", [S], _same("exp2")), C("sqrt", [S], _same("sqrt"), low=0.2),
  C("rsqrt", [S], _same("rsqrt"), low=0.2), C("sin", [S], _same("sin")), C("cos", [S], _same("cos")),
  C("tan", [S], _same("tan"), low=-1.0, high=1.0), C("reciprocal", [S], _same("reciprocal"), low=0.3),
  C("square", [S], _same("square")), C("abs", [S], _same("abs")), C("sign", [S], _same("sign")),
  C("sigmoid", [S], _same("sigmoid")), C("tanh", [S], _same("tanh")), C("relu", [S], _same("relu")),
  C("relu6", [S], (lambda x: (x * 4).relu6(), lambda x: TF.relu6(x * 4))),
  C("leakyrelu", [S], (lambda x: x.leakyrelu(0.1), lambda x: TF.leaky_relu(x, 0.1))),
  C("elu", [S], (lambda x: x.elu(), TF.elu if torch else None)), C("celu", [S], (lambda x: x.celu(0.5), lambda x: TF.celu(x, 0.5))),
  C("gelu", [S], (lambda x: x.gelu(), lambda x: TF.gelu(x, approximate="tanh"))),
  C("quick_gelu", [S], (lambda x: x.quick_gelu(), lambda x: x * torch.sigmoid(1.702 * x))),
  C("silu", [S], (lambda x: x.silu(), TF.silu if torch else None)), C("softplus", [S], (lambda x: x.softplus(), TF.softplus if torch else None)),
  C("mish", [S], (lambda x: x.mish(), TF.mish if torch else None)), C("softsign", [S], (lambda x: x.softsign(), TF.softsign if torch else None)),
  C("hardswish", [S], (lambda x: (x * 2).hardswish(), lambda x: TF.hardswish(x * 2))),
  C("hardsigmoid", [S], (lambda x: (x * 2).hardsigmoid(), lambda x: TF.hardsigmoid(x * 2))),
  C("hardtanh", [S], (lambda x: x.hardtanh(), TF.hardtanh if torch else None)),
  C("clip", [S], (lambda x: x.clip(-0.5, 0.7), lambda x: x.clip(-0.5, 0.7))),
  C("floor_round", [S], (lambda x: x.floor() + x.ceil() + x.round() + x.trunc() + x, lambda x: x.floor() + x.ceil() + x.round() + x.trunc() + x)),
  C("cast_half", [S], (lambda x: x.half().float() * 2, lambda x: x.half().float() * 2), atol=2e-3),
  C("contiguous", [S], (lambda x: x.permute(1, 0).contiguous() * 3, lambda x: x.permute(1, 0).contiguous() * 3)),
  C("contiguous_backward", [S], (lambda x: x.contiguous_backward() * 3, lambda x: x * 3)),
  # binary, broadcasting
  C("add", [(3, 1), (1, 4)], (lambda a, b: a + b, lambda a, b: a + b)), C("sub", [S, (4,)], (lambda a, b: a - b, lambda a, b: a - b)),
  C("rsub", [S], (lambda a: 2 - a, lambda a: 2 - a)), C("mul", [S, (3, 1)], (lambda a, b: a * b, lambda a, b: a * b)),
  C("div", [S, (4,)], (lambda a, b: a / b, lambda a, b: a / b), low=0.5),
  C("rdiv", [S], (lambda a: 3 / a, lambda a: 3 / a), low=0.5),
  C("pow", [S, S], (lambda a, b: a ** b, lambda a, b: a ** b), low=0.5),
  C("pow_scalar", [S], (lambda a: a ** 3 + a ** 2 + a ** 0.5 + a ** -1, lambda a: a ** 3 + a ** 2 + a ** 0.5 + a ** -1), low=0.5),
  C("rpow", [S], (lambda a: 2 ** a, lambda a: 2 ** a)),
  C("maximum", [S, (4,)], (lambda a, b: a.maximum(b), lambda a, b: torch.maximum(a, b))),
  C("minimum", [S, S], (lambda a, b: a.minimum(b), lambda a, b: torch.minimum(a, b))),
  C("where", [S, S, S], (lambda c, a, b: (c > 0).where(a, b), lambda c, a, b: torch.where(c > 0, a, b))),
  C("lerp", [S, S], (lambda a, b: a.lerp(b, 0.3), lambda a, b: torch.lerp(a, b, 0.3))),
  # reductions
  C("sum", [(2, 3, 4)], (lambda x: x.sum(1), lambda x: x.sum(1))),
  C("sum_keepdim_neg", [(2, 3, 4)], (lambda x: x.sum((0, -1), keepdim=True), lambda x: x.sum((0, -1), keepdim=True))),
  C("mean", [(2, 3, 4)], (lambda x: x.mean(-1), lambda x: x.mean(-1))),
  C("max", [(2, 3, 4)], (lambda x: x.max(1), lambda x: x.amax(1))),
  C("max_ties", [(2, 3)], (lambda x: (x * 0).max(), lambda x: (x * 0).amax())),
  C("min", [(2, 3, 4)], (lambda x: x.min(-1, keepdim=True), lambda x: x.amin(-1, keepdim=True))),
  C("prod", [(2, 3)], (lambda x: x.prod(1), lambda x: x.prod(1)), low=0.5),
  C("var", [(3, 4)], (lambda x: x.var(1), lambda x: x.var(1))),
  C("std", [(3, 4)], (lambda x: x.std(0, correction=0), lambda x: x.std(0, correction=0))),
  C("softmax", [(3, 4)], (lambda x: x.softmax(0), lambda x: x.softmax(0))),
  C("log_softmax", [(3, 4)], (lambda x: x.log_softmax(), lambda x: x.log_softmax(-1))),
  C("logsumexp", [(3, 4)], (lambda x: x.logsumexp(1), lambda x: x.logsumexp(1))),
  C("cumsum", [(3, 4)], (lambda x: x.cumsum(1), lambda x: x.cumsum(1))),
  C("logcumsumexp", [(3, 4)], (lambda x: x.logcumsumexp(1), lambda x: torch.logcumsumexp(x, 1))),
  C("masked_fill", [(3, 4)], (lambda x: x.masked_fill(Tensor([True, False, True, False]), 0.5),
                              lambda x: x.masked_fill(torch.tensor([True, False, True, False]), 0.5))),
  # movement
  C("reshape", [(3, 4)], (lambda x: x.reshape(2, 6) * Tensor.arange(6).float(), lambda x: x.reshape(2, 6) * torch.arange(6).float())),
  C("permute", [(2, 3, 4)], (lambda x: x.permute(2, 0, 1), lambda x: x.permute(2, 0, 1))),
  C("transpose", [(2, 3, 4)], (lambda x: x.transpose(-1, 0), lambda x: x.transpose(-1, 0))),
  C("expand", [(3, 1)], (lambda x: x.expand(2, 3, 4), lambda x: x.expand(2, 3, 4))),
  C("pad", [(3, 4)], (lambda x: x.pad(((1, 2), (0, 1))), lambda x: TF.pad(x, (0, 1, 1, 2)))),
  C("pad_value", [(3, 4)], (lambda x: x.pad((1, 1), value=2.0), lambda x: TF.pad(x, (1, 1), value=2.0))),
  C("shrink", [(3, 4)], (lambda x: x.shrink(((1, 3), (0, 2))), lambda x: x[1:3, 0:2])),
  C("flip", [(3, 4)], (lambda x: x.flip(0, 1), lambda x: x.flip(0, 1))),
  C("getitem_basic", [(4, 5)], (lambda x: x[1:, ::-2], lambda x: x[1:].flip(1)[:, ::2])),
  C("getitem_int_none", [(4, 5)], (lambda x: x[2, None, 1:4], lambda x: x[2, None, 1:4])),
  C("getitem_tensor", [(4, 5)], (lambda x: x[Tensor([3, 0, 3]), 1:], lambda x: x[torch.tensor([3, 0, 3]), 1:])),
  C("getitem_two_tensors", [(4, 5)], (lambda x: x[Tensor([[0], [2]]), Tensor([1, 4, 1])],
                                      lambda x: x[torch.tensor([[0], [2]]), torch.tensor([1, 4, 1])])),
  C("cat", [(2, 3), (1, 3)], (lambda a, b: a.cat(b, a), lambda a, b: torch.cat([a, b, a]))),
  C("stack", [(2, 3), (2, 3)], (lambda a, b: a.stack(b, dim=1), lambda a, b: torch.stack([a, b], 1))),
  C("repeat", [(2, 3)], (lambda x: x.repeat(2, 1, 2), lambda x: x.repeat(2, 1, 2))),
  C("repeat_interleave", [(2, 3)], (lambda x: x.repeat_interleave(2, 1), lambda x: x.repeat_interleave(2, 1))),
  C("split", [(5, 3)], (lambda x: x.split([2, 3])[1] * 2 + x.split(2)[2].sum(), lambda x: x.split([2, 3])[1] * 2 + x.split(2)[2].sum())),
  C("chunk", [(4, 3)], (lambda x: x.chunk(2)[0] * x.chunk(2)[1], lambda x: x.chunk(2)[0] * x.chunk(2)[1])),
  C("gather", [(3, 4)], (lambda x: x.gather(1, Tensor([[0, 0, 3], [1, 2, 2], [3, 3, 0]])),
                         lambda x: x.gather(1, torch.tensor([[0, 0, 3], [1, 2, 2], [3, 3, 0]])))),
  C("triu_tril", [(3, 4)], (lambda x: x.triu(1) + x.tril(-1) * 2, lambda x: x.triu(1) + x.tril(-1) * 2)),
  C("roll", [(3, 4)], (lambda x: x.roll(1, 1), lambda x: x.roll(1, 1))),
  # linear algebra, nn ops
  C("matmul", [(2, 3), (3, 4)], (lambda a, b: a @ b, lambda a, b: a @ b)),
  C("matmul_batched", [(2, 2, 3), (3,)], (lambda a, b: a @ b, lambda a, b: a @ b)),
  C("linear", [(2, 3), (3, 4), (4,)], (lambda x, w, b: x.linear(w, b), lambda x, w, b: x @ w + b)),
  C("conv2d", [(2, 2, 5, 5), (3, 2, 3, 3), (3,)], (lambda x, w, b: x.conv2d(w, b, stride=2, padding=1),
                                                   lambda x, w, b: TF.conv2d(x, w, b, stride=2, padding=1))),
  C("conv2d_groups_dilation", [(1, 4, 6, 6), (4, 2, 2, 2)], (lambda x, w: x.conv2d(w, groups=2, dilation=2, padding=(1, 0)),
                                                           lambda x, w: TF.conv2d(x, w, groups=2, dilation=2, padding=(1, 0)))),
  C("conv_transpose2d", [(1, 2, 3, 3), (2, 3, 3, 3)], (lambda x, w: x.conv_transpose2d(w, stride=2, padding=1),
                                                      lambda x, w: TF.conv_transpose2d(x, w, stride=2, padding=1))),
  C("max_pool2d", [(1, 2, 5, 5)], (lambda x: x.max_pool2d(3, 2, padding=1), lambda x: TF.max_pool2d(x, 3, 2, padding=1))),
  C("avg_pool2d", [(1, 2, 5, 5)], (lambda x: x.avg_pool2d(2, 1), lambda x: TF.avg_pool2d(x, 2, 1))),
  C("avg_pool2d_ceil", [(1, 2, 5, 5)], (lambda x: x.avg_pool2d(2, ceil_mode=True, padding=1, count_include_pad=False),
                                       lambda x: TF.avg_pool2d(x, 2, ceil_mode=True, padding=1, count_include_pad=False))),
  C("max_pool2d_dilation", [(1, 1, 6, 6)], (lambda x: x.max_pool2d(2, 1, dilation=2), lambda x: TF.max_pool2d(x, 2, 1, dilation=2))),
  C("conv1d", [(2, 3, 7), (2, 3, 3)], (lambda x, w: x.conv2d(w, padding=1, stride=2), lambda x, w: TF.conv1d(x, w, padding=1, stride=2))),
  C("layernorm_2axes", [(2, 3, 4)], (lambda x: x.layernorm(axis=(1, 2)), lambda x: TF.layer_norm(x, (3, 4)))),
  C("layernorm", [(3, 4)], (lambda x: x.layernorm(), lambda x: TF.layer_norm(x, (4,)))),
  C("batchnorm", [(2, 3, 4), (3,), (3,), (3,), (3,)], (lambda x, w, b, m, s: x.batchnorm(w, b, m, s.abs() + 0.5),
                                                      lambda x, w, b, m, s: (x - m[:, None]) * w[:, None] * (s.abs() + 0.5)[:, None] + b[:, None])),
  C("sdpa", [(1, 2, 3, 4), (1, 2, 3, 4), (1, 2, 3, 4)], (lambda q, k, v: q.scaled_dot_product_attention(k, v, is_causal=True),
                                                        lambda q, k, v: TF.scaled_dot_product_attention(q, k, v, is_causal=True))),
  C("sparse_ce", [(4, 5)], (lambda x: x.sparse_categorical_crossentropy(Tensor([0, 4, 2, 2]), ignore_index=2, label_smoothing=0.1),
                            lambda x: TF.cross_entropy(x, torch.tensor([0, 4, 2, 2]), ignore_index=2, label_smoothing=0.1))),
  C("cross_entropy", [(4, 5)], (lambda x: x.cross_entropy(Tensor([0, 4, 2, 2])), lambda x: TF.cross_entropy(x, torch.tensor([0, 4, 2, 2])))),
  C("nll_loss", [(4, 5)], (lambda x: x.nll_loss(Tensor([0, 4, 2, 1])), lambda x: TF.nll_loss(x, torch.tensor([0, 4, 2, 1])))),
  C("bce", [(5,)], (lambda x: x.sigmoid().binary_crossentropy(Tensor([0.0, 1, 1, 0, 1])),
                    lambda x: TF.binary_cross_entropy(x.sigmoid(), torch.tensor([0.0, 1, 1, 0, 1])))),
  C("bce_logits", [(5,)], (lambda x: x.binary_crossentropy_logits(Tensor([0.0, 1, 1, 0, 1])),
                           lambda x: TF.binary_cross_entropy_with_logits(x, torch.tensor([0.0, 1, 1, 0, 1])))),
  C("interpolate", [(1, 1, 3, 4)], (lambda x: x.interpolate((5, 3)), lambda x: TF.interpolate(x, (5, 3), mode="bilinear"))),
  C("interpolate_nearest", [(1, 1, 3, 4)], (lambda x: x.interpolate((5, 7), mode="nearest"), lambda x: TF.interpolate(x, (5, 7), mode="nearest"))),
  C("sdpa_float_mask", [(2, 3, 4), (2, 5, 4), (2, 5, 4), (3, 5)], (lambda q, k, v, m: q.scaled_dot_product_attention(k, v, attn_mask=m),
                                                                  lambda q, k, v, m: TF.scaled_dot_product_attention(q, k, v, attn_mask=m))),
]

def _inputs(case: Case, dtype=np.float32) -> list[np.ndarray]:
  return [rand(*s, seed=i + 1, low=case.low, high=case.high).astype(dtype) for i, s in enumerate(case.shapes)]

def _tiny_grads(case: Case, arrays: list[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
  ts = [Tensor(a, requires_grad=True) for a in arrays]
  out = case.tfn(*ts)
  weight = rand(*out.shape, seed=99).astype(arrays[0].dtype) if out.shape else np.array(1.3, dtype=arrays[0].dtype)
  (out * Tensor(weight)).sum().backward()  # a random upstream gradient checks the whole vector-Jacobian product
  grads = []
  for t in ts:
    if t.grad is None: grads.append(np.zeros_like(t.numpy()))  # reached only through non-differentiable ops (a where's condition)
    else:
      assert t.grad.shape == t.shape and t.grad.dtype == t.dtype
      grads.append(t.grad.numpy())
  return weight, grads

@needs_torch
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_grad_vs_torch(case: Case):
  arrays = _inputs(case)
  weight, grads = _tiny_grads(case, arrays)
  tts = [torch.tensor(a, requires_grad=True) for a in arrays]
  tout = case.torchfn(*tts)
  (tout * torch.tensor(weight)).sum().backward()
  for g, tt in zip(grads, tts): assert_close(g, tt.grad if tt.grad is not None else np.zeros_like(g), atol=case.atol, rtol=1e-4)

NUMERIC = ["exp", "log", "sigmoid", "tanh", "gelu", "div", "pow", "maximum", "where", "var", "softmax", "logsumexp", "cumsum",
           "getitem_basic", "getitem_two_tensors", "cat", "gather", "matmul", "conv2d", "max_pool2d", "layernorm", "sparse_ce", "interpolate"]

@pytest.mark.parametrize("name", NUMERIC)
def test_grad_vs_finite_differences(name: str):
  case = next(c for c in CASES if c.name == name)
  # float64 and small inputs keep the central differences accurate and the test fast
  arrays = [a[tuple(slice(0, min(s, 3)) for s in a.shape)] if name not in ("conv2d", "max_pool2d", "matmul", "sparse_ce", "interpolate",
            "getitem_basic", "getitem_two_tensors", "gather", "cat") else a for a in _inputs(case, np.float64)]
  weight, grads = _tiny_grads(case, arrays)
  f = lambda *ts: (case.tfn(*ts) * Tensor(weight)).sum()  # noqa: E731
  for g, ng in zip(grads, numerical_grad(f, arrays)): assert_close(g, ng, atol=1e-5, rtol=1e-4)

# *** autograd mechanics ***

def test_grad_accumulates_and_shared_subexpressions():
  x = Tensor([1.0, 2.0, 3.0], requires_grad=True)
  y = x * x
  (y + y * x).sum().backward()  # d/dx (x^2 + x^3) = 2x + 3x^2
  assert_close(x.grad, np.array([5.0, 16.0, 33.0], np.float32))
  (x * 2).sum().backward()  # grads add up until zeroed
  assert_close(x.grad, np.array([7.0, 18.0, 35.0], np.float32))

def test_requires_grad_propagation_and_detach():
  a = Tensor([1.0, 2.0], requires_grad=True)
  b = Tensor([3.0, 4.0])                         # requires_grad None: no gradient
  c = Tensor([5.0, 6.0], requires_grad=False)
  (a * b + c + a.detach() * 10).sum().backward()
  assert_close(a.grad, np.array([3.0, 4.0], np.float32))
  assert b.grad is None and c.grad is None
  assert (b * c).requires_grad is None and (c * c).requires_grad is False and (a * c).requires_grad is True

def test_no_grad_records_nothing():
  a = Tensor([1.0, 2.0], requires_grad=True)
  Tensor.no_grad = True
  try: y = a * 2
  finally: Tensor.no_grad = False
  assert y._ctx is None
  with pytest.raises(RuntimeError, match="does not require grad|no gradient"): Tensor([1.0]).backward()

def test_backward_with_gradient_argument_and_retain_graph():
  a = Tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
  y = a * a
  y.backward(Tensor([[1.0, 0.0], [0.5, 2.0]]), retain_graph=True)
  assert_close(a.grad, np.array([[2.0, 0.0], [3.0, 16.0]], np.float32))
  a.grad = None
  y.backward(Tensor.ones(2, 2))  # the graph was kept
  assert_close(a.grad, np.array([[2.0, 4.0], [6.0, 8.0]], np.float32))

def test_half_gradients_keep_dtype():
  x = Tensor(rand(3, 4, dtype=np.float16), requires_grad=True)
  (x.relu() * 3).sum().backward()
  assert x.grad.dtype == dtypes.float16
  assert_close(x.grad, np.where(x.numpy() > 0, 3.0, 0.0).astype(np.float16))
  e = Tensor(rand(3, 1, dtype=np.float16), requires_grad=True)
  e.expand(3, 5000).sum().backward()  # the expand's gradient sums 5000 values: accumulated in float32, no overflow
  assert_close(e.grad, np.full((3, 1), 5000, np.float16))

def test_dropout_gradient_uses_the_same_mask():
  x = Tensor(rand(50, low=0.5, high=1.0), requires_grad=True)
  with Tensor.train():
    out = x.dropout(0.5)
    out.sum().backward()
  kept = out.numpy() != 0
  assert 0 < kept.sum() < 50
  assert_close(x.grad, np.where(kept, 2.0, 0.0).astype(np.float32))

def test_integer_ops_do_not_need_grad():
  a = Tensor([1.0, 2.0], requires_grad=True)
  idx = Tensor([1, 0])
  (a[idx] * (idx + 1).float()).sum().backward()
  assert_close(a.grad, np.array([1.0, 2.0], np.float32))  # out = [a1, a0] weighted [2, 1]
  assert idx.grad is None
