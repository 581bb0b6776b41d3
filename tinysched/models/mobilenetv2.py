"""MobileNetV2 (Sandler et al. 2018) in inference mode, laid out like torchvision's so its state dict loads by name.

features.0: 3x3 stride-2 conv to 32 channels + BatchNorm + ReLU6; features.1..17: inverted residual blocks
(expand 1x1 conv + BN + ReLU6 unless t == 1, 3x3 depthwise conv + BN + ReLU6, 1x1 linear conv + BN, a residual add when
stride 1 and channels are kept); features.18: 1x1 conv to 1280 + BN + ReLU6; global average pool; classifier.1:
Linear(1280, 1000) (classifier.0 is dropout, a no-op in eval).
"""
from __future__ import annotations
from typing import Any, Callable
import numpy as np
from tinysched import Tensor, nn
from tinysched.models.layers import replace_weights

# (expansion t, output channels c, repeats n, first stride s), the paper's table 2
INVERTED_RESIDUAL_SETTING = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]
IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], np.float32)

class ConvBN:
  """Conv2d (no bias) + BatchNorm2d, optionally ReLU6; as a list-like so names read features.0.0 / features.0.1."""
  def __init__(self, cin: int, cout: int, k: int, stride: int = 1, groups: int = 1, relu6: bool = True):
    self.layers: list[Any] = [nn.Conv2d(cin, cout, k, stride=stride, padding=(k - 1) // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    self.relu6 = relu6
  def __call__(self, x: Tensor) -> Tensor:
    x = self.layers[1](self.layers[0](x))
    return x.relu6() if self.relu6 else x

class InvertedResidual:
  def __init__(self, cin: int, cout: int, stride: int, expand: int):
    hidden = cin * expand
    self.use_res = stride == 1 and cin == cout
    self.conv: list[ConvBN] = ([ConvBN(cin, hidden, 1)] if expand != 1 else []) + \
      [ConvBN(hidden, hidden, 3, stride, groups=hidden), ConvBN(hidden, cout, 1, relu6=False)]
  def __call__(self, x: Tensor) -> Tensor:
    y = x.sequential(self.conv)
    return x + y if self.use_res else y

class MobileNetV2:
  """`n_blocks` keeps features.0..n_blocks (the quick suite runs a prefix); the head runs only on the full network."""
  def __init__(self, num_classes: int = 1000, n_blocks: int | None = None):
    feats: list[Callable[[Tensor], Tensor]] = [ConvBN(3, 32, 3, 2)]
    cin = 32
    for t, c, n, s in INVERTED_RESIDUAL_SETTING:
      for i in range(n):
        feats.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
        cin = c
    feats.append(ConvBN(cin, 1280, 1))
    self.full = n_blocks is None or n_blocks >= len(feats)
    self.features = feats if self.full else feats[:n_blocks]
    self.classifier = nn.Linear(1280, num_classes) if self.full else None

  def __call__(self, x: Tensor) -> Tensor:
    """(N, 3, H, W) normalized images -> (N, classes) logits (or the last kept block's features for a prefix)."""
    x = x.sequential(self.features)
    if not self.full: return x
    assert self.classifier is not None
    return self.classifier(x.mean((2, 3)))

  def load_torchvision(self, sd: dict[str, np.ndarray]) -> None:
    """Copy torchvision's mobilenet_v2 state dict in (num_batches_tracked is training bookkeeping and is skipped)."""
    used: set[str] = set()
    def conv_bn(m: ConvBN, prefix: str) -> None:
      replace_weights(m.layers[0], weight=sd[f"{prefix}.0.weight"])
      replace_weights(m.layers[1], weight=sd[f"{prefix}.1.weight"], bias=sd[f"{prefix}.1.bias"], running_mean=sd[f"{prefix}.1.running_mean"],
                      running_var=sd[f"{prefix}.1.running_var"])
      used.update(f"{prefix}.{k}" for k in ("0.weight", "1.weight", "1.bias", "1.running_mean", "1.running_var", "1.num_batches_tracked"))
    def conv_bn_flat(m: ConvBN, conv: str, bn: str) -> None:  # the projection conv of a block: conv.N.weight then conv.N+1.* BN
      replace_weights(m.layers[0], weight=sd[f"{conv}.weight"])
      replace_weights(m.layers[1], weight=sd[f"{bn}.weight"], bias=sd[f"{bn}.bias"], running_mean=sd[f"{bn}.running_mean"],
                      running_var=sd[f"{bn}.running_var"])
      used.update([f"{conv}.weight"] + [f"{bn}.{k}" for k in ("weight", "bias", "running_mean", "running_var", "num_batches_tracked")])
    for i, f in enumerate(self.features):
      if isinstance(f, InvertedResidual):
        for j, m in enumerate(f.conv[:-1]): conv_bn(m, f"features.{i}.conv.{j}")
        n = len(f.conv) - 1
        conv_bn_flat(f.conv[-1], f"features.{i}.conv.{n}", f"features.{i}.conv.{n + 1}")
      else: conv_bn(f, f"features.{i}")  # type: ignore[arg-type]  # the other features are ConvBNs
    if self.classifier is not None:
      replace_weights(self.classifier, weight=sd["classifier.1.weight"], bias=sd["classifier.1.bias"])
      used.update(("classifier.1.weight", "classifier.1.bias"))
    if self.full and (left := sorted(set(sd) - used)): raise KeyError(f"MobileNetV2: unused weights in the state dict: {left[:5]}")

def preprocess(img: np.ndarray, size: int = 224, resize: int | None = None) -> np.ndarray:
  """torchvision's ImageNet eval transform on an RGB uint8 (H, W, 3) image -> (1, 3, size, size) float32.

  Resize the short side to `resize` (default 256/224 * size) with PIL's bilinear filter, center-crop `size`, scale to
  [0, 1], normalize by the ImageNet mean/std. The parity reference is fed this same array.
  """
  from PIL import Image  # optional: only the ImageNet transform needs pillow
  resize = resize or round(size * 256 / 224)
  h, w = img.shape[:2]
  nh, nw = (resize, round(w * resize / h)) if h <= w else (round(h * resize / w), resize)
  bilinear = Image.BILINEAR  # type: ignore[attr-defined]  # Pillow has it; its stubs name only Image.Resampling.BILINEAR
  im = np.asarray(Image.fromarray(img).resize((nw, nh), bilinear), dtype=np.float32) / 255.0
  top, left = (nh - size) // 2, (nw - size) // 2
  im = (im[top:top + size, left:left + size] - IMAGENET_MEAN) / IMAGENET_STD
  return np.ascontiguousarray(im.transpose(2, 0, 1)[None], dtype=np.float32)

__all__ = ["MobileNetV2", "preprocess", "INVERTED_RESIDUAL_SETTING"]
