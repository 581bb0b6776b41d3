"""State dicts of nested objects, load_state_dict, and safetensors files (format, round trip, corrupt-file errors)."""
from __future__ import annotations
import json, struct
from collections import namedtuple, OrderedDict
import numpy as np
import pytest
from tinysched import Tensor, dtypes, nn
from tinysched.nn.state import get_state_dict, get_parameters, load_state_dict, safe_save, safe_load, safe_load_metadata, SafetensorsError
from tinysched.nn.optim import Adam
from tests.helpers import rand, assert_close

class Block:
  def __init__(self):
    self.norm, self.fc = nn.LayerNorm(4), nn.Linear(4, 4)
    self.name, self.scale = "block", 0.5  # non-tensor attributes are skipped
class Model:
  def __init__(self):
    self.embed = nn.Embedding(10, 4)
    self.blocks = [Block(), Block()]
    self.heads = {"cls": nn.Linear(4, 3), "reg": nn.Linear(4, 1, bias=False)}
    self.pair = (Tensor.zeros(2), Tensor.ones(2))

NAMES = ["embed.weight", "blocks.0.norm.weight", "blocks.0.norm.bias", "blocks.0.fc.weight", "blocks.0.fc.bias",
         "blocks.1.norm.weight", "blocks.1.norm.bias", "blocks.1.fc.weight", "blocks.1.fc.bias",
         "heads.cls.weight", "heads.cls.bias", "heads.reg.weight", "pair.0", "pair.1"]

def test_get_state_dict_names_and_order():
  m = Model()
  sd = get_state_dict(m)
  assert list(sd) == NAMES  # attribute / list / dict order: deterministic
  assert sd["blocks.1.fc.weight"] is m.blocks[1].fc.weight
  assert list(get_state_dict(m, prefix="model.")) == ["model." + n for n in NAMES]
  assert list(get_state_dict(Model())) == NAMES  # the same for a fresh instance
  NT = namedtuple("NT", ["a", "b"])
  assert list(get_state_dict(NT(Tensor([1]), {"x": [Tensor([2])]}))) == ["a", "b.x.0"]
  assert list(get_state_dict(OrderedDict(z=Tensor([1]), a=Tensor([2])))) == ["z", "a"]

def test_get_state_dict_cycles_and_shared():
  m = Model()
  m.parent = m                     # a cycle must not recurse forever
  m.tied = m.heads["cls"].weight   # a shared tensor shows under both names...
  sd = get_state_dict(m)
  assert "tied" in sd and sd["tied"] is sd["heads.cls.weight"]
  params = get_parameters(m)
  assert len(params) == len(NAMES)  # ...but is one parameter
  assert all(isinstance(p, Tensor) for p in params)

def test_load_state_dict_round_trip_in_place():
  src, dst = Model(), Model()
  dst_sd = get_state_dict(dst)
  for t in dst_sd.values(): t.realize()
  buf = dst.blocks[0].fc.weight.lazydata.base.buffer
  load_state_dict(dst, get_state_dict(src))
  for k, v in get_state_dict(src).items(): assert_close(dst_sd[k], v.numpy())
  assert dst.blocks[0].fc.weight.lazydata.base.buffer is buf  # copied into the existing buffer
  # the loaded tensors do not alias the source: updating one leaves the other alone
  src_w = src.heads["cls"].weight.numpy()
  dst.heads["cls"].weight.assign(dst.heads["cls"].weight * 0).realize()
  assert_close(src.heads["cls"].weight, src_w)

def test_load_state_dict_unrealized_targets_do_not_alias():
  src = {"weight": Tensor(rand(3, 2)).realize(), "bias": Tensor(rand(3)).realize()}
  lin = nn.Linear(2, 3)
  load_state_dict(lin, src)
  assert lin.weight.lazydata.base.buffer is not src["weight"].lazydata.base.buffer
  assert_close(lin.weight, src["weight"].numpy())

def test_load_state_dict_casts_and_errors():
  lin = nn.Linear(2, 3)
  load_state_dict(lin, {"weight": Tensor(np.ones((3, 2), np.float64)), "bias": Tensor([1, 2, 3])})
  assert lin.weight.dtype == dtypes.float32 and lin.bias.dtype == dtypes.float32
  assert_close(lin.bias, np.array([1, 2, 3], np.float32))
  with pytest.raises(KeyError, match=r"missing keys \['bias'\]"): load_state_dict(lin, {"weight": Tensor.ones(3, 2)})
  with pytest.raises(KeyError, match=r"unexpected keys \['extra'\]"):
    load_state_dict(lin, {"weight": Tensor.ones(3, 2), "bias": Tensor.ones(3), "extra": Tensor.ones(1)})
  with pytest.raises(ValueError, match=r"shape mismatch for 'weight': model has \(3, 2\), state dict has \(2, 3\)"):
    load_state_dict(lin, {"weight": Tensor.ones(2, 3), "bias": Tensor.ones(3)})
  load_state_dict(lin, {"bias": Tensor.zeros(3), "extra": Tensor.ones(1)}, strict=False)  # non-strict: partial is fine
  assert_close(lin.bias, np.zeros(3, np.float32))
  sd = {"weight": Tensor.ones(3, 2), "bias": Tensor.ones(3)}
  load_state_dict(lin, sd, consume=True)
  assert sd == {}

def test_load_state_dict_into_trained_params():
  lin = nn.Linear(2, 2)
  opt = Adam(get_parameters(lin), lr=0.1)
  with Tensor.train():
    lin(Tensor(rand(3, 2))).sum().backward()
    opt.step()
  load_state_dict(lin, {"weight": Tensor.zeros(2, 2), "bias": Tensor.ones(2)})  # params require grad: still loadable
  assert_close(lin.weight, np.zeros((2, 2), np.float32))
  assert lin.weight.requires_grad is True

