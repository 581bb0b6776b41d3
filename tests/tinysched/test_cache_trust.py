"""Caches that can only give back what was put in for the key asked (issue 38): every disk entry (OpenCL binaries, batch
pointers, batch sources and binaries, rendered programs, the fp16 probe's answer) records its whole key and a hash, and
one copied over another is refused (counted, reported once) and built again; a cache folder another user owns or can
write is not used at all; folders are 0700 and entries 0600 whatever the umask; a launch size no kernel was made for is
refused before it is enqueued. Each check has its plant: the check taken away, the wrong numbers (or launch) appear."""
from __future__ import annotations
import hashlib, os, shutil, stat, tempfile
from pathlib import Path
import numpy as np
import pytest
import tinysched.helpers as H
import tinysched.codegen.program_cache as PC
from tinysched import Tensor, dtypes
from tinysched.ops import Ops
from tinysched.device import Buffer, Device
from tinysched.codegen.program import to_program
from tinysched.codegen.target import GENERIC_GPU, Target
from tests.tinysched.kernels import HAS_CL, needs_cl

if HAS_CL:
  import pyopencl as cl
  from tinysched.runtime import opencl as clrt

@pytest.fixture
def cache(tmp_path, monkeypatch):
  """A fresh cache root (made by the code under test), and this process's rejection counts and warnings forgotten."""
  root = tmp_path / "ts"
  monkeypatch.setenv("TINYSCHED_CACHE", str(root))
  monkeypatch.delenv("TINYSCHED_DISK_CACHE", raising=False)
  monkeypatch.setattr(H, "_rejected", {})
  monkeypatch.setattr(H, "_warned_folders", set())
  monkeypatch.setattr(H, "_written", {})
  return root

def _ast(t: Tensor):
  return next(si.ast for si in t.schedule_with_vars()[0] if si.ast.op is Ops.SINK)

def _src(name: str, body: str) -> str:
  return f"__kernel void {name}(__global float* data0, __global const float* data1) {{ int i = get_global_id(0); data0[i] = {body}; }}\n"

X = np.arange(8, dtype=np.float32)
PLUS, TIMES = _src("same_name", "data1[i] + 1.0f"), _src("same_name", "data1[i] * 2.0f")  # two kernels, one name

def _fresh():
  """A device object on the OpenCL device with nothing in memory, as in a new process."""
  return clrt._CLDevice("OPENCL", Device["OPENCL"].dev.device)  # type: ignore[attr-defined]

def _run(dev, name: str, src: str) -> np.ndarray:
  """data0[i] = f(data1[i]) on X, through dev.kernel (the disk cache)."""
  from tests.tinysched.test_opencl import _run_k  # (at use: that module needs an OpenCL device at import, checked above)
  return _run_k(dev.kernel(name, src), dev, X)

def _rejections(folder: Path) -> int: return H.cache_rejections().get(str(folder), 0)

# *** (a) OpenCL entries copied over another kernel's ***

@needs_cl
def test_a_binary_copied_over_a_same_named_kernels_entry_is_refused(cache, monkeypatch, capsys):
  dev = _fresh()
  dev.kernel("same_name", PLUS), dev.kernel("same_name", TIMES)
  folder = cache / "opencl"
  plus, times = folder / f"{dev.cache_key(PLUS)}.bin", folder / f"{dev.cache_key(TIMES)}.bin"
  assert plus.read_bytes() != times.read_bytes() and plus.read_bytes().startswith(clrt._MAGIC)
  times.write_bytes(plus.read_bytes())  # the `times` kernel's entry now holds the `plus` binary (a file's checksum still holds)
  later = _fresh()
  np.testing.assert_array_equal(_run(later, "same_name", TIMES), X * 2)
  assert later.single_builds == 1 and _rejections(folder) == 1  # refused, counted, built from source
  err = capsys.readouterr().err
  assert f"ignored a disk cache entry in {folder}" in err and "another key" in err
  assert clrt._disk_load(times, clrt._BIN, later.kernel_key(TIMES)) is not None  # written again, for its own key
  # reported once per folder per process, counted every time
  times.write_bytes(plus.read_bytes())
  _run(_fresh(), "same_name", TIMES)
  assert _rejections(folder) == 2 and "ignored" not in capsys.readouterr().err
  # planted: the recorded key not compared; the same-named kernel's binary runs and the numbers are wrong
  times.write_bytes(plus.read_bytes())
  monkeypatch.setattr(clrt, "_key_matches", lambda recorded, wanted: True)
  planted = _fresh()
  np.testing.assert_array_equal(_run(planted, "same_name", TIMES), X + 1)
  assert planted.single_builds == 0

