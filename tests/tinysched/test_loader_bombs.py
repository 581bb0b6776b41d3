"""Hostile weight files: each bomb is crafted in tmp_path and loaded in a subprocess under RLIMIT_AS (1 GiB). The loader
must refuse it with its own error type (GGUFError, SafetensorsError, PthError), a message naming the file and the problem,
raised by the loader itself (no RecursionError/OverflowError/ValueError chained from deep inside), and without the memory
cap being hit (a MemoryError or a peak RSS near the cap fails the test)."""
from __future__ import annotations
import json, os, struct, subprocess, sys, textwrap, zipfile
import numpy as np
import pytest

AS_LIMIT = 1 << 30           # address-space cap of the loader subprocess
RSS_LIMIT_MB = 400           # what a refused bomb may cost at peak (the interpreter and numpy take ~30 MB)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_RUNNER = textwrap.dedent("""
  import json, os, resource, sys, traceback
  resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))
  kind, path = sys.argv[1], sys.argv[2]
  if kind == "gguf":
    from tinysched.models.gguf import GGUFError as Err, load_gguf
    def load(p):
      f = load_gguf(p)
      return [f.tensor(n) for n in f.tensors]
  elif kind == "safetensors":
    from tinysched.nn.state import SafetensorsError as Err, safe_load as load
  else:
    from tinysched.models.pth import PthError as Err, load_pth as load
  try:
    load(path)
    res = {{"outcome": "loaded"}}
  except Err as e:
    tb = traceback.extract_tb(e.__traceback__)
    res = {{"outcome": "refused", "type": type(e).__name__, "msg": str(e), "frames": len(tb),
           "chained": type(e.__cause__ or (None if e.__suppress_context__ else e.__context__)).__name__}}
  # VmHWM, not ru_maxrss: Linux carries ru_maxrss over exec from the (possibly big) parent, VmHWM is this image's own peak
  res["maxrss_mb"] = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:")) // 1024
  print("RESULT " + json.dumps(res))
