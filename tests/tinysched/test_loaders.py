"""Weight loaders and tokenizers of tinysched.models: GGUF (hand-built files with known values), safe .pth (round trips
against torch.save, malicious pickles refused), safetensors, WordPiece and byte-level BPE (against the reference
tokenizers when installed)."""
from __future__ import annotations
import builtins, os, pickle, struct, zipfile
from collections import OrderedDict
import numpy as np
import pytest
from tinysched.models.gguf import GGUFError, dequantize, load_gguf
from tinysched.models.pth import PthError, UnsafePickleError, load_pth
from tinysched.models.tokenizers import ByteBPETokenizer, WordPieceTokenizer, gpt2_pre_tokenize
from tinysched.models import assets

try: import torch
except ImportError: torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed (the .pth round trips compare against torch.save)")

def _skip_unless(getter):
  try: return getter()
  except assets.AssetMissing as e: pytest.skip(str(e))

# *** a hand-written GGUF file ***

def _s(x: str) -> bytes:
  b = x.encode()
  return struct.pack("<Q", len(b)) + b

_SCALAR_FMT = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}

def _kv_value(vtype: int, v) -> bytes:
  if vtype == 8: return _s(v)
  if vtype == 9:
    etype, items = v
    return struct.pack("<IQ", etype, len(items)) + b"".join(_kv_value(etype, x) for x in items)
  return struct.pack(_SCALAR_FMT[vtype], v)

def write_gguf(path, metadata: list[tuple[str, int, object]], tensors: list[tuple[str, tuple[int, ...], int, bytes]], alignment: int = 32,
               version: int = 3) -> None:
  """metadata: (key, type, value); tensors: (name, numpy shape, ggml type, raw bytes). Offsets aligned to `alignment`."""
  head = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(metadata))
  for k, t, v in metadata: head += _s(k) + struct.pack("<I", t) + _kv_value(t, v)
  data, infos = b"", b""
  for name, shape, gtype, raw in tensors:
    data += b"\0" * (-len(data) % alignment)
    infos += _s(name) + struct.pack("<I", len(shape)) + b"".join(struct.pack("<Q", d) for d in reversed(shape)) + struct.pack("<IQ", gtype, len(data))
    data += raw
  head += infos
  head += b"\0" * (-len(head) % alignment)
  with open(path, "wb") as f: f.write(head + data)

def _f16(x: float) -> bytes: return np.float16(x).tobytes()

def _q8_0_block(d: float, qs: list[int]) -> tuple[bytes, list[float]]:
  raw = _f16(d) + bytes(np.array(qs, np.int8).tobytes())
  dd = float(np.float16(d))
  return raw, [np.float32(dd) * np.float32(q) for q in qs]

def _q4_1_block(d: float, m: float, qs: list[int]) -> tuple[bytes, list[float]]:
  # value j < 16 is the low nibble of byte j, value j >= 16 the high nibble of byte j - 16
  packed = bytes((qs[j] & 0xF) | ((qs[j + 16] & 0xF) << 4) for j in range(16))
  dd, mm = float(np.float16(d)), float(np.float16(m))
  return _f16(d) + _f16(m) + packed, [np.float32(dd) * np.float32(q) + np.float32(mm) for q in qs]

def _q4_0_block(d: float, qs: list[int]) -> tuple[bytes, list[float]]:
  packed = bytes((qs[j] & 0xF) | ((qs[j + 16] & 0xF) << 4) for j in range(16))
  dd = float(np.float16(d))
  return _f16(d) + packed, [np.float32(dd) * np.float32(q - 8) for q in qs]

