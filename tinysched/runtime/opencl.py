"""The OPENCL device on pyopencl: device selection, memory, program cache, launches, kernel timing.

Device names: `OPENCL` is the first GPU (else the first device) across all platforms, unless
pyopencl's `PYOPENCL_CTX` is set (`<platform>[:<device>]`, indices or name substrings, pyopencl's
own platform order). `OPENCL:<n>` is device n of `list_devices()`: platforms sorted by name (ties
keep the ICD loader's order), devices in the platform's order.

Memory: freed buffers go to a size-bucketed free list (4 buckets per power of two) and are reused;
when an allocation fails the free list is released and the allocation retried once.

Programs are cached in memory and on disk (`$TINYSCHED_CACHE` or `~/.cache/tinysched`, subfolder
`opencl/`), named by a hash of their key: the source's sha256, the build options and `_device_ident` (the device name,
the driver, platform and OpenCL versions). An entry records that whole key and a hash of the key and its content, and
is used only when both match what is asked for: a file copied over another (a kernel of the same name, another device's
build) is refused and counted (`tinysched.helpers.cache_rejections`), never run. An unreadable, corrupted or rejected
binary is ignored and the program is rebuilt from source. The folder is used only when it is this user's alone
(`tinysched.helpers.trusted_cache_dir`). `TINYSCHED_DISK_CACHE=0` turns the disk cache off.

Launches are checked before they are enqueued (`launch_bounds`): sizes from a cache or a store that a kernel cannot
have been made for (a dim of 0 or 2**31, more dims than it declares, a work-group larger than the device allows, an
argument count other than its parameters') raise LaunchError instead of reading and writing past its buffers.

Batch compiles (`OpenCLBackend.prebuild`): many kernels compiled as one program. A compiler's fixed cost per build
(PoCL 3.1 here: about 130 ms to parse its headers, against 9 ms per kernel in a batch of 24) is then paid once per
batch. Each kernel's disk entry then names its batch (whose source is stored beside it, and checked to hold the
kernel's source before use). On PoCL, whose own disk cache keeps compiled programs (unless POCL_KERNEL_CACHE=0), the
batch is rebuilt from its source (a cache hit there); elsewhere its binary is stored. Only self-contained sources are
batched: one `__kernel`, nothing before it, no preprocessor lines (helpers and macros of two sources could collide). A
batch that fails to build is split in halves until the kernels that build are built; a kernel that does not build
alone is left for `kernel()` to report.

Kernel time comes from profiling events: `run_ast(...)` returns it in seconds. The queue profiles unless
`TINYSCHED_PROFILE=0` (read when the device opens): NVIDIA's driver then enqueues a kernel in about 10.5 us of host
time instead of 16.5 (H200 host, 2026-12-01), which is what a jitted GPT-2 call of 210 launches waits on; kernels then
report no time (GlobalCounters.time_sum_s stays 0) and the explicit timing calls (`run`, `run_source`, `run_ast`)
raise. replay's execution-check workers always profile (they time kernels).
"""
from __future__ import annotations
import contextlib, functools, hashlib, os, re, subprocess, sys, warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence
import numpy as np
from tinysched.dtype import DType, dtypes
from tinysched.ops import Ops
from tinysched.uop import UOp
from tinysched.device import Backend, Buffer, DeviceError, Device
from tinysched.runtime import interpreter
from tinysched.codegen.target import Target, SM80, tensor_cores_allowed
from tinysched.codegen.kernel import Opt
from tinysched.codegen.program import Program
from tinysched.codegen.program_cache import cached_program
from tinysched.codegen.opencl import UnsupportedDTypeError
from tinysched.helpers import getenv, DEBUG, cache_root, write_cache_entry, disk_cache_enabled as _use_disk, trusted_cache_dir, reject_cache_entry

try:
  import pyopencl as cl
except ImportError:  # no pyopencl is no OpenCL: opencl_available() is False
  cl = None  # type: ignore[assignment]

class CompileError(RuntimeError):
  """The OpenCL compiler rejected a kernel; carries the build log and the source."""
  def __init__(self, device: str, name: str, log: str, src: str):
    self.device, self.name, self.log, self.src = device, name, log, src
    numbered = "\n".join(f"{i+1:4d} {line}" for i, line in enumerate(src.splitlines()))
    super().__init__(f"OpenCL build of kernel {name!r} failed on {device}:\n{log.strip()}\n--- source ---\n{numbered}")

class LaunchError(DeviceError):
  """A launch refused before it was enqueued: sizes or arguments the kernel was not made for or the device does not
  allow (a corrupted cache or store entry, a caller's mistake). Enqueued, they read and write past the buffers."""

# *** device discovery ***

@functools.lru_cache(None)
def _all_devices() -> tuple[Any, ...]:
  """Every OpenCL device, in the deterministic OPENCL:<n> order; () when no platform exists."""
  if cl is None: return ()
  try: plats = cl.get_platforms()
  except Exception: return ()  # no ICD loader / no platform: pyopencl raises LogicError (-1001)
  out = []
  for _, _, p in sorted((p.name, i, p) for i, p in enumerate(plats)):
    try: out.extend(p.get_devices())
    except Exception: continue  # a platform without devices raises DEVICE_NOT_FOUND
  return tuple(out)

def opencl_available() -> bool:
  """True when pyopencl is importable and at least one OpenCL device exists."""
  return len(_all_devices()) > 0

def list_devices() -> list[tuple[str, str, str]]:
  """(tinysched name, device name, platform name) of every OpenCL device."""
  return [(f"OPENCL:{i}", d.name.strip(), d.platform.name.strip()) for i, d in enumerate(_all_devices())]

def _describe_available() -> str:
  devs = list_devices()
  return "available: " + ", ".join(f"{n} = {d} ({p})" for n, d, p in devs) if devs else "no OpenCL device exists on this machine"

def _is_gpu(d) -> bool: return bool(d.type & cl.device_type.GPU)

def _from_pyopencl_ctx(spec: str):
  """Resolve PYOPENCL_CTX ('<platform>[:<device>]', indices or name substrings) like pyopencl does."""
  parts = spec.split(":")
  plats = cl.get_platforms()
  def pick(items, key: str, what: str):
    if key.strip() == "": return items[0] if len(items) == 1 else None
    if key.isdigit():
      if int(key) >= len(items): raise DeviceError(f"PYOPENCL_CTX={spec!r}: no {what} {key} ({_describe_available()})")
      return items[int(key)]
    for it in items:
      if key.lower() in it.name.lower(): return it
    raise DeviceError(f"PYOPENCL_CTX={spec!r}: no {what} matching {key!r} ({_describe_available()})")
  plat = pick(plats, parts[0], "platform")
  if plat is None: raise DeviceError(f"PYOPENCL_CTX={spec!r}: name a platform ({_describe_available()})")
  devs = plat.get_devices()
  dev = pick(devs, parts[1] if len(parts) > 1 else "", "device") if len(parts) > 1 or len(devs) == 1 else devs[0]
  return dev if dev is not None else devs[0]