@needs_cl
@pytest.mark.parametrize("what", ["pointer", "batch_source", "batch_binary"])
def test_a_batch_entry_copied_over_another_is_refused(cache, monkeypatch, what):
  """Two batches, each holding a kernel named same_name: one batch's pointer (a kernel's entry naming its batch), source
  or binary copied over the other's. The batch's membership check (_holds) is taken away throughout, so that only the
  recorded keys stand between the copy and the wrong kernel."""
  monkeypatch.setattr(clrt, "_holds", lambda bsrc, src: True)
  if what == "batch_binary": monkeypatch.setattr(clrt, "_own_disk_cache", lambda d: False)  # a batch's binary is kept
  dev = _fresh()
  others = [(f"other_{i}", _src(f"other_{i}", f"data1[i] - {i}.0f")) for i in range(2)]
  assert dev.prebuild([("same_name", PLUS), others[0]]) == 2 and dev.prebuild([("same_name", TIMES), others[1]]) == 2
  folder = cache / "opencl"
  h_plus, h_times = dev.batch_sources
  assert dev.batch_sources[h_plus].startswith(PLUS) and dev.batch_sources[h_times].startswith(TIMES)
  src_of, dst_of = {"pointer": (folder / f"{dev.cache_key(PLUS)}.bin", folder / f"{dev.cache_key(TIMES)}.bin"),
                    "batch_source": (folder / f"batch-{h_plus}.src", folder / f"batch-{h_times}.src"),
                    "batch_binary": (folder / f"batch-{h_plus}.bin", folder / f"batch-{h_times}.bin")}[what]
  kept = {p: p.read_bytes() for p in folder.iterdir()}  # (a refused entry's kernel is stored again: put every file back first)
  def swapped_run():
    for p, data in kept.items(): p.write_bytes(data)
    dst_of.write_bytes(kept[src_of])
    later = _fresh()
    return _run(later, "same_name", TIMES), later
  got, later = swapped_run()
  np.testing.assert_array_equal(got, X * 2)
  assert _rejections(folder) == 1
  if what == "batch_binary": assert later.single_builds == 0  # the batch is built from its (intact) source instead
  # planted: keys not compared; the other batch's same-named kernel runs
  monkeypatch.setattr(clrt, "_key_matches", lambda recorded, wanted: True)
  got, _ = swapped_run()
  np.testing.assert_array_equal(got, X + 1)

@needs_cl
def test_entries_of_the_earlier_format_are_a_plain_miss(cache, capsys):
  dev = _fresh()
  dev.kernel("same_name", TIMES)
  entry = cache / "opencl" / f"{dev.cache_key(TIMES)}.bin"
  old = b"TSCL1\n" + hashlib.sha256(b"x").digest() + b"x"
  entry.write_bytes(old)
  later = _fresh()
  np.testing.assert_array_equal(_run(later, "same_name", TIMES), X * 2)
  assert later.single_builds == 1 and not H.cache_rejections() and "ignored" not in capsys.readouterr().err
  entry.write_bytes(b"TSCL2\n" + b"\xff" * 40)  # this format, corrupted: refused and counted
  assert np.array_equal(_run(_fresh(), "same_name", TIMES), X * 2) and _rejections(entry.parent) == 1

# *** (b) program-cache entries ***