@pytest.fixture
def tiny_gguf(tmp_path):
  rng = np.random.default_rng(0)
  f32 = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5
  f16 = np.array([0.5, -1.25, 65504.0, 1e-3], np.float16)
  q8_raw, q8_vals = b"", []
  for d in (0.5, -0.01):
    raw, vals = _q8_0_block(d, [int(v) for v in rng.integers(-128, 128, 32)])
    q8_raw += raw; q8_vals += vals
  q41_raw, q41_vals = b"", []
  for d, m in ((0.25, -1.0), (0.0625, 3.5)):
    raw, vals = _q4_1_block(d, m, [int(v) for v in rng.integers(0, 16, 32)])
    q41_raw += raw; q41_vals += vals
  q40_raw, q40_vals = _q4_0_block(0.5, list(range(16)) * 2)
  bf16 = np.array([1.0, -2.5, 3.140625], np.float32)
  bf16_raw = (bf16.view(np.uint32) >> 16).astype("<u2").tobytes()
  md = [("general.architecture", 8, "test"), ("general.alignment", 4, 64), ("u8", 0, 200), ("i8", 1, -100), ("u16", 2, 60000), ("i16", 3, -30000),
        ("u32", 4, 4_000_000_000), ("i32", 5, -2_000_000_000), ("f32", 6, 0.5), ("yes", 7, True), ("u64", 10, 2**63 + 5), ("i64", 11, -2**62),
        ("f64", 12, 1e-300), ("ints", 9, (5, [1, -2, 3])), ("strs", 9, (8, ["a", "ü", ""])), ("nested", 9, (9, [(4, [1, 2]), (4, [])]))]
  tensors = [("f32", (2, 3), 0, f32.tobytes()), ("f16", (4,), 1, f16.tobytes()), ("q8", (2, 32), 8, q8_raw), ("q41", (2, 32), 3, q41_raw),
             ("q40", (32,), 2, q40_raw), ("bf16", (3,), 30, bf16_raw), ("q4k", (256,), 12, b"\0" * 144)]
  path = tmp_path / "tiny.gguf"
  write_gguf(path, md, tensors, alignment=64)
  want = {"f32": f32, "f16": f16.astype(np.float32), "q8": np.array(q8_vals, np.float32).reshape(2, 32),
          "q41": np.array(q41_vals, np.float32).reshape(2, 32), "q40": np.array(q40_vals, np.float32), "bf16": bf16}
  return path, want

def test_gguf_metadata_and_tensor_infos(tiny_gguf):
  path, _ = tiny_gguf
  g = load_gguf(path)
  assert g.version == 3 and g.alignment == 64
  md = g.metadata
  assert (md["u8"], md["i8"], md["u16"], md["i16"], md["u32"], md["i32"]) == (200, -100, 60000, -30000, 4_000_000_000, -2_000_000_000)
  assert md["f32"] == 0.5 and md["yes"] is True and md["u64"] == 2**63 + 5 and md["i64"] == -2**62 and md["f64"] == 1e-300
  assert md["ints"] == [1, -2, 3] and md["strs"] == ["a", "ü", ""] and md["nested"] == [[1, 2], []]
  assert list(g.tensors) == ["f32", "f16", "q8", "q41", "q40", "bf16", "q4k"]
  assert g.tensors["q8"].shape == (2, 32) and g.tensors["q8"].type_name == "Q8_0" and g.tensors["q41"].nbytes == 40
  assert all(info.offset % 64 == 0 for info in g.tensors.values())

def test_gguf_dequantize_known_values(tiny_gguf):
  path, want = tiny_gguf
  g = load_gguf(path)
  for name, w in want.items():
    got = g.tensor(name)
    assert got.dtype == np.float32 and got.shape == w.shape, name
    np.testing.assert_array_equal(got, w, err_msg=name)  # same float32 arithmetic: exact
  with pytest.raises(GGUFError, match="'q4k'.*Q4_K"): g.tensor("q4k")

def test_gguf_q4_1_nibble_order():
  # one block: d=1, m=0, value j = j % 16: low nibbles hold values 0..15, high nibbles 16..31
  raw, _ = _q4_1_block(1.0, 0.0, [j % 16 for j in range(32)])
  np.testing.assert_array_equal(dequantize(np.frombuffer(raw, np.uint8), 3, (32,)), np.array([j % 16 for j in range(32)], np.float32))

