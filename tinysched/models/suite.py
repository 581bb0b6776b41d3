"""The real-model suite: the workloads users capture, as `SUITE[name](quick=False) -> summary dict`.

Every run is deterministic (fixed seeds, fixed inputs) and returns a small JSON-able summary. `available(name)` says
why a model cannot run (weights or input package missing), or None. quick=True is sized for CI on the NUMPY
interpreter, and trims for time only: layers, steps, generated tokens, sentences, image size. No model trims its
vocabulary: token embeddings are nn.Embedding over every row and greedy decoding is Tensor.argmax over every logit, so
the quick captures hold vocabulary-size embeddings and aranges (SmolLM2 49152, GPT-2 50257, MiniLM 30522). Per model:

  mlp_digits   64-64-10 MLP, Adam lr 1e-2, batch 64 on sklearn digits. quick: 5 steps. full: 50 steps + test accuracy.
  cnn_train    conv-BN-ReLU-maxpool x2 + linear, BatchNorm in training mode, Adam lr 1e-2, batch 32.
               quick: 5 steps. full: 30 steps + test accuracy (BatchNorm on running statistics).
  mobilenetv2  torchvision ImageNet MobileNetV2, eval, china.jpg with the ImageNet transform (resize short side,
               center crop, normalize). quick: the whole network on a 64x64 crop (resize 73). full: 224x224 (resize 256).
  minilm       all-MiniLM-L6-v2 sentence embeddings (masked mean pooling, L2 norm), one padded batch of sentences
               of different lengths. quick: the first 2 of 6 layers, 3 short sentences (<= 8 tokens). full: 6 layers,
               5 sentences (<= 16 tokens).
  smollm2      SmolLM2-135M-Instruct (GGUF) greedy decoding with a symbolic-start_pos KV cache (max_context 64),
               vocabulary 49152. quick: the first 2 of 30 layers, prefill + 2 decode steps (3 tokens). full: 30 layers,
               20 tokens.
  gpt2_tiny    a random GPT-2 with GPT-2's vocabulary (50257) and context (1024), 2 layers, d=64, 4 heads, with the
               same KV-cache decoding (GPT-2 small itself, gpt2.GPT2Config(), is the slow parity test's).
               quick: 4 tokens. full: 16 tokens.

RAW[name] keeps the last run's full-precision outputs (logits, embeddings, initial weights) for parity checks, so a
test runs each workload once.
"""
from __future__ import annotations
from typing import Callable
import numpy as np
from tinysched import Tensor
from tinysched.models import assets
from tinysched.models.small import train_mlp, train_cnn
from tinysched.models.mobilenetv2 import MobileNetV2, preprocess
from tinysched.models.pth import load_pth, state_dict_arrays
from tinysched.models.layers import realize
from tinysched.models.bert import load_minilm, sentence_embeddings
from tinysched.models.tokenizers import WordPieceTokenizer
from tinysched.models.llama import load_llama_gguf
from tinysched.models.gpt2 import GPT2, GPT2_TINY, random_gpt2_weights

QUICK_SENTENCES = ["A man is eating food.", "Hi", "Naïve café!"]
SENTENCES = QUICK_SENTENCES + ["The quick brown fox jumps over the lazy dog near the riverbank!",
                               "Tensor compilers fuse elementwise ops into reductions."]
SMOLLM2_PROMPT = "The capital of France is"
GPT2_PROMPT = [5, 17, 42, 99, 3]
RAW: dict[str, dict] = {}

def _mlp_digits(quick: bool = False) -> dict:
  r = train_mlp(steps=5 if quick else 50, batch=64, lr=1e-2, seed=0, evaluate=not quick)
  RAW["mlp_digits"] = {"result": r, "steps": len(r.losses), "batch": 64, "lr": 1e-2, "seed": 0}
  return {"losses": r.losses, "test_accuracy": r.test_accuracy}

def _cnn_train(quick: bool = False) -> dict:
  r = train_cnn(steps=5 if quick else 30, batch=32, lr=1e-2, seed=0, evaluate=not quick)
  RAW["cnn_train"] = {"result": r, "steps": len(r.losses), "batch": 32, "lr": 1e-2, "seed": 0}
  return {"losses": r.losses, "test_accuracy": r.test_accuracy, "bn2_running_mean": [round(float(v), 6) for v in r.final["bn2.running_mean"]]}

def mobilenet_input(quick: bool) -> np.ndarray:
  return preprocess(assets.china_jpg(), 64 if quick else 224)