def test_a_swapped_program_cache_entry_is_refused(cache, monkeypatch, capsys):
  monkeypatch.setenv("TINYSCHED_PROGRAM_CACHE", "1")
  a, b = _ast(Tensor.empty(64) + 1), _ast(Tensor.empty(64) * 2)
  want_a, want_b = to_program(a, None, GENERIC_GPU), to_program(b, None, GENERIC_GPU)
  assert PC.cached_program(a, None, GENERIC_GPU) == want_a and PC.cached_program(b, None, GENERIC_GPU) == want_b
  folder = cache / "programs"
  fa, fb = folder / f"{PC.entry_key(a, None, GENERIC_GPU)}.json", folder / f"{PC.entry_key(b, None, GENERIC_GPU)}.json"
  def swap() -> None:
    ta, tb = fa.read_text(), fb.read_text()
    fa.write_text(tb), fb.write_text(ta)
  swap()
  assert PC.cached_program(a, None, GENERIC_GPU) == want_a and PC.cached_program(b, None, GENERIC_GPU) == want_b
  assert _rejections(folder) == 2 and f"ignored a disk cache entry in {folder}" in capsys.readouterr().err
  assert PC._decode(fa.read_text(), PC.key_material(a, None, GENERIC_GPU)) == want_a  # written again, for its own key
  # an entry whose program was edited (its hash no longer holds) is refused too
  fa.write_text(fa.read_text().replace('"global": [', '"global": [2, '))
  assert PC.cached_program(a, None, GENERIC_GPU) == want_a and _rejections(folder) == 3
  # planted: the recorded key not compared; each AST gets the other's program (the execution check would say `wrong`)
  swap()
  monkeypatch.setattr(PC, "_key_matches", lambda recorded, wanted: True)
  assert PC.cached_program(a, None, GENERIC_GPU) == want_b

def test_a_program_entry_of_the_earlier_format_is_a_plain_miss(cache, monkeypatch):
  monkeypatch.setenv("TINYSCHED_PROGRAM_CACHE", "1")
  a = _ast(Tensor.empty(32) + 3)
  want = PC.cached_program(a, None, GENERIC_GPU)
  (entry,) = (cache / "programs").glob("*.json")
  entry.write_text('{"name": "x", "src": "", "global": [1], "local": null, "dtypes": [], "outs": [], "opts": [], "local_mem": 0}')
  assert PC.cached_program(a, None, GENERIC_GPU) == want and not H.cache_rejections()

# *** (c) whose folders are read; modes ***

def _forge_program(folder: Path, ast, target, prg) -> None:
  """A well-formed entry (right key, right hash) that holds `prg`: what another user with write access could leave."""
  key = PC.key_material(ast, None, PC.device_class(target))
  H.write_atomic(folder / f"{hashlib.sha256(key.encode()).hexdigest()}.json", PC._encode(prg, key).encode())

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another user needs root")

@needs_root
@pytest.mark.parametrize("owned", ["root", "programs"])
def test_a_cache_folder_of_another_user_is_not_used(cache, monkeypatch, capsys, owned):
  monkeypatch.setenv("TINYSCHED_PROGRAM_CACHE", "1")
  a, b = _ast(Tensor.empty(64) + 1), _ast(Tensor.empty(64) * 2)
  want_a, want_b = to_program(a, None, GENERIC_GPU), to_program(b, None, GENERIC_GPU)
  folder = cache / "programs"
  folder.mkdir(parents=True)
  _forge_program(folder, a, GENERIC_GPU, want_b)  # planted by the folder's owner: passes every check of the entry itself
  victim = cache if owned == "root" else folder
  os.chown(victim, 12345, 12345)
  files = sorted(folder.iterdir())
  assert PC.cached_program(a, None, GENERIC_GPU) == want_a and PC.cached_program(b, None, GENERIC_GPU) == want_b
  assert sorted(folder.iterdir()) == files  # nothing read, nothing written
  err = capsys.readouterr().err
  assert f"not using the disk cache folder {victim}: it belongs to uid 12345" in err and "TINYSCHED_CACHE" in err
  PC.cached_program(a, None, GENERIC_GPU)
  assert "not using" not in capsys.readouterr().err  # one warning per folder per process
  # planted: folders not checked; the planted program is what `a` gets
  monkeypatch.setattr(PC, "trusted_cache_dir", lambda f: f)
  assert PC.cached_program(a, None, GENERIC_GPU) == want_b

@needs_cl
@needs_root
def test_an_opencl_cache_folder_of_another_user_is_not_used(cache, monkeypatch, capsys):
  dev = _fresh()
  folder = cache / "opencl"
  dev.kernel("same_name", PLUS)
  binary = clrt._disk_load(folder / f"{dev.cache_key(PLUS)}.bin", clrt._BIN, dev.kernel_key(PLUS))
  # planted by the folder's owner: the plus binary, stored under the times kernel's own key (a well-formed entry)
  clrt._disk_store(folder / f"{dev.cache_key(TIMES)}.bin", clrt._BIN, dev.kernel_key(TIMES), binary)  # type: ignore[arg-type]
  os.chown(folder, 12345, 12345)
  later = _fresh()
  np.testing.assert_array_equal(_run(later, "same_name", TIMES), X * 2)
  assert later.single_builds == 1 and f"not using the disk cache folder {folder}: it belongs to uid 12345" in capsys.readouterr().err
  monkeypatch.setattr(clrt, "trusted_cache_dir", lambda f: f)  # planted: folders not checked
  np.testing.assert_array_equal(_run(_fresh(), "same_name", TIMES), X + 1)