""")

def run_loader(kind: str, path) -> dict:
  env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", PYTHONPATH=ROOT)
  p = subprocess.run([sys.executable, "-c", _RUNNER.format(limit=AS_LIMIT), kind, str(path)], capture_output=True, text=True,
                     env=env, timeout=300, cwd=ROOT)
  assert "MemoryError" not in p.stderr, f"the memory cap was hit:\n{p.stderr[-3000:]}"
  assert p.returncode == 0, f"the loader crashed with a foreign exception (rc {p.returncode}):\n{p.stderr[-3000:]}"
  line = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
  assert line, p.stdout + p.stderr
  return json.loads(line[-1][len("RESULT "):])

def assert_refused(res: dict, err: str, path, *words: str, max_frames: int = 30) -> None:
  assert res["outcome"] == "refused", f"the bomb loaded: {res}"
  assert res["type"] == err, res
  assert str(path) in res["msg"], f"the message does not name the file: {res['msg']}"
  for w in words: assert w in res["msg"], f"{w!r} not in {res['msg']!r}"
  assert res["chained"] == "NoneType", f"chained from a foreign {res['chained']}: {res}"
  assert res["frames"] < max_frames, f"raised {res['frames']} frames deep: {res}"
  assert res["maxrss_mb"] < RSS_LIMIT_MB, res

# *** GGUF ***

def _s(x: str) -> bytes: return struct.pack("<Q", len(x.encode())) + x.encode()

def _gguf(path, kv: bytes = b"", n_kv: int = 0, infos: bytes = b"", n_tensors: int = 0, data: bytes = b"") -> None:
  head = b"GGUF" + struct.pack("<IQQ", 3, n_tensors, n_kv) + kv + infos
  head += b"\0" * (-len(head) % 32)
  path.write_bytes(head + data)

def test_gguf_deeply_nested_arrays(tmp_path):
  path, depth = tmp_path / "nested.gguf", 100_000
  kv = _s("bomb") + struct.pack("<I", 9) + struct.pack("<IQ", 9, 1) * depth + struct.pack("<IQ", 4, 0)
  _gguf(path, kv, 1)
  assert_refused(run_loader("gguf", path), "GGUFError", path, "nested", "bomb")

@pytest.mark.parametrize("value", ["32x", "64"])
def test_gguf_alignment_not_an_integer(tmp_path, value):
  path = tmp_path / "align.gguf"
  _gguf(path, _s("general.alignment") + struct.pack("<I", 8) + _s(value), 1)
  assert_refused(run_loader("gguf", path), "GGUFError", path, "general.alignment", "str")

def test_gguf_dims_overflow_int64(tmp_path):
  path = tmp_path / "dims.gguf"
  info = _s("w") + struct.pack("<I", 2) + struct.pack("<QQ", 1 << 32, 1 << 32) + struct.pack("<IQ", 0, 0)
  _gguf(path, infos=info, n_tensors=1, data=b"\0" * 64)
  assert_refused(run_loader("gguf", path), "GGUFError", path, "'w'")

def test_gguf_huge_counts_refused_early(tmp_path):
  path = tmp_path / "counts.gguf"
  kv = _s("toks") + struct.pack("<I", 9) + struct.pack("<IQ", 8, 1 << 62)
  _gguf(path, kv, 1)
  assert_refused(run_loader("gguf", path), "GGUFError", path, "toks")

# *** safetensors ***

def _st(path, header: bytes | str, data: bytes = b"") -> None:
  h = header.encode() if isinstance(header, str) else header
  h += b" " * (-len(h) % 8)
  path.write_bytes(struct.pack("<Q", len(h)) + h + data)

def test_safetensors_deeply_nested_header(tmp_path):
  path, depth = tmp_path / "nested.safetensors", 100_000
  _st(path, '{"a":' + "[" * depth + "]" * depth + "}")
  assert_refused(run_loader("safetensors", path), "SafetensorsError", path, "nest")

@pytest.mark.parametrize("shape", [[1 << 70], [1 << 32, 1 << 32], [0, 1 << 63]])
def test_safetensors_huge_shape(tmp_path, shape):
  path = tmp_path / "shape.safetensors"
  _st(path, json.dumps({"a": {"dtype": "F32", "shape": shape, "data_offsets": [0, 0]}}))
  assert_refused(run_loader("safetensors", path), "SafetensorsError", path, "'a'")

# *** .pth ***

def _bin_str(x: str) -> bytes: return b"X" + struct.pack("<I", len(x.encode())) + x.encode()
def _bin_int(x: int) -> bytes:
  if x < 256: return b"K" + bytes([x])
  if x < 1 << 31: return b"J" + struct.pack("<i", x)
  n = (x.bit_length() + 8) // 8
  return b"\x8a" + bytes([n]) + x.to_bytes(n, "little")  # LONG1
def _tuple(xs) -> bytes: return b"(" + b"".join(_bin_int(x) for x in xs) + b"t"

def _tensor(stype: str, key: str, numel: int, size, stride) -> bytes:
  storage = b"(" + _bin_str("storage") + f"ctorch\n{stype}\n".encode() + _bin_str(key) + _bin_str("cpu") + _bin_int(numel) + b"tQ"
  return b"ctorch._utils\n_rebuild_tensor_v2\n(" + storage + b"K\x00" + _tuple(size) + _tuple(stride) + b"\x89}tR"

def _state_pickle(tensors: dict[str, bytes]) -> bytes:
  return b"\x80\x02}(" + b"".join(_bin_str(k) + v for k, v in tensors.items()) + b"u."

def test_pth_stride0_expansion(tmp_path):
  path = tmp_path / "stride0.pth"
  with zipfile.ZipFile(path, "w") as zf:
    zf.writestr("archive/data.pkl", _state_pickle({"w": _tensor("DoubleStorage", "0", 1, [1 << 28], [0])}))
    zf.writestr("archive/data/0", np.float64(1.0).tobytes())
  assert_refused(run_loader("pth", path), "PthError", path, "'w'", "expands")

def test_pth_many_stride0_views_within_the_per_tensor_size(tmp_path):
  # eight stride-0 views of 128 MiB each: no single one looks absurd, together they are 1 GiB from an 8-byte storage
  path = tmp_path / "views.pth"
  with zipfile.ZipFile(path, "w") as zf:
    zf.writestr("archive/data.pkl", _state_pickle({f"w{i}": _tensor("DoubleStorage", "0", 1, [1 << 24], [0]) for i in range(8)}))
    zf.writestr("archive/data/0", np.float64(1.0).tobytes())
  assert_refused(run_loader("pth", path), "PthError", path, "expand")

def _zinfo(name):
  zi = zipfile.ZipInfo(name)
  zi.compress_type = zipfile.ZIP_DEFLATED
  return zi

def test_pth_deflated_storage_bomb(tmp_path):
  path, n = tmp_path / "deflate.pth", 1 << 30
  with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
    zf.writestr(_zinfo("archive/data.pkl"), _state_pickle({"w": _tensor("DoubleStorage", "0", n // 8, [n // 8], [1])}))
    with zf.open(_zinfo("archive/data/0"), "w", force_zip64=True) as f:
      chunk = bytes(16 << 20)
      for _ in range(n // len(chunk)): f.write(chunk)
  assert os.path.getsize(path) < 8 << 20
  assert_refused(run_loader("pth", path), "PthError", path, "'0'", "decompress")

def test_pth_deflated_pickle_bomb(tmp_path):
  # a data.pkl entry that inflates to 1 GiB (a pickle that would be one huge bytes object)
  path, n = tmp_path / "deflate_pkl.pth", 1 << 30
  with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
    with zf.open(_zinfo("archive/data.pkl"), "w", force_zip64=True) as f:
      f.write(b"\x80\x02B" + struct.pack("<I", n - 8))
      chunk = bytes(16 << 20)
      for _ in range(n // len(chunk)): f.write(chunk)
  assert_refused(run_loader("pth", path), "PthError", path, "data.pkl", "decompress")

def test_pth_storage_claims_more_than_the_entry(tmp_path):
  path = tmp_path / "claim.pth"
  with zipfile.ZipFile(path, "w") as zf:
    zf.writestr("archive/data.pkl", _state_pickle({"w": _tensor("DoubleStorage", "0", 1 << 27, [1 << 27], [1])}))
    zf.writestr("archive/data/0", np.float64(1.0).tobytes())
  assert_refused(run_loader("pth", path), "PthError", path, "'0'")

def test_pth_legit_small_files_still_load(tmp_path):
  # a stride-0 view of modest size and a deflated (re-zipped) storage both still load
  path = tmp_path / "ok.pth"
  with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
    zf.writestr("archive/data.pkl", _state_pickle({"e": _tensor("FloatStorage", "0", 4, [3, 4], [0, 1]),
                                                   "v": _tensor("FloatStorage", "0", 4, [2], [2])}))
    zf.writestr("archive/data/0", np.arange(4, dtype=np.float32).tobytes())
  from tinysched.models.pth import load_pth
  out = load_pth(path)
  np.testing.assert_array_equal(out["e"], np.tile(np.arange(4, dtype=np.float32), (3, 1)))
  np.testing.assert_array_equal(out["v"], np.array([0, 2], np.float32))

def _zip_pickle(path, payload: bytes) -> None:
  with zipfile.ZipFile(path, "w") as zf: zf.writestr("archive/data.pkl", payload)

def test_pth_shared_list_dag(tmp_path):
  # l = [l, l] 50 times: 50 pickled lists, 2^50 paths; walked path by path it never ends (and copies exponentially)
  import pickle
  l: list = []
  for _ in range(50): l = [l, l]
  path = tmp_path / "dag.pth"
  _zip_pickle(path, pickle.dumps(l, protocol=2))
  res = run_loader("pth", path)
  assert res["outcome"] == "loaded" and res["maxrss_mb"] < RSS_LIMIT_MB, res

def test_pth_reference_cycle_and_deep_nesting(tmp_path):
  path = tmp_path / "cycle.pth"
  _zip_pickle(path, b"\x80\x02]q\x00h\x00a.")  # a list that contains itself
  res = run_loader("pth", path)
  assert res["outcome"] == "loaded", res
  _zip_pickle(path, b"\x80\x02" + b"]" * 10_000 + b"a" * 9_999 + b".")  # lists nested 10,000 deep
  # refused at the loader's own nesting limit (64), so the error is raised from ~2 frames per level, not 10,000 levels down
  assert_refused(run_loader("pth", path), "PthError", path, "nests", max_frames=200)

def test_pth_empty_tensor_with_a_huge_dim(tmp_path):
  path = tmp_path / "empty.pth"
  with zipfile.ZipFile(path, "w") as zf:
    zf.writestr("archive/data.pkl", _state_pickle({"w": _tensor("FloatStorage", "0", 1, [0, 1 << 63], [1, 1])}))
    zf.writestr("archive/data/0", np.float32(1).tobytes())
  assert_refused(run_loader("pth", path), "PthError", path, "'w'", "too large")