def _mobilenetv2(quick: bool = False) -> dict:
  model = MobileNetV2()
  sd = state_dict_arrays(load_pth(assets.mobilenet_pth()))
  model.load_torchvision(sd)
  x = mobilenet_input(quick)
  logits = model(Tensor(x))
  realize(logits, label="logits")
  out = logits.numpy()[0]
  RAW["mobilenetv2"] = {"input": x, "logits": out, "state_dict": sd}
  top5 = np.argsort(-out, kind="stable")[:5]
  return {"top5": [int(i) for i in top5], "top5_logits": [round(float(out[i]), 4) for i in top5], "input": list(x.shape)}

def minilm_embeddings(sentences: list[str], n_layers: int | None = None) -> np.ndarray:
  """(len(sentences), 384) L2-normalized sentence embeddings from one padded batch."""
  d = assets.minilm_dir()
  model = load_minilm(d, n_layers)
  ids, mask = WordPieceTokenizer.from_vocab_txt(d / "vocab.txt").batch(sentences)
  emb = sentence_embeddings(model(ids, mask), mask)
  realize(emb, label="embeddings")
  return emb.numpy()

def _minilm(quick: bool = False) -> dict:
  sentences = QUICK_SENTENCES if quick else SENTENCES
  e = minilm_embeddings(sentences, 2 if quick else None)
  RAW["minilm"] = {"sentences": sentences, "n_layers": 2 if quick else 6, "embeddings": e}
  sims = e @ e.T
  return {"n_layers": 2 if quick else 6, "sentences": len(sentences), "cosine": [[round(float(v), 5) for v in row] for row in sims]}

def smollm2_generate(n_new: int, n_layers: int | None = None, prompt: str = SMOLLM2_PROMPT, max_context: int = 64):
  """(prompt ids, new ids, per-step logits, tokenizer, model) of greedy decoding."""
  model, tok, _ = load_llama_gguf(assets.smollm2_gguf(), max_context=max_context, n_layers=n_layers)
  ids = tok.encode(prompt)
  new, logits = model.generate(ids, n_new)
  return ids, new, logits, tok, model

def _smollm2(quick: bool = False) -> dict:
  ids, new, logits, tok, model = smollm2_generate(3 if quick else 20, 2 if quick else None)
  RAW["smollm2"] = {"prompt_ids": ids, "generated_ids": new, "logits": logits, "n_layers": 2 if quick else 30,
                    "embedding_shape": tuple(model.tok_embeddings.weight.shape)}
  return {"n_layers": 2 if quick else 30, "prompt_ids": ids, "generated_ids": new, "text": tok.decode(new)}

def _gpt2_tiny(quick: bool = False) -> dict:
  c = GPT2_TINY
  sd = random_gpt2_weights(c, seed=0)
  new, logits = GPT2(c, sd).generate(GPT2_PROMPT, 4 if quick else 16)
  RAW["gpt2_tiny"] = {"config": c, "state_dict": sd, "generated_ids": new, "logits": logits}
  return {"prompt_ids": GPT2_PROMPT, "generated_ids": new, "last_logit_max": round(float(logits[-1].max()), 5)}

SUITE: dict[str, Callable[..., dict]] = {"mlp_digits": _mlp_digits, "cnn_train": _cnn_train, "mobilenetv2": _mobilenetv2, "minilm": _minilm,
                                         "smollm2": _smollm2, "gpt2_tiny": _gpt2_tiny}

_NEEDS: dict[str, tuple[Callable[[], object], ...]] = {
  "mlp_digits": (lambda: assets.need_module("sklearn", "scikit-learn"),),
  "cnn_train": (lambda: assets.need_module("sklearn", "scikit-learn"),),
  "mobilenetv2": (assets.mobilenet_pth, lambda: assets.need_module("sklearn", "scikit-learn"), lambda: assets.need_module("PIL", "pillow")),
  "minilm": (assets.minilm_dir,),
  "smollm2": (assets.smollm2_gguf,),
  "gpt2_tiny": (),
}

def available(name: str) -> str | None:
  """None if `name` can run here, else why not (which package to install)."""
  if name not in SUITE: return f"unknown model {name!r} (the suite has {', '.join(SUITE)})"
  for check in _NEEDS[name]:
    try: check()
    except assets.AssetMissing as e: return f"{name}: {e}"
  return None

__all__ = ["SUITE", "RAW", "available", "SENTENCES", "QUICK_SENTENCES", "SMOLLM2_PROMPT", "GPT2_PROMPT", "minilm_embeddings", "smollm2_generate",
           "mobilenet_input"]