@pytest.mark.parametrize("corrupt, match", [
  (lambda b: b"GGUX" + b[4:], "not a GGUF file"),
  (lambda b: b[:4] + struct.pack("<I", 7) + b[8:], "version 7"),
  (lambda b: b[:len(b) - 10], "truncated|runs past the end"),
  (lambda b: b[:30], "truncated"),
])
def test_gguf_bad_files(tiny_gguf, tmp_path, corrupt, match):
  path, _ = tiny_gguf
  bad = tmp_path / "bad.gguf"
  bad.write_bytes(corrupt(path.read_bytes()))
  with pytest.raises(GGUFError, match=match): load_gguf(bad)

def test_gguf_misaligned_offset(tmp_path):
  path = tmp_path / "mis.gguf"
  # an F32 tensor at data offset 4 with the default 32-byte alignment
  head = b"GGUF" + struct.pack("<IQQ", 3, 1, 0) + _s("t") + struct.pack("<IQIQ", 1, 1, 0, 4)
  path.write_bytes(head + b"\0" * (-len(head) % 32) + b"\0" * 8)
  with pytest.raises(GGUFError, match="not aligned"): load_gguf(path)

def test_gguf_matches_gguf_package_on_smollm2():
  gguf = pytest.importorskip("gguf", reason="the gguf package is the reference dequantizer")
  path = _skip_unless(assets.smollm2_gguf)
  ours = load_gguf(path)
  ref = gguf.GGUFReader(str(path))
  seen = set()
  for t in ref.tensors:
    if not (t.name.startswith("blk.0.") or t.name in ("token_embd.weight", "output_norm.weight")): continue
    seen.add(t.tensor_type.name)
    info = ours.tensors[t.name]
    rows = min(64, info.shape[0])  # the first rows of each tensor: enough blocks, and the 28M-value embedding stays cheap
    raw = ours.raw(t.name)[:rows * (info.nbytes // info.shape[0])]
    np.testing.assert_array_equal(dequantize(raw, info.ggml_type, (rows, *info.shape[1:])),
                                  gguf.dequantize(t.data[:rows], t.tensor_type).reshape(rows, *info.shape[1:]), err_msg=t.name)
  q = ref.tensors[[t.name for t in ref.tensors].index("blk.0.attn_q.weight")]
  np.testing.assert_array_equal(ours.tensor("blk.0.attn_q.weight"), gguf.dequantize(q.data, gguf.GGMLQuantizationType.Q4_1).reshape(576, 576))
  assert {"Q4_1", "Q8_0", "F32"} <= seen
  assert ours.metadata["llama.block_count"] == 30 and len(ours.metadata["tokenizer.ggml.tokens"]) == 49152

# *** .pth ***

def _torch_state():
  g = torch.Generator().manual_seed(0)
  base = torch.randn(4, 6, generator=g)
  return OrderedDict([
    ("w", base), ("view_t", base.t()), ("col", base[:, 2]), ("slice", base[1:3, ::2]), ("half", torch.randn(3, generator=g).half()),
    ("bf16", torch.randn(2, 2, generator=g).to(torch.bfloat16)), ("long", torch.tensor([1, -2, 2**40])),
    ("scalar", torch.tensor(7, dtype=torch.int64)),
    ("bool", torch.tensor([True, False, True])), ("u8", torch.arange(5, dtype=torch.uint8)), ("empty", torch.zeros(0, 3)),
    ("param", torch.nn.Parameter(torch.ones(2, 2))), ("nested", {"list": [1, 2.5, "x", None, (True,)], "t": torch.arange(3, dtype=torch.int32)}),
  ])

def _expect(v):
  return v.detach().float().numpy() if v.dtype == torch.bfloat16 else v.detach().numpy()

@needs_torch
@pytest.mark.parametrize("zip_format", [True, False], ids=["zip", "legacy"])
def test_pth_round_trip_against_torch_save(tmp_path, zip_format):
  sd = _torch_state()
  path = tmp_path / "state.pth"
  torch.save(sd, path, _use_new_zipfile_serialization=zip_format)
  got = load_pth(path)
  assert isinstance(got, OrderedDict) and list(got) == list(sd)
  for k, v in sd.items():
    if k == "nested":
      assert got[k]["list"] == [1, 2.5, "x", None, (True,)]
      np.testing.assert_array_equal(got[k]["t"], v["t"].numpy())
      continue
    want = _expect(v)
    assert got[k].shape == want.shape and got[k].dtype == want.dtype, k
    np.testing.assert_array_equal(got[k], want, err_msg=k)
    assert got[k].flags["C_CONTIGUOUS"] and got[k].flags["OWNDATA"] or got[k].base is not None

def test_pth_mobilenet_matches_torch_load():
  path = _skip_unless(assets.mobilenet_pth)
  sd = load_pth(path)
  assert len(sd) == 314 and sd["features.0.0.weight"].shape == (32, 3, 3, 3) and sd["classifier.1.weight"].shape == (1000, 1280)
  assert sd["features.0.1.num_batches_tracked"].dtype == np.int64 and sd["features.0.1.num_batches_tracked"].shape == ()
  if torch is None: return
  ref = torch.load(path, weights_only=True)
  assert list(ref) == list(sd)
  for k, v in ref.items(): np.testing.assert_array_equal(sd[k], v.numpy(), err_msg=k)

# malicious pickles: each would run code with a plain unpickler

class _Exec:
  def __init__(self, code: str): self.code = code
  def __reduce__(self): return (builtins.exec, (self.code,))

class _System:
  def __reduce__(self): return (os.system, ("touch /tmp/tinysched-pwned-by-pth",))

def _zip_pth(path, payload: bytes) -> None:
  with zipfile.ZipFile(path, "w") as zf:
    zf.writestr("archive/data.pkl", payload)
    zf.writestr("archive/byteorder", "little")
    zf.writestr("archive/version", "3\n")

def _legacy_pth(path, payload: bytes) -> None:
  with open(path, "wb") as f: f.write(payload)

@pytest.mark.parametrize("container", [_zip_pth, _legacy_pth], ids=["zip", "legacy"])
def test_pth_malicious_exec_is_refused_and_nothing_runs(tmp_path, container):
  marker = tmp_path / "pwned"
  payload = pickle.dumps({"weight": _Exec(f"open({str(marker)!r}, 'w').write('pwned')")}, protocol=2)
  # the payload is real: a plain unpickler runs it
  pickle.loads(payload)
  assert marker.exists()
  marker.unlink()
  path = tmp_path / "evil.pth"
  container(path, payload)
  with pytest.raises(UnsafePickleError, match=r"(builtins|__builtin__)\.exec"): load_pth(path)
  assert not marker.exists()

@pytest.mark.parametrize("container", [_zip_pth, _legacy_pth], ids=["zip", "legacy"])
def test_pth_malicious_os_system_is_refused(tmp_path, container):
  path = tmp_path / "evil.pth"
  container(path, pickle.dumps(OrderedDict(w=_System()), protocol=2))
  with pytest.raises(UnsafePickleError, match=r"(posix|os|nt)\.system"): load_pth(path)
  assert not os.path.exists("/tmp/tinysched-pwned-by-pth")

def test_pth_malicious_eval_hidden_in_a_storage_record(tmp_path):
  # a GLOBAL inside the persistent id tuple: the storage-type slot names builtins.eval
  payload = b"\x80\x02(X\x07\x00\x00\x00storagecbuiltins\neval\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x01tQ."
  path = tmp_path / "evil.pth"
  _zip_pth(path, payload)
  with pytest.raises(UnsafePickleError, match="builtins.eval"): load_pth(path)

def test_pth_other_persistent_ids_refused(tmp_path):
  payload = b"\x80\x02(X\x06\x00\x00\x00moduleX\x01\x00\x00\x00xtQ."
  path = tmp_path / "evil.pth"
  _zip_pth(path, payload)
  with pytest.raises(UnsafePickleError, match="persistent id"): load_pth(path)

def _tensor_pickle(size: bytes, stride: bytes, tail: bytes = b"") -> bytes:
  """A hand-written data.pkl: one _rebuild_tensor_v2 over FloatStorage '0' (1 element), then `tail` opcodes."""
  storage = b"(X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x01tQ"
  return b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\n(" + storage + b"K\x00" + size + stride + b"\x89}tR" + tail + b"."

def _zip_with_storage(path, payload: bytes) -> None:
  with zipfile.ZipFile(path, "w") as zf:
    zf.writestr("archive/data.pkl", payload)
    zf.writestr("archive/data/0", np.float32(1.5).tobytes())

def test_pth_hand_written_tensor_and_refused_tricks(tmp_path):
  path = tmp_path / "t.pth"
  _zip_with_storage(path, _tensor_pickle(b"K\x01\x85", b"K\x01\x85"))
  np.testing.assert_array_equal(load_pth(path), np.array([1.5], np.float32))
  # BUILD on the loader's own objects (rewiring the storage of a tensor) is refused
  _zip_with_storage(path, _tensor_pickle(b"K\x01\x85", b"K\x01\x85", b"}X\x07\x00\x00\x00storageK\x05sb"))
  with pytest.raises(UnsafePickleError, match="refusing to set the state"): load_pth(path)
  # a stride-0 view claiming 2^40 elements of a 1-element storage is not materialized
  _zip_with_storage(path, _tensor_pickle(b"J\x00\x00\x10\x00J\x00\x00\x10\x00\x86", b"K\x00K\x00\x86"))
  with pytest.raises(PthError, match="expands a storage"): load_pth(path)
  # reading past the storage
  _zip_with_storage(path, _tensor_pickle(b"K\x02\x85", b"K\x01\x85"))
  with pytest.raises(PthError, match="past its storage"): load_pth(path)

def test_pth_not_a_torch_file(tmp_path):
  path = tmp_path / "x.pth"
  path.write_bytes(pickle.dumps([1, 2, 3]))
  with pytest.raises(PthError, match="not a torch file"): load_pth(path)
  path.write_bytes(b"\x80\x02garbage")
  with pytest.raises(PthError, match="corrupt"): load_pth(path)
  with pytest.raises(PthError, match="cannot open"): load_pth(tmp_path / "missing.pth")

@needs_torch
def test_pth_truncated_legacy_file(tmp_path):
  path = tmp_path / "t.pth"
  torch.save({"w": torch.ones(100)}, path, _use_new_zipfile_serialization=False)
  path.write_bytes(path.read_bytes()[:-50])
  with pytest.raises(PthError, match="truncated"): load_pth(path)

# *** safetensors ***

def test_safetensors_loader_and_fallback_agree(tmp_path):
  from tinysched import Tensor
  from tinysched.nn.state import safe_save
  from tinysched.models.weights import load_safetensors, _safetensors_numpy
  arrs = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.array([1, -2], np.int64), "c": np.array([0.5], np.float16)}
  safe_save({k: Tensor(v) for k, v in arrs.items()}, tmp_path / "x.safetensors")
  got, fb = load_safetensors(tmp_path / "x.safetensors"), _safetensors_numpy(tmp_path / "x.safetensors")
  for k, v in arrs.items():
    np.testing.assert_array_equal(got[k].numpy(), v)
    np.testing.assert_array_equal(fb[k], v)

# *** tokenizers ***

TEXTS = ["Hello world!  It's 2024, naïve café 東京 ", "The capital of France is Paris.",
         "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
         "Don't   stop\n\n  believing... ÀÉÎ ñ — “quotes” $100.50 #hashtag @user e-mail: a.b@c.com", "  leading and trailing  ",
         "unaffable tokenization of supercalifragilisticexpialidocious words", "I'm we'll they've she'd", "tab\there\r\nnew\u00a0nbsp\u200bzw",
         "emoji 🙂 and ω Ω ß", "A man is eating food.", "Naïve café!", "Hi"]

def test_gpt2_pre_tokenize_rules():
  assert gpt2_pre_tokenize("Hello  world") == ["Hello", " ", " world"]
  assert gpt2_pre_tokenize("it's 42!\n\nok ") == ["it", "'s", " 42", "!", "\n", "\n", "ok", " "]
  assert gpt2_pre_tokenize("a\n b") == ["a", "\n", " b"]

def test_wordpiece_hand_checked():
  vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "hello", ",", "world", "!", "un", "##aff", "##able", "cafe"])}
  tok = WordPieceTokenizer(vocab)
  assert tok.encode("Hello, WORLD!") == [2, 4, 5, 6, 7, 3]
  assert tok.encode("unaffable Café xyz") == [2, 8, 9, 10, 11, 1, 3]
  ids, mask = tok.batch(["hello", "hello world !"])
  assert ids == [[2, 4, 3, 0, 0], [2, 4, 6, 7, 3]] and mask == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]