@pytest.mark.parametrize("mode,who", [(0o777, "group and others"), (0o770, "group"), (0o702, "others")])
def test_a_cache_folder_others_can_write_is_not_used(cache, monkeypatch, capsys, mode, who):
  monkeypatch.setenv("TINYSCHED_PROGRAM_CACHE", "1")
  a, b = _ast(Tensor.empty(64) + 1), _ast(Tensor.empty(64) * 2)
  want_b = to_program(b, None, GENERIC_GPU)
  folder = cache / "programs"
  folder.mkdir(parents=True)
  _forge_program(folder, a, GENERIC_GPU, want_b)
  os.chmod(cache, mode)
  assert PC.cached_program(a, None, GENERIC_GPU) == to_program(a, None, GENERIC_GPU)
  err = capsys.readouterr().err
  assert f"not using the disk cache folder {cache}: it is writable by {who} (mode {mode:o})" in err and f"chmod 700 {cache}" in err
  os.chmod(cache, 0o700)  # fixed while the process runs: used again
  assert PC.cached_program(a, None, GENERIC_GPU) == want_b
  os.chmod(cache, mode)
  monkeypatch.setattr(PC, "trusted_cache_dir", lambda f: f)  # planted: folders not checked
  assert PC.cached_program(a, None, GENERIC_GPU) == want_b

def test_a_trusted_folder_is_made_0700_and_entries_0600_whatever_the_umask(tmp_path, monkeypatch, cache):
  monkeypatch.setenv("TINYSCHED_PROGRAM_CACHE", "1")
  root = tmp_path / "deep" / "er" / "ts"
  monkeypatch.setenv("TINYSCHED_CACHE", str(root))
  def modes() -> dict[str, int]:
    return {str(p.relative_to(tmp_path)): stat.S_IMODE(p.stat().st_mode) for p in [*root.parents][:3] + [root, *root.rglob("*")] if p != tmp_path}
  def write() -> None:
    PC.cached_program(_ast(Tensor.empty(48) - 1), None, GENERIC_GPU)
  old = os.umask(0)
  try:
    write()
    got = modes()
    assert got and all(m == (0o600 if Path(tmp_path / p).is_file() else 0o700) for p, m in got.items()), got
    assert any(Path(tmp_path / p).is_file() for p in got)
    # planted: folders made by a plain mkdir (the umask decides: 0777 here) are refused, and nothing is cached
    shutil.rmtree(tmp_path / "deep")
    real = H._make_private
    monkeypatch.setattr(H, "_make_private", lambda f: f.mkdir(parents=True, exist_ok=True))
    write()
    assert stat.S_IMODE(root.stat().st_mode) == 0o777 and not list(root.rglob("*.json"))
    # planted: an entry written without mkstemp's 0600
    monkeypatch.setattr(H, "_make_private", real)
    shutil.rmtree(tmp_path / "deep")
    def open_0666(dir, prefix):
      p = os.path.join(dir, prefix + "x")
      return os.open(p, os.O_CREAT | os.O_WRONLY, 0o666), p
    monkeypatch.setattr(tempfile, "mkstemp", open_0666)
    write()
    assert {stat.S_IMODE(p.stat().st_mode) for p in root.rglob("*.json")} == {0o666}
  finally: os.umask(old)

def test_a_cache_root_that_is_a_file_is_refused_with_a_warning(cache, monkeypatch, capsys):
  monkeypatch.setenv("TINYSCHED_PROGRAM_CACHE", "1")
  cache.parent.mkdir(parents=True, exist_ok=True)
  cache.write_text("not a folder")
  a = _ast(Tensor.empty(16) + 5)
  assert PC.cached_program(a, None, GENERIC_GPU) == to_program(a, None, GENERIC_GPU)
  assert f"not using the disk cache folder {cache}" in capsys.readouterr().err

# *** (d) the fp16 probe's answer ***