def select_device(name: str):
  """The pyopencl Device behind a tinysched device name."""
  devs = _all_devices()
  if not devs:
    raise DeviceError(f"device {name}: no OpenCL platform found (install an ICD, e.g. apt-get install pocl-opencl-icd, "
                      "or set OCL_ICD_FILENAMES); use TINYSCHED_DEVICE=NUMPY for the interpreter")
  base, _, idx = name.upper().partition(":")
  if base != "OPENCL": raise DeviceError(f"unknown device {name!r}: the OpenCL backend serves OPENCL and OPENCL:<n>")
  if idx:
    if not idx.isdigit(): raise DeviceError(f"unknown device {name!r}: the OpenCL device index must be a number, e.g. OPENCL:0")
    if int(idx) >= len(devs): raise DeviceError(f"unknown device {name!r}: there are {len(devs)} OpenCL devices ({_describe_available()})")
    return devs[int(idx)]
  if (spec := os.environ.get("PYOPENCL_CTX")): return _from_pyopencl_ctx(spec)
  return next((d for d in devs if _is_gpu(d)), devs[0])

# what native half rendering emits (codegen/opencl.py): arithmetic, conversions, half4 memory and the math builtins. Each
# result is exact in half, so a device that computes them gets exactly EXPECTED. NVIDIA's compiler (no cl_khr_fp16
# listed) accepts half arithmetic but has no half overloads of trunc/fmod/exp2/log2/sin/sqrt: arithmetic alone is no proof.
_FP16_PROBE = """#pragma OPENCL EXTENSION cl_khr_fp16 : enable
__kernel void ts_fp16_probe(__global half* a) {
  half x = a[0];
  half4 v = *((__global half4*)(a+4));
  a[1] = sqrt(a[1]) + (exp2(x) - exp2(x)) + log2((half)1.0f) + sin((half)0.0f) + (trunc(x) - trunc(x)) + fmod(x, x);
  a[2] = (half)((int)x + 2);
  a[0] = x*x + (half)1.0f;
  *((__global half4*)(a+4)) = v * (half)2.0f;
}
"""
_FP16_PROBE_IN, _FP16_PROBE_EXPECTED = [1.5, 4, 0, 0, 1, 2, 3, 4], [3.25, 2, 3, 0, 2, 4, 6, 8]

@contextlib.contextmanager
def _quiet_stderr():
  """File descriptor 2 goes to /dev/null for the block (a driver's compiler writes there directly, not through Python)."""
  sys.stderr.flush()
  saved, null = os.dup(2), os.open(os.devnull, os.O_WRONLY)
  try:
    os.dup2(null, 2)
    yield
  finally:
    os.dup2(saved, 2)
    os.close(saved)
    os.close(null)

def _device_ident(d) -> str:
  """What names a device's compiler: its name and the driver, platform and OpenCL versions."""
  return "\0".join([d.name, d.driver_version, d.platform.name, d.platform.version, d.version])

@functools.lru_cache(None)
def probe_fp16(d) -> bool:
  """Whether device `d` builds and correctly runs what native half kernels use (`_FP16_PROBE`). A driver may support
  half without listing cl_khr_fp16, or only in part; asking the compiler is the only way to know. False on any build
  or run error. The answer is kept in the disk cache, keyed by device, driver and probe (a failed build is not cached
  by PoCL: the probe cost every process 0.2 s); an answer stored under another key is refused, and the probe run."""
  key = "\0".join(["fp16-probe", _device_ident(d), _FP16_PROBE]).encode()
  path = None if (folder := _disk_folder()) is None else folder / f"fp16-probe-{hashlib.sha256(key).hexdigest()}"
  if path is not None and (known := _disk_load(path, _FP16, key)) is not None:
    if known in (b"0", b"1"): return known == b"1"
    reject_cache_entry(path, f"not a probe answer: {known[:16]!r}")
  ok = _run_fp16_probe(d)
  if ok is None: return False  # not asked: storage half this time, and asked again by the next process
  if path is not None: _disk_store(path, _FP16, key, b"1" if ok else b"0")
  return ok

def _run_fp16_probe(d) -> bool | None:
  """The probe's answer, asked in a child process: a compiler that calls exit() or crashes (PoCL does when its cache disk
  is full) must end the child, not the program that opened the device. None when the device could not be asked."""
  plats = cl.get_platforms()
  try:
    pi = next(i for i, p in enumerate(plats) if p.int_ptr == d.platform.int_ptr)
    di = next(i for i, x in enumerate(plats[pi].get_devices()) if x.int_ptr == d.int_ptr)
  except StopIteration: return None
  root = str(Path(__file__).resolve().parents[2])  # (the child imports this very tinysched)
  env = {k: v for k, v in os.environ.items() if not k.startswith("TINYSCHED_CAPTURE")}  # the probe is not the user's work: no capture
  env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
  code = "import sys; from tinysched.runtime.opencl import _probe_child; _probe_child(int(sys.argv[1]), int(sys.argv[2]))"
  try: r = subprocess.run([sys.executable, "-c", code, str(pi), str(di)], env=env, capture_output=True, text=True, timeout=300)
  except (OSError, subprocess.TimeoutExpired): return None
  answer = r.stdout.strip().splitlines()[-1:] if r.returncode == 0 else []
  return {"fp16-probe 1": True, "fp16-probe 0": False}.get(answer[0]) if answer else None

def _probe_child(pi: int, di: int) -> None:
  """The child's side of _run_fp16_probe: one line, `fp16-probe 1`, `fp16-probe 0` or `fp16-probe none`."""
  ok = _probe_here(cl.get_platforms()[pi].get_devices()[di])
  print(f"fp16-probe {'none' if ok is None else int(ok)}", flush=True)

def _probe_here(d) -> bool | None:
  """The probe's answer: whether it builds and computes EXPECTED; None when the device could not be asked (a context,
  memory or launch error, which may pass: not an answer to keep)."""
  try:
    ctx = cl.Context([d])
    q = cl.CommandQueue(ctx, d)
  except Exception: return None
  try:
    with warnings.catch_warnings(), _quiet_stderr():
      warnings.simplefilter("ignore")  # a failed build is the answer, not something to show users (PoCL prints to fd 2)
      prg = cl.Program(ctx, _FP16_PROBE).build()
  except Exception: return False  # the compiler rejects what native half kernels use
  try:
    a = np.array(_FP16_PROBE_IN, dtype=np.float16)
    buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=a)
    prg.ts_fp16_probe(q, (1,), None, buf)
    cl.enqueue_copy(q, a, buf, is_blocking=True)
  except Exception: return None
  return a.tolist() == _FP16_PROBE_EXPECTED

