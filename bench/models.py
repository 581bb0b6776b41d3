"""Benchmark models written against the tinygrad Tensor API, so the same code runs on tinysched and on
tinygrad 0.10.0 (the baseline). Weights are random; only scheduling work is measured.

Each builder takes (Tensor, Adam) and returns (setup, forward): `setup()` makes and realizes the weights
and inputs; `forward(state)` builds the lazy graph to schedule and returns the tensors to realize.
"""
from __future__ import annotations
import math

def mlp(T, Adam, batch=64):
  def setup():
    return {"x": T.rand(batch, 784).realize(), "w1": T.rand(784, 512).realize(), "b1": T.rand(512).realize(),
            "w2": T.rand(512, 10).realize(), "b2": T.rand(10).realize()}
  def forward(s): return [((s["x"] @ s["w1"] + s["b1"]).relu() @ s["w2"] + s["b2"]).log_softmax(-1)]
  return setup, forward

def mlp_adam_step(T, Adam, batch=64):
  def setup():
    ws = [T.uniform(784, 128, low=-0.05, high=0.05, requires_grad=True).realize(), T.zeros(128, requires_grad=True).contiguous().realize(),
          T.uniform(128, 10, low=-0.05, high=0.05, requires_grad=True).realize(), T.zeros(10, requires_grad=True).contiguous().realize()]
    return {"x": T.rand(batch, 784).realize(), "y": T.rand(batch, 10).realize(), "ws": ws, "opt": Adam(ws, lr=1e-3)}
  def forward(s):
    w1, b1, w2, b2 = s["ws"]
    T.training = True
    out = ((s["x"] @ w1 + b1).relu() @ w2 + b2)
    loss = ((out - s["y"]) ** 2).mean()
    s["opt"].zero_grad()
    loss.backward()
    # what Optimizer.step realizes: the new parameters and the optimizer state
    outs = s["opt"].schedule_step() if hasattr(s["opt"], "schedule_step") else s["opt"]._step()
    T.training = False
    return [loss] + list(outs)
  return setup, forward

def cnn(T, Adam, batch=8):
  def setup():
    return {"x": T.rand(batch, 3, 32, 32).realize(), "c1": T.rand(16, 3, 3, 3).realize(), "c2": T.rand(32, 16, 3, 3).realize(),
            "w": T.rand(32 * 8 * 8, 10).realize(), "g": T.ones(16).contiguous().realize(), "b": T.zeros(16).contiguous().realize()}
  def forward(s):
    x = s["x"].conv2d(s["c1"], padding=1)
    mean = x.mean(axis=(0, 2, 3), keepdim=True)
    var = ((x - mean) ** 2).mean(axis=(0, 2, 3), keepdim=True)
    x = ((x - mean) * (var + 1e-5).rsqrt() * s["g"].reshape(1, -1, 1, 1) + s["b"].reshape(1, -1, 1, 1)).relu().max_pool2d()
    x = x.conv2d(s["c2"], padding=1).relu().max_pool2d()
    return [(x.reshape(x.shape[0], -1) @ s["w"]).log_softmax(-1)]
  return setup, forward

def gpt2(T, Adam, layers=12, d=768, heads=12, seq=64, vocab=1024):
  def setup():
    s = {"tok": T.rand(seq, d).realize(), "ln_f": (T.ones(d).contiguous().realize(), T.zeros(d).contiguous().realize()),
         "head": T.rand(d, vocab).realize(), "layers": []}
    for _ in range(layers):
      s["layers"].append({"ln1": (T.ones(d).contiguous().realize(), T.zeros(d).contiguous().realize()),
                          "qkv": (T.rand(d, 3 * d).realize(), T.rand(3 * d).realize()), "proj": (T.rand(d, d).realize(), T.rand(d).realize()),
                          "ln2": (T.ones(d).contiguous().realize(), T.zeros(d).contiguous().realize()),
                          "fc": (T.rand(d, 4 * d).realize(), T.rand(4 * d).realize()), "fc2": (T.rand(4 * d, d).realize(), T.rand(d).realize())})
    return s
  def ln(x, p): return x.layernorm() * p[0] + p[1]
  def forward(s):
    x = s["tok"].reshape(1, seq, d)
    mask = T.ones(seq, seq).tril().reshape(1, 1, seq, seq)
    for L in s["layers"]:
      h = ln(x, L["ln1"]) @ L["qkv"][0] + L["qkv"][1]
      q, k, v = [h[:, :, i * d:(i + 1) * d].reshape(1, seq, heads, d // heads).transpose(1, 2) for i in range(3)]
      att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // heads))
      att = (mask == 0).where(-math.inf, att).softmax(-1)
      y = (att @ v).transpose(1, 2).reshape(1, seq, d)
      x = x + (y @ L["proj"][0] + L["proj"][1])
      x = x + ((ln(x, L["ln2"]) @ L["fc"][0] + L["fc"][1]).gelu() @ L["fc2"][0] + L["fc2"][1])
    return [ln(x, s["ln_f"]) @ s["head"]]
  return setup, forward

def resnet18(T, Adam, batch=1, size=224):
  def conv_bn(cin, cout, k):
    return {"w": T.rand(cout, cin, k, k).realize(), "g": T.ones(cout).contiguous().realize(), "b": T.zeros(cout).contiguous().realize(),
            "m": T.zeros(cout).contiguous().realize(), "v": T.ones(cout).contiguous().realize()}
  def setup():
    s = {"x": T.rand(batch, 3, size, size).realize(), "stem": conv_bn(3, 64, 7), "blocks": [], "fc": T.rand(512, 1000).realize()}
    cin = 64
    for cout, stride in [(64, 1), (64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), (512, 1)]:
      blk = {"c1": conv_bn(cin, cout, 3), "c2": conv_bn(cout, cout, 3), "stride": stride,
             "down": conv_bn(cin, cout, 1) if stride != 1 or cin != cout else None}
      s["blocks"].append(blk); cin = cout
    return s
  def cbn(x, p, stride=1, pad=0):
    x = x.conv2d(p["w"], stride=stride, padding=pad)
    shape = (1, -1, 1, 1)
    return (x - p["m"].reshape(shape)) * (p["v"].reshape(shape) + 1e-5).rsqrt() * p["g"].reshape(shape) + p["b"].reshape(shape)
  def forward(s):
    x = cbn(s["x"], s["stem"], 2, 3).relu().max_pool2d(kernel_size=(3, 3), stride=2, padding=1)
    for b in s["blocks"]:
      out = cbn(cbn(x, b["c1"], b["stride"], 1).relu(), b["c2"], 1, 1)
      x = (out + (cbn(x, b["down"], b["stride"]) if b["down"] else x)).relu()
    return [x.mean((2, 3)) @ s["fc"]]
  return setup, forward

MODELS = {"mlp": mlp, "cnn": cnn, "gpt2": gpt2, "resnet18": resnet18, "mlp_adam": mlp_adam_step}