@needs_cl
def test_a_planted_fp16_probe_answer_is_ignored(cache, monkeypatch):
  d = Device["OPENCL"].dev.device  # type: ignore[attr-defined]
  runs: list = []
  monkeypatch.setattr(clrt, "_run_fp16_probe", lambda dev: runs.append(dev) or False)  # the truth, as far as this test goes
  folder = cache / "opencl"
  key = "\0".join(["fp16-probe", clrt._device_ident(d), clrt._FP16_PROBE]).encode()
  path = folder / f"fp16-probe-{hashlib.sha256(key).hexdigest()}"
  other = "\0".join(["fp16-probe", "another device\0another driver", clrt._FP16_PROBE]).encode()
  def ask() -> bool:
    clrt.probe_fp16.cache_clear()
    try: return clrt.probe_fp16(d)
    finally: clrt.probe_fp16.cache_clear()
  assert H.trusted_cache_dir(folder) == folder
  plants = [lambda: clrt._disk_store(path, clrt._FP16, other, b"1"),                            # another device's answer
            lambda: path.write_bytes(b"TSCL1\n" + hashlib.sha256(b"1").digest() + b"1"),          # the earlier format's
            lambda: path.write_bytes(b"TSCL2\nfp16" + b"\0" * 4 + b"\0" * 32 + b"1"),             # a hand-made one
            lambda: clrt._disk_store(path, clrt._FP16, key, b"yes")]                             # not an answer
  for i, plant in enumerate(plants):
    plant()
    assert ask() is False and len(runs) == i + 1, i  # asked again
    assert clrt._disk_load(path, clrt._FP16, key) == b"0"  # and the real answer kept
  assert _rejections(folder) == 3  # all but the earlier format's (a plain miss)
  assert ask() is False and len(runs) == len(plants)  # the kept answer serves the next process
  # planted: keys not compared; another device's "yes" is taken, and every half kernel here would be rendered native
  plants[0]()
  monkeypatch.setattr(clrt, "_key_matches", lambda recorded, wanted: True)
  assert ask() is True and len(runs) == len(plants)

# *** (e) launch sizes ***

SMALL = Target(name="small-gpu", max_work_group_size=256, max_work_item_sizes=(256, 128, 64))

def test_launch_bounds_refuse_sizes_no_kernel_was_made_for():
  from tinysched.runtime.opencl import launch_bounds, LaunchError
  e = to_program(_ast(Tensor.empty(1024) + 1), (), GENERIC_GPU)   # int gidx0 = get_global_id(0); /* 1024 */
  r = to_program(_ast(Tensor.empty(64, 768) @ Tensor.empty(768, 256)), None, GENERIC_GPU)  # group and local ids, 2 dims
  assert e.local_size is None and r.local_size is not None
  ok = lambda p, gs=None, ls="same": launch_bounds(p.name, p.src, p.global_size if gs is None else gs, p.local_size if ls == "same" else ls,  # noqa: E731
                                                   SMALL, 2**64 - 1)
  assert ok(e) == (1024,) and ok(r) == tuple(r.global_size)
  # past 2**31 where the kernel reads its id as a long (nothing is allocated: only the program is rendered)
  big = to_program(_ast(Tensor.empty((1 << 31) + 8, dtype=dtypes.int8) + 1), (), GENERIC_GPU)
  assert "long gidx0" in big.src and ok(big) == ((1 << 31) + 8,)
  with pytest.raises(LaunchError, match="past what the kernel or device can index"):
    launch_bounds(big.name, big.src, big.global_size, None, SMALL, 2**31 + 7)  # a device whose size_t is smaller
  hand = "__kernel void k(__global float* a) { a[get_global_id(0)] = 1.0f; }"  # no declared ids: only the general limits
  assert launch_bounds("k", hand, (2**31 - 1,), None, SMALL, 2**64 - 1) == (2**31 - 1,)
  bad = [(e, (2**31,), "same", "made for a global size of 1024"), (e, (2048,), "same", "made for a global size of 1024"),
         (e, (0,), "same", "at least 1"), (e, (-4,), "same", "at least 1"), (e, (1024, 1, 1, 1), "same", "1 to 3 global dims"),
         (e, (), "same", "1 to 3 global dims"), (e, (1024.0,), "same", "integers"), (e, (True,), "same", "integers"),
         (r, None, (512, 1), "more than small-gpu allows"), (r, None, (16, 256), "more than small-gpu allows"),
         (r, None, None, "no local size"), (r, None, (8, 16), "made for a"), (r, None, (16,), "does not match"),
         (r, None, (16, 0), "at least 1")]
  for p, gs, ls, why in bad:
    with pytest.raises(LaunchError, match=why): ok(p, gs, ls)
  for gs, why in (((2**31,), "past what the kernel or device can index"), ((12,), "multiples")):
    with pytest.raises(LaunchError, match=why): launch_bounds("k", hand, gs, (8,) if why == "multiples" else None, SMALL, 2**64 - 1)