# *** safetensors ***

ALL_DTYPES = [np.bool_, np.uint8, np.int8, np.int16, np.uint16, np.float16, np.int32, np.uint32, np.float32, np.float64, np.int64, np.uint64]

def test_safetensors_round_trip_all_dtypes(tmp_path):
  tensors = {f"t_{np.dtype(d).name}": Tensor(rand(2, 3, dtype=d, low=0, high=100, seed=i)) for i, d in enumerate(ALL_DTYPES)}
  tensors["scalar"] = Tensor(3.5)
  tensors["empty"] = Tensor.zeros(0, 4)
  fn = tmp_path / "all.safetensors"
  safe_save(tensors, fn, metadata={"format": "pt", "who": "test"})
  loaded = safe_load(fn)
  assert list(loaded) == list(tensors)
  for k, t in tensors.items():
    assert loaded[k].dtype == t.dtype and loaded[k].shape == t.shape
    assert_close(loaded[k], t.numpy())
  assert safe_load_metadata(fn) == {"format": "pt", "who": "test"}

def test_safetensors_format_bytes(tmp_path):
  fn = tmp_path / "fmt.safetensors"
  safe_save({"a": Tensor(np.array([1.0, 2.0], np.float32)), "b": Tensor(np.array([[7]], np.int64))}, fn)
  raw = fn.read_bytes()
  (n,) = struct.unpack("<Q", raw[:8])
  header = json.loads(raw[8:8 + n])
  assert (8 + n) % 8 == 0  # data is aligned
  assert header["a"] == {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}
  assert header["b"] == {"dtype": "I64", "shape": [1, 1], "data_offsets": [8, 16]}
  assert raw[8 + n:] == np.array([1.0, 2.0], "<f4").tobytes() + np.array([7], "<i8").tobytes()

def test_safetensors_model_round_trip(tmp_path):
  src, dst = Model(), Model()
  fn = tmp_path / "model.safetensors"
  safe_save(get_state_dict(src), fn)
  load_state_dict(dst, safe_load(fn))
  x = Tensor(np.array([[1, 2, 3]], np.int32))
  h_src, h_dst = src.embed(x), dst.embed(x)
  assert_close(src.heads["cls"](h_src), dst.heads["cls"](h_dst).numpy())

def _write(fn, header_obj=None, data: bytes = b"", raw_header: bytes | None = None, declared_len: int | None = None):
  hdr = raw_header if raw_header is not None else json.dumps(header_obj).encode()
  fn.write_bytes(struct.pack("<Q", len(hdr) if declared_len is None else declared_len) + hdr + data)
  return fn

@pytest.mark.parametrize("case,match", [
  ("missing", r"cannot open safetensors file"),
  ("short", r"not a safetensors file: 3 bytes"),
  ("header_too_long", r"header length 1000 exceeds the file size"),
  ("bad_json", r"invalid JSON"),
  ("not_object", r"expected a JSON object"),
  ("missing_field", r"entry 'w' needs dtype, shape and data_offsets"),
  ("bad_dtype", r"tensor 'w' has unsupported dtype 'Q8'"),
  ("bad_shape", r"tensor 'w' has an invalid shape \[-1\]"),
  ("bad_offsets", r"tensor 'w' has invalid data_offsets \[8, 0\]"),
  ("size_mismatch", r"tensor 'w' \(F32 \[3\]\) needs 12 bytes, data_offsets \[0, 8\] span 8"),
  ("truncated", r"tensor 'w' data_offsets \[0, 16\] run past the end of the data \(8 bytes\)"),
  ("overlap", r"tensors 'a' and 'b' have overlapping data"),
])
def test_safetensors_corrupt_files(tmp_path, case, match):
  fn = tmp_path / f"{case}.safetensors"
  if case == "short": fn.write_bytes(b"abc")
  elif case == "header_too_long": _write(fn, {}, declared_len=1000)
  elif case == "bad_json": _write(fn, raw_header=b"{not json")
  elif case == "not_object": _write(fn, [1, 2])
  elif case == "missing_field": _write(fn, {"w": {"dtype": "F32", "shape": [2]}}, b"\0" * 8)
  elif case == "bad_dtype": _write(fn, {"w": {"dtype": "Q8", "shape": [2], "data_offsets": [0, 2]}}, b"\0" * 2)
  elif case == "bad_shape": _write(fn, {"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}, b"\0" * 4)
  elif case == "bad_offsets": _write(fn, {"w": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}}, b"\0" * 8)
  elif case == "size_mismatch": _write(fn, {"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, b"\0" * 8)
  elif case == "truncated": _write(fn, {"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, b"\0" * 8)
  elif case == "overlap":
    _write(fn, {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}},
           b"\0" * 12)
  with pytest.raises(SafetensorsError, match=match) as e: safe_load(fn)
  assert str(fn) in str(e.value)  # every error names the file
  assert isinstance(e.value, ValueError)

def test_safetensors_bad_metadata(tmp_path):
  fn = _write(tmp_path / "meta.safetensors", {"__metadata__": {"a": 1}})
  with pytest.raises(SafetensorsError, match="__metadata__ must map str to str"): safe_load_metadata(fn)
  assert safe_load(fn) == {}  # no tensors

def test_safe_save_errors(tmp_path):
  with pytest.raises(TypeError, match="'x' is a ndarray"): safe_save({"x": np.zeros(2)}, tmp_path / "a.safetensors")
  with pytest.raises(ValueError, match="__metadata__"): safe_save({"__metadata__": Tensor([1])}, tmp_path / "a.safetensors")
  with pytest.raises(TypeError, match="metadata must map str to str"): safe_save({}, tmp_path / "a.safetensors", metadata={"a": 1})