def target_of(d) -> Target:
  """The Target of a pyopencl device. has_fp16: cl_khr_fp16 is listed, else `probe_fp16` (without it, half is rendered
  as storage with float arithmetic: codegen/opencl.py). tensor_cores: `probe_tensor_cores` on an NVIDIA GPU, unless
  TINYSCHED_TC=0 forbids them."""
  ext = d.extensions.split()
  has_fp16 = "cl_khr_fp16" in ext or probe_fp16(d)
  tc = SM80 if tensor_cores_allowed() and "NVIDIA" in d.vendor.upper() and _is_gpu(d) and probe_tensor_cores(d) else ""
  return Target(name=d.name.strip(), vendor=d.vendor.strip(), driver_version=d.driver_version.strip(),
                max_work_group_size=int(d.max_work_group_size), max_work_item_sizes=tuple(int(x) for x in d.max_work_item_sizes),
                local_mem_size=int(d.local_mem_size), has_fp16=has_fp16, has_fp64="cl_khr_fp64" in ext,
                max_alloc=int(d.max_mem_alloc_size), is_gpu=_is_gpu(d), compute_units=int(d.max_compute_units), tensor_cores=tc)

# What the tensor-core kernels use (codegen/tensor_core.py): cp.async into local memory, ldmatrix with and without .trans,
# mma.sync m16n8k16 in f16 and bf16. One warp multiplies a 16x16 identity A by a 16x8 B (k*8+n, exact in half): C must be
# B. A driver that builds this but computes something else (or lacks sm_80) gets no tensor cores.
_TC_PROBE = r"""
__kernel __attribute__((reqd_work_group_size(32, 1, 1))) void ts_tc_probe(__global const ushort* b, __global float* c) {
  __local ushort As[16 * 24] __attribute__((aligned(16)));
  __local ushort Bs[16 * 16] __attribute__((aligned(16)));
  int lane = get_local_id(0), g = lane >> 2, t = lane & 3;
  for (int i = lane; i < 16 * 24; i += 32) As[i] = (i / 24 == i % 24) ? 0x3C00 : 0;
  if (lane < 16) {
    __local ushort* dst = Bs + lane * 16;  // row k: 8 values, padded to 16
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"((uint)(size_t)dst), "l"(b + lane * 8));
  }
  asm volatile("cp.async.commit_group;");
  asm volatile("cp.async.wait_group 0;");
  barrier(CLK_LOCAL_MEM_FENCE);
  uint a0, a1, a2, a3, b0, b1, z = 0;
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];" : "=r"(a0), "=r"(a1), "=r"(a2), "=r"(a3)
               : "r"((uint)(size_t)As + ((lane & 15) * 24 + (lane >> 4) * 8) * 2));
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];" : "=r"(b0), "=r"(b1)
               : "r"((uint)(size_t)Bs + ((lane & 15) * 16) * 2));
  float d[4] = {0.0f, 0.0f, 0.0f, 0.0f}, e[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(e[0]), "+f"(e[1]), "+f"(e[2]), "+f"(e[3]) : "r"(z), "r"(z), "r"(z), "r"(z), "r"(z), "r"(z));
  for (int i = 0; i < 4; i++) c[((g + (i >> 1) * 8) * 8 + t * 2 + (i & 1))] = d[i] + e[i];
}
"""

@functools.lru_cache(None)
def probe_tensor_cores(d) -> bool:
  """Whether device `d` builds the tensor-core instructions and computes the probe's product right (_TC_PROBE). Asked
  only of NVIDIA GPUs (target_of), whose compiler reports a failed build as an error rather than exiting."""
  try:
    ctx = cl.Context([d])
    q = cl.CommandQueue(ctx, d)
    with warnings.catch_warnings(), _quiet_stderr():
      warnings.simplefilter("ignore")
      prg = cl.Program(ctx, _TC_PROBE).build()
    bvals = (np.arange(16 * 8).reshape(16, 8)).astype(np.float16)
    mf = cl.mem_flags
    bb = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=bvals.view(np.uint16))
    out = np.full(16 * 8, -1.0, np.float32)
    cb = cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=out)
    prg.ts_tc_probe(q, (32,), (32,), bb, cb)
    cl.enqueue_copy(q, out, cb, is_blocking=True)
  except Exception: return False  # noqa: BLE001  (no sm_80 instructions, or a driver that cannot run them: no tensor cores)
  return out.tolist() == bvals.astype(np.float32).reshape(-1).tolist()

# *** memory ***

def _bucket(nbytes: int) -> int:
  """Round up to one of 4 sizes per power of two (at most 25% waste); at least 64 bytes."""
  n = max(nbytes, 64)
  step = 1 << max(n.bit_length() - 3, 0)
  return (n + step - 1) // step * step

@dataclass(eq=False, repr=False, slots=True, weakref_slot=True)
class CLBuffer:
  """A device allocation: the cl.Buffer, the bytes asked for and the (larger) size bucket it was taken from."""
  buf: Any
  nbytes: int
  bucket: int
  def __repr__(self): return f"<CLBuffer {self.nbytes} bytes (bucket {self.bucket})>"

class Allocator:
  def __init__(self, dev: _CLDevice):
    self.dev = dev
    self.free_list: dict[int, list[Any]] = {}
    self.cached_bytes = 0
  def alloc(self, nbytes: int) -> CLBuffer:
    t = self.dev.target
    if nbytes > t.max_alloc:
      raise DeviceError(f"{self.dev.name} ({t.name}): a buffer of {nbytes} bytes exceeds the device's maximum allocation of "
                        f"{t.max_alloc} bytes (CL_DEVICE_MAX_MEM_ALLOC_SIZE)")
    b = _bucket(nbytes)
    if b > t.max_alloc: b = nbytes
    if (lst := self.free_list.get(b)):
      self.cached_bytes -= b
      return CLBuffer(lst.pop(), nbytes, b)
    try: buf = cl.Buffer(self.dev.ctx, cl.mem_flags.READ_WRITE, max(b, 1))
    except cl.Error:
      self.release_cache()
      try: buf = cl.Buffer(self.dev.ctx, cl.mem_flags.READ_WRITE, max(b, 1))
      except cl.Error as e: raise DeviceError(f"{self.dev.name} ({t.name}): out of memory allocating {nbytes} bytes: {e}") from e
    return CLBuffer(buf, nbytes, b)
  def free(self, h: CLBuffer) -> None:
    self.free_list.setdefault(h.bucket, []).append(h.buf)
    self.cached_bytes += h.bucket
  def release_cache(self) -> None:
    for lst in self.free_list.values():
      for b in lst: b.release()
    self.free_list.clear()
    self.cached_bytes = 0

# *** program cache ***

def cache_dir() -> Path: return cache_root() / "opencl"

def _disk_folder() -> Path | None:
  """The folder of the OpenCL disk cache, when it is on and the folder is this user's alone; else None (no disk cache)."""
  return trusted_cache_dir(cache_dir()) if _use_disk() else None

# An entry: _MAGIC, its kind (4 bytes), the length (4 bytes, big-endian) and text of the whole key it was stored under,
# the sha256 of all that and the payload, the payload. File names are hashes of keys, and nothing ties a file's bytes to
# its name: only the recorded key says which kernel, batch, device and driver an entry is for.
_MAGIC = b"TSCL2\n"
_OLDER = (b"TSCL1\n", b"TSCB1\n")  # earlier formats (their own checksums only): a miss, rebuilt in this one
_BIN, _PTR, _BSRC, _BBIN, _FP16 = b"bin\0", b"ptr\0", b"bsrc", b"bbin", b"fp16"  # a kernel's binary or its batch; a batch's source, binary
_BUILD_OPTIONS = ""  # what every program here is built with (part of every key: other options, other binaries)
BATCH_SIZE = 24       # kernels per batch program: past ~20 the per-build cost is paid off (PoCL 3.1)