@needs_cl
def test_plant_launch_bounds_without_the_declared_ids(monkeypatch):
  """The ids a generated kernel declares are what catch a size that is plausible but not its own (2048 for 1024)."""
  from tinysched.runtime.opencl import launch_bounds
  e = to_program(_ast(Tensor.empty(1024) + 1), (), GENERIC_GPU)
  monkeypatch.setattr(clrt, "_declared_ids", lambda src: ())
  assert launch_bounds(e.name, e.src, (2048,), None, SMALL, 2**64 - 1) == (2**31 - 1,)

@pytest.fixture
def enqueues(monkeypatch):
  """Every cl.enqueue_nd_range_kernel call, recorded and not run."""
  calls: list = []
  monkeypatch.setattr(cl, "enqueue_nd_range_kernel", lambda q, k, gs, ls, *a, **kw: calls.append((tuple(gs), ls)))
  return calls

@needs_cl
def test_a_corrupted_launch_from_the_program_cache_is_refused_before_it_runs(cache, monkeypatch, enqueues):
  monkeypatch.setenv("TINYSCHED_PROGRAM_CACHE", "1")
  from dataclasses import replace
  from tinysched.runtime.opencl import LaunchError
  dev = _fresh()
  ast = _ast(Tensor.empty(1024) + 1)
  good = dev.program(ast, None)
  assert good.vars == () and len(good.global_size) == 1
  bufs = [Buffer("OPENCL", 1024, dtypes.float32).allocate() for _ in range(2)]
  folder = cache / "programs"
  cases = [((2**31,), good.local_size), ((0,), good.local_size), ((-1,), good.local_size), ((good.global_size[0], 1, 1, 1), good.local_size)]
  if good.local_size is not None: cases.append((good.global_size, (good.local_size[0] * 8192,)))
  else: cases.append((good.global_size, (8192,)))
  at_launch = []
  for gs, ls in cases:
    bad = replace(good, global_size=gs, local_size=ls)
    _forge_program(folder, ast, dev.target, bad)  # a corrupted entry whose hash holds
    later = _fresh()
    if (p := later.program(ast, None)) == good:  # refused by the program cache (no launch has such sizes): rendered again
      assert _rejections(folder) >= 1 and (any(x <= 0 for x in gs) or len(gs) > 3), gs
      continue
    assert p == bad
    with pytest.raises(LaunchError, match=f"kernel {good.name}: launch refused before it ran"): later.launch(p, bufs, {})
    at_launch.append(gs)
  assert enqueues == [] and at_launch == [(2**31,), good.global_size]  # sizes the cache cannot tell are wrong: the launch can
  # planted: launches not checked; the corrupted size is enqueued (patched first: a patch changes the program cache's keys)
  monkeypatch.setattr(clrt, "launch_bounds", lambda *a: (2**64,) * 3)
  _forge_program(folder, ast, dev.target, replace(good, global_size=(2**31,)))
  later = _fresh()
  later.launch(later.program(ast, None), bufs, {})
  assert enqueues == [((2**31,), good.local_size)]

@needs_cl
def test_run_source_refuses_bad_sizes_and_argument_counts(cache, enqueues):
  from tinysched.runtime.opencl import LaunchError
  be = Device["OPENCL"]
  t = be.target  # type: ignore[attr-defined]
  bufs = [Buffer("OPENCL", 8, dtypes.float32).allocate() for _ in range(2)]
  src = _src("rs_k", "data1[i] + 1.0f")
  for gs, ls, args, why in (((2**31,), None, bufs, "past what"), ((0,), None, bufs, "at least 1"), ((8, 1, 1, 1), None, bufs, "1 to 3"),
                            ((8,), (t.max_work_group_size * 2,), bufs, "allows"), ((8,), None, bufs[:1], "takes 2 arguments, the launch passes 1"),
                            ((8,), (3,), bufs, "multiples")):
    with pytest.raises(LaunchError, match=why): be.run_source("rs_k", src, args, gs, ls)  # type: ignore[attr-defined]
  assert enqueues == []