def test_byte_bpe_hand_checked():
  # bytes map to themselves for printable ASCII; space is "Ġ"
  tokens = list("abcĠ") + ["ab", "abc", "Ġa", "<s>"]
  tok = ByteBPETokenizer(tokens, ["a b", "ab c", "Ġ a"], special=["<s>"])
  # " ab": (a, b) has the lowest rank, so "Ġ" + "ab" (no "Ġa" merge afterwards)
  assert tok.encode("abc ab<s>a") == [5, 3, 4, 7, 0]
  assert tok.encode(" a") == [6]
  assert tok.decode(tok.encode("abc ab<s>a")) == "abc ab<s>a"

def test_wordpiece_matches_reference_tokenizers():
  tokenizers = pytest.importorskip("tokenizers", reason="the tokenizers package is the WordPiece reference")
  d = _skip_unless(assets.minilm_dir)
  ref = tokenizers.Tokenizer.from_file(str(d / "tokenizer.json"))
  ref.no_padding()  # tokenizer.json pads to 128
  ref.no_truncation()
  ours, ours_json = WordPieceTokenizer.from_vocab_txt(d / "vocab.txt"), WordPieceTokenizer.from_tokenizer_json(d / "tokenizer.json")
  for text in TEXTS:
    want = ref.encode(text).ids
    assert ours.encode(text) == want == ours_json.encode(text), text

def test_byte_bpe_matches_reference_built_from_gguf():
  tokenizers = pytest.importorskip("tokenizers", reason="the tokenizers package is the BPE reference")
  g = load_gguf(_skip_unless(assets.smollm2_gguf))
  md = g.metadata
  ours = ByteBPETokenizer.from_gguf_metadata(md)
  vocab = {t: i for i, t in enumerate(md["tokenizer.ggml.tokens"])}
  merges = [tuple(m.split(" ", 1)) for m in md["tokenizer.ggml.merges"]]
  ref = tokenizers.Tokenizer(tokenizers.models.BPE(vocab, merges))
  ref.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
  ref.add_special_tokens([t for t, ty in zip(md["tokenizer.ggml.tokens"], md["tokenizer.ggml.token_type"]) if ty == 3])
  for text in TEXTS:
    assert ours.encode(text) == ref.encode(text).ids, text
    assert ours.decode(ours.encode(text)) == text
  assert ours.encode("<|im_start|>assistant\n") == [1, 520, 9531, 198]