def _refuse(path: Path, why: str) -> Any:
  """None, once the entry at `path` is counted as refused (callers return it: a refused entry is a miss)."""
  reject_cache_entry(path, why)
  return None

def _key_matches(recorded: bytes, wanted: bytes) -> bool:
  """Whether an entry's recorded key is the one asked for (one place, so a test can take the check away)."""
  return recorded == wanted

def _disk_read(path: Path) -> tuple[bytes, bytes, bytes] | None:
  """(kind, recorded key, payload) of the entry at `path` if its hash holds; None for no entry, an older format (a
  miss), or a corrupted or foreign file (refused: counted and reported once, `reject_cache_entry`)."""
  try: data = path.read_bytes()
  except OSError: return None
  if data.startswith(_OLDER): return None
  n = len(_MAGIC)
  if not data.startswith(_MAGIC) or len(data) < n + 8: return _refuse(path, "not a cache entry of this format")
  end = n + 8 + int.from_bytes(data[n+4:n+8], "big")
  if len(data) < end + 32: return _refuse(path, "truncated")
  payload = data[end+32:]
  if hashlib.sha256(data[:end] + payload).digest() != data[end:end+32]: return _refuse(path, "its content does not match its hash")
  return data[n:n+4], data[n+8:end], payload

def _disk_load(path: Path, kind: bytes, key: bytes) -> bytes | None:
  """The payload of the entry at `path` if it is a `kind` entry stored under exactly `key`; else None (refused if present)."""
  if (e := _disk_read(path)) is None: return None
  if e[0] != kind or not _key_matches(e[1], key): return _refuse(path, "stored for another key (copied from another kernel, device or driver)")
  return e[2]

def _disk_store(path: Path, kind: bytes, key: bytes, payload: bytes) -> None:
  head = _MAGIC + kind + len(key).to_bytes(4, "big") + key
  write_cache_entry(path, head + hashlib.sha256(head + payload).digest() + payload)

# *** launch checks ***

_INT32_MAX = 2**31 - 1
# a thread id as codegen/opencl.py renders it, with its extent noted: `int gidx0 = get_group_id(0); /* 16 */`
_ID_DECL = re.compile(r"\b(?:int|long) \w+ = get_(global|group|local)_id\(([0-2])\); /\* (\d+) \*/")

@functools.lru_cache(maxsize=1024)
def _declared_ids(src: str) -> tuple[tuple[str, int, int], ...]:
  """(kind, dim, extent) of each thread id a generated kernel declares; () for a source that declares none (hand-written)."""
  return tuple((m[1], int(m[2]), int(m[3])) for m in _ID_DECL.finditer(src))

def _is_int(x: Any) -> bool: return isinstance(x, (int, np.integer)) and not isinstance(x, bool)

def launch_bounds(name: str, src: str, gs: Sequence[Any], ls: Sequence[Any] | None, t: Target, size_max: int) -> tuple[int, ...]:
  """Check the sizes of a launch of kernel `name` (source `src`) on a device with limits `t`, before it is enqueued;
  returns per global dim the largest size it may take. `gs` may hold None for a size known only at each launch (a
  Variable's); every other size is checked here: 1 to 3 dims; global sizes at least 1 and below 2**31, or where the
  kernel declares an id for that dim up to the device's size_t; each local size at least 1 and within the device's
  work-item sizes, their product within its work-group size, dividing the global size. A generated kernel notes each
  id's extent: a static global size must be exactly that (a local one too), a symbolic one at most that. Else
  LaunchError, naming the kernel and the problem."""
  def bad(why: str): raise LaunchError(f"kernel {name}: launch refused before it ran: {why}")
  if not isinstance(gs, (tuple, list)) or not 1 <= len(gs) <= 3: bad(f"a launch has 1 to 3 global dims, got {gs!r}")
  if any(g is not None and (not _is_int(g) or g < 1) for g in gs): bad(f"global sizes must be integers of at least 1, got {list(gs)}")
  if ls is not None:
    if not isinstance(ls, (tuple, list)) or len(ls) != len(gs): bad(f"local size {ls!r} does not match the {len(gs)} global dims {list(gs)}")
    if any(not _is_int(x) or x < 1 for x in ls): bad(f"local sizes must be integers of at least 1, got {list(ls)}")
    items = tuple(t.max_work_item_sizes) + (1,) * 3
    if any(x > items[d] for d, x in enumerate(ls)) or int(np.prod(ls)) > t.max_work_group_size:
      bad(f"a work-group of {list(ls)} is more than {t.name} allows (at most {t.max_work_group_size} threads, {list(t.max_work_item_sizes)} per dim)")
  hi = [_INT32_MAX] * len(gs)  # (a declared id's extent replaces it: a kernel reads an id past 2**31 as a long)
  for kind, d, n in _declared_ids(src):
    if d >= len(gs): bad(f"its source reads get_{kind}_id({d}), and the launch has {len(gs)} dims")
    if kind == "local":
      if ls is None or ls[d] != n: bad(f"its source is made for a local size of {n} in dim {d}, the launch gives {None if ls is None else list(ls)}")
      continue
    if kind == "group" and ls is None: bad("its source reads work-group ids, and the launch has no local size")
    want = n if kind == "global" else n * ls[d]  # type: ignore[index]
    if gs[d] is not None and gs[d] != want: bad(f"its source is made for a global size of {want} in dim {d}, the launch gives {list(gs)}")
    hi[d] = min(want, size_max)
  for d, g in enumerate(gs):
    if g is not None and g > hi[d]: bad(f"global size {g} in dim {d} is past what the kernel or device can index ({hi[d]})")
    if g is not None and ls is not None and g % ls[d]: bad(f"global sizes {list(gs)} are not multiples of the local sizes {list(ls)}")
  return tuple(hi)

def _batchable(name: str, src: str) -> bool:
  """Whether a source can share a program with others: one kernel, nothing before it that another source could repeat."""
  return src.startswith("__kernel ") and src.count("__kernel") == 1 and "#" not in src and f" void {name}(" in src

def _holds(bsrc: str, src: str) -> bool:
  """Whether a batch source has `src` as one whole member (members are joined, each ending in a newline and starting
  with its only `__kernel`): found at a line start, and followed by the end or by the next member."""
  src = src if src.endswith("\n") else src + "\n"
  text, at = "\n" + bsrc, 0
  while (i := text.find("\n" + src, at)) >= 0:
    end = i + 1 + len(src)
    if end == len(text) or text.startswith("__kernel ", end): return True
    at = i + 1
  return False

def _own_disk_cache(d) -> bool:
  """PoCL keeps compiled programs in its own disk cache: a batch rebuilt from source is a hit there, while fetching its
  binary would compile every kernel in it once more (a work-group function for any size, ~70 ms each)."""
  return "Portable Computing Language" in d.platform.name and os.environ.get("POCL_KERNEL_CACHE", "1") != "0"

def _build_log(prg, device) -> str:
  try: return str(prg.get_build_info(device, cl.program_build_info.LOG)).strip()
  except Exception: return ""

class _CLDevice:
  """One physical OpenCL device: context, profiling queue, allocator, program cache (shared by every name that selects it)."""
  def __init__(self, name: str, d):
    self.name, self.device = name, d
    self.ctx = cl.Context([d])
    self.profiling = getenv("TINYSCHED_PROFILE", 1) != 0
    props = cl.command_queue_properties.PROFILING_ENABLE if self.profiling else 0
    self.queue = cl.CommandQueue(self.ctx, d, properties=props)  # type: ignore[arg-type]  # 0: no properties (the stubs want the enum)
    self.target = target_of(d)
    self.allocator = Allocator(self)
    self.kernels: dict[tuple[str, str], Any] = {}
    self.programs: dict[tuple, Program] = {}
    self.base_align = max(int(d.mem_base_addr_align) // 8, 1)
    self.wg_limits: dict[int, int] = {}  # id(kernel) -> CL_KERNEL_WORK_GROUP_SIZE (kernels live in self.kernels forever)
    self.arg_counts: dict[int, int] = {}  # id(kernel) -> CL_KERNEL_NUM_ARGS (likewise)
    self.bounds: dict[int, tuple[Program, tuple[int, ...]]] = {}  # id(program) -> (it, launch_bounds): checked once
    self._sized: dict[int, tuple[Program, dict]] = {}  # id(program) -> (it, {Variable values: launch dims}): see sized
    self.size_max = (1 << int(d.address_bits)) - 1  # the device's size_t: the largest global size it takes
    self.batches: dict[str, Any] = {}    # batch hash -> its built program (see prebuild)
    self.batch_sources: dict[str, str] = {}
    self.single_builds = 0               # programs built from one source (a batch hit avoids one): for tests and benches

  def kernel_key(self, src: str) -> bytes:
    """The whole key of a kernel's disk entry: its source, the build options, this device and driver."""
    return "\0".join(["kernel", hashlib.sha256(src.encode()).hexdigest(), _BUILD_OPTIONS, _device_ident(self.device)]).encode()
  def cache_key(self, src: str) -> str: return hashlib.sha256(self.kernel_key(src)).hexdigest()  # the entry's file name
  def batch_key(self, bsrc: str) -> bytes:
    return "\0".join(["batch", hashlib.sha256(bsrc.encode()).hexdigest(), _BUILD_OPTIONS, _device_ident(self.device)]).encode()

  def kernel(self, name: str, src: str):
    if (k := self.kernels.get((name, src))) is not None: return k
    folder = _disk_folder()
    path = None if folder is None else folder / f"{self.cache_key(src)}.bin"
    prg = None
    # a kernel's entry holds its binary, or names the batch it was compiled in; either only for exactly this key
    if folder is not None and path is not None and (entry := _disk_read(path)) is not None:
      kind, key, payload = entry
      if kind not in (_BIN, _PTR) or not _key_matches(key, self.kernel_key(src)):
        _refuse(path, "stored for another key (copied from another kernel, device or driver)")
      elif kind == _PTR:
        if (bprg := self._batch(folder, payload.decode("ascii", "replace"), name, src)) is not None:
          k = self.kernels[(name, src)] = cl.Kernel(bprg, name)
          return k
      else:
        try:
          with warnings.catch_warnings():
            warnings.simplefilter("ignore", cl.CompilerWarning)
            prg = cl.Program(self.ctx, [self.device], [payload]).build()
        except Exception: prg = None  # rejected by this driver: rebuild from source
    if prg is None:
      try:
        with warnings.catch_warnings():
          # compiler remarks on a successful build are noise for users (pyopencl warns on any log); DEBUG>=1 prints them
          warnings.simplefilter("ignore", cl.CompilerWarning)
          self.single_builds += 1
          prg = cl.Program(self.ctx, src).build(cache_dir=False)  # type: ignore[arg-type]  # False: no pyopencl cache (stubs: str | None)
        if DEBUG >= 1 and (log := _build_log(prg, self.device)): print(f"{self.name}: build log of {name}:\n{log}", file=sys.stderr)
      except cl.Error as e:
        log = ""
        try: log = prg.get_build_info(self.device, cl.program_build_info.LOG) if prg is not None else ""
        except Exception: pass
        raise CompileError(f"{self.name} ({self.target.name})", name, log or str(e), src) from None
      if path is not None:
        try: _disk_store(path, _BIN, self.kernel_key(src), prg.binaries[0])
        except Exception: pass
    k = self.kernels[(name, src)] = cl.Kernel(prg, name)
    return k

  def _batch(self, folder: Path, h: str, name: str, src: str):
    """The program of batch `h` if it holds exactly `src` as one of its kernels (else None: the entry is stale or was
    tampered with, and the kernel is built on its own). Its source entry must be stored under the key of its own text
    on this device, which hashes to `h`; its binary (where kept) under that key too."""
    if (prg := self.batches.get(h)) is None:
      if len(h) != 64 or any(c not in "0123456789abcdef" for c in h): return _refuse(folder / f"{self.cache_key(src)}.bin", "not a batch's name")
      path = folder / f"batch-{h}.src"
      if (e := _disk_read(path)) is None: return None
      kind, key, text = e
      try: bsrc = text.decode()
      except UnicodeDecodeError: return _refuse(path, "not a batch's source")
      if kind != _BSRC or not _key_matches(key, self.batch_key(bsrc)) or not _key_matches(hashlib.sha256(key).hexdigest().encode(), h.encode()):
        return _refuse(path, "stored for another batch, device or driver")
      binary = None if _own_disk_cache(self.device) else _disk_load(folder / f"batch-{h}.bin", _BBIN, key)
      try:
        with warnings.catch_warnings():
          warnings.simplefilter("ignore", cl.CompilerWarning)
          prg = cl.Program(self.ctx, [self.device], [binary]) if binary is not None else cl.Program(self.ctx, bsrc)
          prg = prg.build(cache_dir=False)  # type: ignore[arg-type]  # False: no pyopencl cache (stubs: str | None)
      except Exception: return None
      self.batches[h] = prg
      self.batch_sources[h] = bsrc
    return prg if _holds(self.batch_sources[h], src) else None

  def prebuild(self, pairs: Sequence[tuple[str, str]], batch_size: int = BATCH_SIZE) -> int:
    """Compile the (name, source) pairs that are neither in memory nor on disk in batches (see the module docstring);
    returns how many kernels were compiled. Nothing is launched. Sources that cannot share a program, and kernels
    that do not build, are left to kernel()."""
    if (folder := _disk_folder()) is None: return 0
    todo: list[tuple[str, str]] = []
    seen: set[tuple[str, str]] = set()  # membership only: todo keeps the given order
    for name, src in pairs:
      if (name, src) in seen or (name, src) in self.kernels or not _batchable(name, src): continue
      seen.add((name, src))
      if (folder / f"{self.cache_key(src)}.bin").exists(): continue
      todo.append((name, src))
    batches: list[list[tuple[str, str]]] = []
    for item in todo:  # kernel names must differ within a program
      b = next((b for b in batches if len(b) < batch_size and all(n != item[0] for n, _ in b)), None)
      if b is None: batches.append(b := [])
      b.append(item)
    return sum(self._build_batch(folder, b) for b in batches)

  def _build_batch(self, folder: Path, members: list[tuple[str, str]]) -> int:
    bsrc = "".join(src if src.endswith("\n") else src + "\n" for _, src in members)
    try:
      with warnings.catch_warnings():
        warnings.simplefilter("ignore", cl.CompilerWarning)
        prg = cl.Program(self.ctx, bsrc).build(cache_dir=False)  # type: ignore[arg-type]  # False: no pyopencl cache (stubs: str | None)
    except cl.Error:
      if len(members) == 1: return 0  # kernel() builds it alone and reports its log
      half = len(members) // 2
      return self._build_batch(folder, members[:half]) + self._build_batch(folder, members[half:])
    key = self.batch_key(bsrc)
    h = hashlib.sha256(key).hexdigest()
    _disk_store(folder / f"batch-{h}.src", _BSRC, key, bsrc.encode())
    stored = True
    if not _own_disk_cache(self.device):
      try: _disk_store(folder / f"batch-{h}.bin", _BBIN, key, prg.binaries[0])
      except Exception: stored = False  # no binary to point at: the kernels still serve this process
    self.batches[h], self.batch_sources[h] = prg, bsrc
    for name, src in members:  # pointers last: whoever reads one finds its batch complete
      if stored: _disk_store(folder / f"{self.cache_key(src)}.bin", _PTR, self.kernel_key(src), h.encode())
      self.kernels[(name, src)] = cl.Kernel(prg, name)
    return len(members)

  def mem(self, b: Buffer):
    """The cl.Buffer for a tinysched Buffer (sub-buffer or None for views at an unaligned offset)."""
    h = b.base.handle
    if b._base is None or (b.offset == 0): return h.buf
    if b.offset % self.base_align != 0: return None
    return h.buf.get_sub_region(b.offset, max(b.nbytes, 1))  # cheap; not cached, so no sub-buffer outlives its parent

  def work_group_limit(self, k) -> int:
    """CL_KERNEL_WORK_GROUP_SIZE of a kernel from self.kernels (memoized: those live for the device's lifetime)."""
    if (wg := self.wg_limits.get(id(k))) is None:
      wg = self.wg_limits[id(k)] = int(k.get_work_group_info(cl.kernel_work_group_info.WORK_GROUP_SIZE, self.device))
    return wg

  def arg_count(self, k) -> int:
    """CL_KERNEL_NUM_ARGS of a kernel from self.kernels (memoized like work_group_limit)."""
    if (n := self.arg_counts.get(id(k))) is None: n = self.arg_counts[id(k)] = int(k.get_info(cl.kernel_info.NUM_ARGS))
    return n

  def check_args(self, k, name: str, n: int) -> None:
    if (want := self.arg_count(k)) != n:
      raise LaunchError(f"kernel {name}: launch refused before it ran: its source takes {want} arguments, the launch passes {n}")

  def launch_bounds(self, prg: Program) -> tuple[int, ...]:
    """launch_bounds of a Program on this device, checked once per Program (a static launch is then checked whole)."""
    if (got := self.bounds.get(id(prg))) is None or got[0] is not prg:
      gs = tuple(g if isinstance(g, int) else None for g in prg.global_size)
      got = self.bounds[id(prg)] = (prg, launch_bounds(prg.name, prg.src, gs, prg.local_size, self.target, self.size_max))
    return got[1]

  def sized(self, prg: Program) -> dict:
    """The memo of a symbolic Program's launch dims by its Variables' values (TinyJit's prepared launches share it)."""
    if (got := self._sized.get(id(prg))) is None or got[0] is not prg: got = self._sized[id(prg)] = (prg, {})
    return got[1]

  def within(self, prg: Program, gs: tuple[int, ...], ls: tuple[int, ...] | None, hi: tuple[int, ...]) -> bool:
    """A symbolic launch's sizes at this launch: True to launch, False for an empty one (a Variable made a size 0)."""
    if all(0 < g <= h for g, h in zip(gs, hi)) and (ls is None or not any(g % x for g, x in zip(gs, ls))): return True
    if all(g >= 0 for g in gs) and any(g == 0 for g in gs): return False
    raise LaunchError(f"kernel {prg.name}: launch refused before it ran: global size {list(gs)} at these Variables' values; each dim "
                      f"must be at least 1, at most {list(hi)}" + ("" if ls is None else f", a multiple of the local size {list(ls)}"))

  def launch(self, prg: Program, bufs: Sequence[Buffer], var_vals: dict[UOp, int]) -> Any:
    """Enqueue one kernel; returns its event (None when the launch is empty). Its sizes and argument count are checked
    first (LaunchError): a Program may come from a disk cache."""
    if (missing := [v.arg[0] for v in prg.vars if v not in var_vals]):
      raise DeviceError(f"kernel {prg.name} needs values for Variables {missing} (pass var_vals)")
    hi = self.launch_bounds(prg)
    k = self.kernel(prg.name, prg.src)
    gs, ls = prg.launch_dims(var_vals)
    if len(bufs) != len(prg.buf_dtypes): raise DeviceError(f"kernel {prg.name} takes {len(prg.buf_dtypes)} buffers, got {len(bufs)}")
    self.check_args(k, prg.name, len(bufs) + len(prg.vars))
    if prg.vars and not self.within(prg, gs, ls, hi): return None
    args: list[Any] = []
    copy_back: list[tuple[Buffer, Any]] = []
    clash = _aliased(bufs, prg.outs)
    for i, b in enumerate(bufs):
      m = self.mem(b)
      if m is None or i in clash:
        # unaligned view, or a written buffer whose memory another argument also reaches: work on a copy
        tmp = cl.Buffer(self.ctx, cl.mem_flags.READ_WRITE, max(b.nbytes, 1))
        src_m, off = (b.base.handle.buf, b.offset) if m is None else (m, 0)
        if b.nbytes: cl.enqueue_copy(self.queue, tmp, src_m, byte_count=b.nbytes, src_offset=off, dst_offset=0)
        if i in prg.outs: copy_back.append((b, tmp))
        m = tmp
      args.append(m)
    args += [_int_type(v)(var_vals[v]) for v in prg.vars]
    if ls is not None:
      if int(np.prod(ls)) > (wg := self.work_group_limit(k)):
        raise LaunchError(f"{self.name} ({self.target.name}): kernel {prg.name} needs a work-group of {int(np.prod(ls))} threads, "
                          f"the compiled kernel allows {wg} (opts {list(prg.opts)})")
    k.set_args(*args)
    ev = cl.enqueue_nd_range_kernel(self.queue, k, gs, ls)
    for b, tmp in copy_back:
      base = b.base.handle.buf
      if b.nbytes: cl.enqueue_copy(self.queue, base, tmp, byte_count=b.nbytes, src_offset=0, dst_offset=b.offset if b._base else 0)
    if DEBUG >= 2: print(f"{self.name}: {prg.name} global={gs} local={ls}", file=sys.stderr)
    return ev

  def program(self, ast: UOp, opts: Sequence[Opt] | None) -> Program:
    key = (ast, None if opts is None else tuple(opts))
    if (p := self.programs.get(key)) is None:
      p = self.programs[key] = cached_program(ast, opts, self.target)
      if DEBUG >= 3: print(p.src, file=sys.stderr)
    return p

_devices: dict[int, _CLDevice] = {}
def _cl_device(name: str) -> _CLDevice:
  d = select_device(name)
  key = _all_devices().index(d) if d in _all_devices() else id(d)
  if key not in _devices: _devices[key] = _CLDevice(name, d)
  return _devices[key]

_warned: set[str] = set()  # membership only

class OpenCLBackend(Backend):
  def __init__(self, name: str = "OPENCL"):
    if cl is None: raise DeviceError(f"device {name}: pyopencl is not installed (pip install pyopencl)")
    self.name = name
    self.dev = _cl_device(name)
  @property
  def target(self) -> Target: return self.dev.target
  def alloc(self, size: int, dtype: DType) -> CLBuffer: return self.dev.allocator.alloc(size * dtype.itemsize)
  def free(self, handle: CLBuffer) -> None: self.dev.allocator.free(handle)
  def copyin(self, handle: CLBuffer, src: np.ndarray) -> None:
    src = np.ascontiguousarray(src)
    if src.nbytes > handle.nbytes: raise DeviceError(f"copyin of {src.nbytes} bytes into a buffer of {handle.nbytes}")
    if src.nbytes: cl.enqueue_copy(self.dev.queue, handle.buf, src, is_blocking=True)
  def copyout(self, handle: CLBuffer, size: int, dtype: DType) -> np.ndarray:
    out = np.empty(size, dtype=np.dtype(dtype.scalar().fmt))
    if out.nbytes: cl.enqueue_copy(self.dev.queue, out, handle.buf, is_blocking=True)
    return out
  def synchronize(self) -> None: self.dev.queue.finish()
  def copy(self, dst: Buffer, src: Buffer) -> None:
    """Backend.copy on the device's queue (in order with the kernels, no wait); through the host only for a view at an
    offset the device cannot address directly."""
    if not (n := min(dst.nbytes, src.nbytes)): return
    dm, sm = self.dev.mem(dst), self.dev.mem(src)
    if dm is not None and sm is not None: cl.enqueue_copy(self.dev.queue, dm, sm, byte_count=n)
    else: super().copy(dst, src)

  def exec_ast(self, ast: UOp, bufs: list[Buffer], var_vals: dict[UOp, int]) -> Any:
    """Run one kernel (or a same-device COPY); a kernel's time is reported as a callable that waits for its profiling
    event (Backend.exec_ast), so launching never waits."""
    if ast.op is Ops.COPY:  # same device: the first bytes of src into dst (like the interpreter)
      self.copy(*bufs)
      return
    if ast.op in (Ops.EMPTY, Ops.BUFFER_VIEW): return
    try: prg = self.dev.program(ast, None)
    except UnsupportedDTypeError as e:
      # e.g. double on a device without cl_khr_fp64 (half no longer needs this: without cl_khr_fp16 it renders as
      # storage, vload_half/vstore_half_rte): run this one kernel on the reference interpreter instead
      if not getenv("TINYSCHED_FP16_FALLBACK", 1): raise
      self._interpret(ast, bufs, var_vals, e)
      return None
    ev = self.dev.launch(prg, bufs, var_vals)
    return None if ev is None or not self.dev.profiling else functools.partial(_event_seconds, ev)

  compiles = True
  def prebuild(self, asts: Sequence[UOp] = (), sources: Sequence[tuple[str, str]] = ()) -> int:
    """Backend.prebuild: the ASTs rendered as exec_ast would (program cache included), then one batch compile."""
    pairs: list[tuple[str, str]] = []
    for ast in asts:
      if ast.op is not Ops.SINK: continue
      try: prg = self.dev.program(ast, None)
      except UnsupportedDTypeError: continue  # exec_ast runs these on the interpreter
      pairs.append((prg.name, prg.src))
    return self.dev.prebuild(pairs + list(sources))

  def prepare(self, ast: UOp, bufs: Sequence[Buffer | None], var_list: Sequence[UOp]) -> Callable | None:
    """TinyJit's replay of one recorded kernel launch with the per-launch work done once: the program looked up, a
    kernel object of its own (OpenCL keeps arguments per kernel object, so they stay set between calls) with every
    buffer that is the same each call bound, the launch dims computed when no Variable sizes them. `bufs[i]` None: a
    buffer bound per call (an input). Returns run(bufs, var_vals) -> what exec_ast returns, reading only the per-call
    positions of `bufs`; None where exec_ast's general path is needed: not a kernel, a kernel run on the interpreter,
    a buffer at an offset the device cannot address, a written buffer aliased or bound per call (launch() copies)."""
    if ast.op is not Ops.SINK: return None
    try: prg = self.dev.program(ast, None)
    except UnsupportedDTypeError: return None
    d = self.dev
    if len(bufs) != len(prg.buf_dtypes) or any(v not in var_list for v in prg.vars): return None
    shared = d.kernel(prg.name, prg.src)
    if prg.local_size is not None and int(np.prod(prg.local_size)) > d.work_group_limit(shared): return None  # launch() names the limit
    try:
      hi = d.launch_bounds(prg)
      d.check_args(shared, prg.name, len(prg.buf_dtypes) + len(prg.vars))
    except LaunchError: return None  # launch() raises it
    k = cl.Kernel(shared.get_info(cl.kernel_info.PROGRAM), prg.name)
    per_call, fixed = [], []
    if any(b is None for i, b in enumerate(bufs) if i in prg.outs) or _aliased(bufs, prg.outs): return None
    # the memory the fixed outputs write, by base buffer: a per-call input reaching into it (a jit's output passed back
    # as its input) takes exec_ast's path, which works on a copy
    written: dict[int, list[tuple[int, int]]] = {}
    for i, b in enumerate(bufs):
      if b is None:
        per_call.append(i)
        continue
      b.allocate()
      if (m := d.mem(b)) is None: return None
      if i in prg.outs: written.setdefault(id(b.base), []).append(_span(b))
      fixed.append(m)  # held: a sub-region must live as long as the kernel argument that refers to it
      k.set_arg(i, m)
    nb = len(prg.buf_dtypes)
    var_args = [(nb + j, v, _int_type(v)) for j, v in enumerate(prg.vars)]
    dims = None if prg.vars else prg.launch_dims({})
    # a symbolic launch's sizes at given Variable values, shared by every launch of this Program (a model's layers):
    # a decode step computes them once per Program, not once per layer. None: an empty launch
    sized = d.sized(prg) if prg.vars else {}
    queue, mem, timed, within = d.queue, d.mem, d.profiling, d.within
    set_arg = k.set_arg
    def run(call_bufs: Sequence[Buffer], var_vals: dict[UOp, int]) -> Any:
      for i in per_call:
        b = call_bufs[i]
        if (m := mem(b)) is None or ((spans := written.get(id(b.base))) is not None and _overlaps(_span(b), spans)):
          return self.exec_ast(ast, list(call_bufs), var_vals)
        set_arg(i, m)
      if dims is not None: gs, ls = dims
      else:
        vals = tuple(var_vals[v] for v in prg.vars)
        if (got := sized.get(vals, False)) is False:
          if len(sized) >= 64: sized.clear()  # bounded: a decode loop sees a new start_pos each step
          now = prg.launch_dims(var_vals)
          got = sized[vals] = now if within(prg, *now, hi) else None
        if got is None: return None
        gs, ls = got
        for pos, v, ty in var_args: set_arg(pos, ty(var_vals[v]))
      ev = cl.enqueue_nd_range_kernel(queue, k, gs, ls)
      return functools.partial(_event_seconds, ev) if timed else None
    run.fixed = fixed  # type: ignore[attr-defined]
    return run

  def _interpret(self, ast: UOp, bufs: list[Buffer], var_vals: dict[UOp, int], why: Exception) -> None:
    if str(why) not in _warned:
      _warned.add(str(why))
      print(f"tinysched: {why}; running it on the NUMPY interpreter (TINYSCHED_FP16_FALLBACK=0 makes this an error)", file=sys.stderr)
    host = [b.numpy() for b in bufs]
    interpreter.exec_ast(ast, host, var_vals)
    for i in sorted({s.src[0].arg for s in ast.src}): bufs[i].copyin(host[i])

  def program(self, ast: UOp, opts: Sequence[Opt] | None = None) -> Program:
    """The Program this device runs for a kernel AST (opts None: the defaults): its source, launch and executed cost."""
    return self.dev.program(ast, opts)

  def run(self, ast: UOp, bufs: list[Buffer], var_vals: dict[UOp, int] | None = None, opts: Sequence[Opt] | None = None) -> float:
    """Run one kernel with explicit opts (None: the defaults) and return its kernel time in seconds."""
    self._needs_profiling("run")
    prg = self.dev.program(ast, opts)
    for b in bufs: b.allocate()
    ev = self.dev.launch(prg, bufs, var_vals or {})
    return 0.0 if ev is None else _event_seconds(ev)

  def run_source(self, name: str, src: str, bufs: Sequence[Buffer], global_size: tuple[int, ...], local_size: tuple[int, ...] | None = None,
                 scalars: Sequence[Any] = ()) -> float:
    """Run a hand-written or stored kernel (a benchmark baseline, a captured program) on Buffers; returns its kernel time
    in seconds. Its sizes and argument count are checked before it is enqueued (LaunchError)."""
    self._needs_profiling("run_source")
    d = self.dev
    launch_bounds(name, src, global_size, local_size, d.target, d.size_max)
    k = d.kernel(name, src)
    d.check_args(k, name, len(bufs) + len(scalars))
    if local_size is not None and int(np.prod(local_size)) > (wg := d.work_group_limit(k)):
      raise LaunchError(f"kernel {name}: launch refused before it ran: a work-group of {list(local_size)} is more than the compiled kernel "
                        f"allows ({wg})")
    for b in bufs: b.allocate()
    k.set_args(*[d.mem(b) for b in bufs], *scalars)
    gs, ls = tuple(int(g) for g in global_size), None if local_size is None else tuple(int(x) for x in local_size)
    return _event_seconds(cl.enqueue_nd_range_kernel(d.queue, k, gs, ls))

  def _needs_profiling(self, what: str) -> None:
    if not self.dev.profiling:
      raise DeviceError(f"{self.name}: {what} reports kernel time, and this device's queue does not profile (TINYSCHED_PROFILE=0): "
                        "unset TINYSCHED_PROFILE to time kernels")

def _span(b: Buffer) -> tuple[int, int]:
  """The bytes [start, end) of its base buffer that a Buffer covers."""
  start = b.offset if b._base is not None else 0
  return start, start + b.nbytes

def _overlaps(span: tuple[int, int], spans: list[tuple[int, int]]) -> bool:
  return any(span[0] < end and start < span[1] for start, end in spans)

def _aliased(bufs: Sequence[Buffer | None], outs: Sequence[int]) -> set[int]:
  """Positions of written buffers (`outs`) whose bytes another argument also covers: the same buffer twice, or views of
  one base that overlap (distinct sub-regions are distinct cl.Buffer objects: comparing those would miss them). A kernel
  writing such a buffer in place could overwrite what another of its threads still reads."""
  by_base: dict[int, list[int]] = {}
  for i, b in enumerate(bufs):
    if b is not None: by_base.setdefault(id(b.base), []).append(i)
  clash: set[int] = set()
  for same in by_base.values():
    if len(same) < 2: continue
    for i in same:
      if i not in outs: continue
      if _overlaps(_span(bufs[i]), [_span(bufs[j]) for j in same if j != i]): clash.add(i)  # type: ignore[arg-type]
  return clash

def _int_type(v: UOp):
  """The numpy type a Variable's value is passed as (its kernel parameter's width)."""
  return np.int64 if v.dtype.itemsize == 8 else np.int32

_START, _END = cl.profiling_info.START, cl.profiling_info.END

def _event_seconds(ev) -> float:
  """The kernel time of a profiling event, in seconds (waits for the kernel). Read once per launch, so it asks the
  event directly (`ev.profile.end` goes through a Python attribute lookup: 8x the time)."""
  ev.wait()
  return (ev.get_profiling_info(_END) - ev.get_profiling_info(_START)) * 1e-9

def run_ast(ast: UOp, bufs: Sequence[Buffer | np.ndarray], var_vals: dict[UOp, int] | None = None, opts: Sequence[Opt] | None = None,
            device: str = "OPENCL") -> float:
  """Run a kernel AST on an OpenCL device with explicit opts; returns the kernel time in seconds.

  `bufs[i]` is DEFINE_GLOBAL i: a Buffer on `device`, or a flat numpy array (copied in, and the
  kernel's outputs copied back into it in place)."""
  dev = Device[device]
  if not isinstance(dev, OpenCLBackend): raise DeviceError(f"run_ast needs an OpenCL device, got {device}")
  real: list[Buffer] = []
  back: list[tuple[np.ndarray, Buffer]] = []
  for b in bufs:
    if isinstance(b, np.ndarray):
      nb = Buffer(device, b.size, dtypes.from_np(b.dtype)).allocate().copyin(b)
      real.append(nb)
      back.append((b, nb))
    else: real.append(b)
  t = dev.run(ast, real, var_vals, opts)
  outs = {s.src[0].arg for s in ast.src} if ast.op is Ops.SINK else set()
  for i, (arr, nb) in enumerate(back):
    if real.index(nb) in outs: arr.reshape(-1)[:] = nb.numpy()
  return t

__all__ = ["OpenCLBackend", "opencl_available", "list_devices", "select_device", "run_ast", "CompileError", "LaunchError", "target_of", "cache_dir",
           "launch_bounds"]
