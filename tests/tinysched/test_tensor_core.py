"""The tensor-core Opt (tinysched/codegen/tensor_core.py): which kernels and targets get it, how it is recorded and refused,
and its data movement checked on this CPU machine by a model of the PTX instructions it uses.

The model (`simulate`) reads the rendered source itself: the tile copies into local memory, ldmatrix's row addresses and
`.trans` flags, mma's operands and the epilogue's stores are taken from the OpenCL C text and evaluated (their index
expressions are C integer arithmetic that Python evaluates alike), and the instructions follow their definitions in
NVIDIA's PTX ISA (fragment layouts of mma.m16n8k16 and ldmatrix.m8n8), written here independently of the code generator.
So a wrong fragment layout, a copy that swizzles differently from the reads, or a wrong store index is caught without a
GPU; the GPU run (bench/tc_codegen.py, tests/replay/test_tc_gpu.py) checks the rest: the driver, cp.async and the stages.
"""
from __future__ import annotations
import dataclasses, os, re, subprocess, sys
from pathlib import Path
import numpy as np
import pytest
from tinysched import Tensor
from tinysched.dtype import dtypes, bf16_round
from tinysched.ops import Ops
from tinysched.codegen import to_program, Kernel, KernelOptError, tensor_core, tc_match
from tinysched.codegen.kernel import Opt, OptOps
from tinysched.codegen.heuristic import default_opts
from tinysched.codegen.target import NVIDIA_LIKE_GPU, POCL_CPU, GENERIC_GPU, Target, named_target

ROOT = Path(__file__).resolve().parents[2]
TC = lambda a: Opt(OptOps.TC, 0, a)  # noqa: E731

def ast_of(out: Tensor):
  return [s for s in out.schedule() if s.ast.op is Ops.SINK][-1].ast

def mm(M=128, K=64, N=128, dt=dtypes.float16, at=False, bt=False, batch=0):
  pre = (batch,) if batch else ()
  a = Tensor.empty(*pre, *((K, M) if at else (M, K)), dtype=dt)
  b = Tensor.empty(*pre, *((N, K) if bt else (K, N)), dtype=dt)
  return ast_of((a.transpose(-1, -2) if at else a) @ (b.transpose(-1, -2) if bt else b))

# *** which kernels, which targets ***

def test_the_heuristic_picks_tensor_cores_only_on_a_target_that_has_them():
  ast = mm(256, 64, 256)
  assert default_opts(ast, NVIDIA_LIKE_GPU)[0].op is OptOps.TC
  for t in (POCL_CPU, GENERIC_GPU, dataclasses.replace(NVIDIA_LIKE_GPU, tensor_cores="")):
    assert all(o.op is not OptOps.TC for o in default_opts(ast, t)), t.name
  with pytest.raises(KernelOptError, match="no tensor cores"):
    to_program(ast, [TC(2)], POCL_CPU)  # forced on a CPU: refused, naming why

def test_tensor_cores_are_forbidden_by_TINYSCHED_TC_0():
  code = "from tinysched.codegen.target import named_target; print(repr(named_target('nvidia-like-gpu').tensor_cores))"
  run = lambda v: subprocess.run([sys.executable, "-c", code], env={**os.environ, "TINYSCHED_TC": v}, capture_output=True, text=True, cwd=ROOT)  # noqa: E731
  assert run("0").stdout.strip() == "''" and run("1").stdout.strip() == "'sm80'"
  bad = run("yes")
  assert bad.returncode != 0 and "TINYSCHED_TC='yes'" in bad.stderr

def test_a_target_without_tensor_cores_keeps_its_capture_key():
  # program-level inputs hold the target's dict: a field added later must not re-key every capture made before it
  assert "tensor_cores" not in POCL_CPU.to_dict() and "tensor_cores" not in POCL_CPU.stable_repr()
  assert NVIDIA_LIKE_GPU.to_dict()["tensor_cores"] == "sm80"
  for t in (POCL_CPU, NVIDIA_LIKE_GPU): assert Target.from_dict(t.to_dict()) == t
  assert named_target("nvidia-like-gpu").tensor_cores == "sm80"

@pytest.mark.parametrize("make,why", [
  (lambda: mm(dt=dtypes.float32), "not both float16"),
  (lambda: ast_of((Tensor.empty(128, 64, dtype=dtypes.float16) @ Tensor.empty(64, 128, dtype=dtypes.float16) > 0).float()),
   "an epilogue with CAST of float"),  # (a cast of a comparison)
  (lambda: ast_of(Tensor.empty(128, 64, dtype=dtypes.float16) @ Tensor.empty(64, 128, dtype=dtypes.float16)
                  + Tensor.empty(128, 127, dtype=dtypes.float16).pad(((0, 0), (0, 1)))),
   "epilogue load through a masked"),
  (lambda: mm(K=48), "does not divide"),
  (lambda: ast_of(Tensor.empty(1, 16, 64, 64, dtype=dtypes.float16).conv2d(Tensor.empty(64, 16, 3, 3, dtype=dtypes.float16), padding=1)),
   "reduce axes"),
])
def test_what_tensor_cores_refuse_is_named(make, why):
  with pytest.raises(KernelOptError, match=why): Kernel(make(), [TC(2)])

def test_a_bias_and_relu_after_the_sum_are_an_epilogue_rounded_like_the_renderer():
  a, w, b = Tensor.empty(64, 128, dtype=dtypes.float16), Tensor.empty(256, 128, dtype=dtypes.float16), Tensor.empty(256, dtype=dtypes.float16)
  p = to_program(ast_of(((a @ w.T + b) * 0.5).relu()), None, NVIDIA_LIKE_GPU)
  assert p.opts == (TC(1),) and len(p.buf_dtypes) == 4
  # each half result of +, * and the cast of the sum is rounded to half where the AST computes it, not once at the store
  assert p.src.count("ts_half_round(") == 3 * 4 + 1 and "vload_half(ebase0" in p.src

def test_a_device_too_small_for_a_tile_gets_the_next_or_none():
  # the heuristic asks the device's limits (tensor_core.refusal) before it keeps Opt(TC): 128x128 needs 40 KiB of local
  # memory with two stages, 64x64 20 KiB
  ast = mm(256, 64, 256)
  assert default_opts(ast, dataclasses.replace(NVIDIA_LIKE_GPU, local_mem_size=24 << 10)) == (TC(1),)
  small = dataclasses.replace(NVIDIA_LIKE_GPU, local_mem_size=16 << 10)
  assert all(o.op is not OptOps.TC for o in default_opts(ast, small))
  with pytest.raises(KernelOptError, match="local memory"): to_program(ast, [TC(1)], small)  # forced: refused, saying why

def test_no_tensor_cores_on_an_opencl_device_without_them():
  # the runtime's probe must compute its product through the PTX instructions: PoCL cannot build them
  from tinysched.runtime.opencl import opencl_available, _all_devices, probe_tensor_cores, target_of
  if not opencl_available(): pytest.skip("needs an OpenCL platform")
  for d in _all_devices():
    if "NVIDIA" not in d.vendor.upper(): assert not probe_tensor_cores(d) and target_of(d).tensor_cores == ""

def test_tc_comes_first_and_alone():
  ast = mm(256, 64, 256)
  with pytest.raises(KernelOptError, match="first and only"): Kernel(ast, [Opt(OptOps.UPCAST, 0, 4), TC(2)])
  with pytest.raises(KernelOptError, match="after TC"): Kernel(ast, [TC(2), Opt(OptOps.UPCAST, 0, 4)])
  with pytest.raises(KernelOptError, match="not one of"): Kernel(ast, [TC(5)])
  with pytest.raises(KernelOptError, match="axis 0"): Kernel(ast, [Opt(OptOps.TC, 1, 2)])
  assert Opt.from_tuple(TC(2).to_tuple()) == TC(2)

def test_rendering_is_the_same_in_every_process():
  code = ("from tinysched import Tensor; from tinysched.dtype import dtypes; from tinysched.codegen import to_program;"
          "from tinysched.codegen.target import NVIDIA_LIKE_GPU; import hashlib;"
          "a = Tensor.empty(4, 128, 64, dtype=dtypes.bfloat16); b = Tensor.empty(4, 256, 64, dtype=dtypes.bfloat16);"
          "s = (a @ b.transpose(-1, -2)).schedule(); p = to_program(s[-1].ast, None, NVIDIA_LIKE_GPU);"
          "print(p.opts, hashlib.sha256(p.src.encode()).hexdigest())")
  outs = {subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONHASHSEED": seed}, capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout for seed in ("1", "2")}
  assert len(outs) == 1 and "TC" in outs.pop()

# *** the data movement, on a model of the PTX instructions ***

def _c(expr: str) -> str:
  """A C integer expression of the template as Python: casts dropped, / on non-negative ints is //. The operators it
  uses (* / % + - >> & ^) have the same relative precedence in both languages."""
  return re.sub(r"\((?:int|long|uint|size_t)\)", "", expr).replace("/", "//").replace("&&", " and ")

def _decls(line: str) -> list[str]:
  """The `name = expr` parts of a C declaration list (`a = 1, b = min(x, 8);`): split at commas outside parentheses."""
  parts, depth, cur = [], 0, ""
  for ch in line.rstrip(";"):
    depth += (ch == "(") - (ch == ")")
    if ch == "," and depth == 0:
      parts.append(cur.strip())
      cur = ""
    else: cur += ch
  return parts + [cur.strip()]

def _ev(expr: str, env: dict) -> int: return int(eval(_c(expr), {}, env))  # noqa: S307  (our own rendered text)

def _ldmatrix(mem: np.ndarray, addrs: list[int], trans: bool) -> list[list[tuple[float, float]]]:
  """ldmatrix.m8n8.x4.b16: lanes 8j..8j+7 give the row addresses of matrix j (8 halves a row); lane l gets from each
  matrix the pair (row l/4, columns 2(l%4), +1), or with .trans the pair (rows 2(l%4), +1, column l/4)."""
  mats = [np.stack([mem[addrs[8 * j + r]: addrs[8 * j + r] + 8] for r in range(8)]) for j in range(4)]
  out = []
  for lane in range(32):
    q, p = lane // 4, 2 * (lane % 4)
    out.append([(m[p, q], m[p + 1, q]) if trans else (m[q, p], m[q, p + 1]) for m in mats])
  return out

def _mma(a: list, b: list, acc: list) -> None:
  """mma.m16n8k16.row.col: lane (g, t) = (l/4, l%4) holds A's (g, 2t..), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..) in its four
  registers, B's (2t.., g) and (2t+8.., g) in two, and D's (g, 2t..) and (g+8, 2t..)."""
  A, B = np.zeros((16, 16)), np.zeros((16, 8))
  for lane in range(32):
    g, t = lane // 4, lane % 4
    for reg, (r, c) in enumerate(((g, 2 * t), (g + 8, 2 * t), (g, 2 * t + 8), (g + 8, 2 * t + 8))): A[r, c:c + 2] = a[lane][reg]
    for reg, k in enumerate((2 * t, 2 * t + 8)): B[k:k + 2, g] = b[lane][reg]
  D = A @ B
  for lane in range(32):
    g, t = lane // 4, lane % 4
    acc[lane] += np.array([D[g, 2 * t], D[g, 2 * t + 1], D[g + 8, 2 * t], D[g + 8, 2 * t + 1]])

def _stores(lines: list[str]) -> list[tuple[int, dict[str, str], list[tuple[str, str]], str, str, str, str]]:
  """The epilogue's four stores: (accumulator element, the block's own coordinates (mm, nn: C expressions), its statements
  (name, C expression), the stored value, the index, the output format: half, bf16 or float, the condition an edge tile
  stores under or "")."""
  out, i = [], next(n for n, x in enumerate(lines) if x.startswith("const int m = "))
  while i < len(lines):
    x = lines[i]
    e, at_mn, stmts, inside = None, {}, [], ""
    if (m := re.match(r"\{ const int mm = (.*?), nn = (.*?); (?:if \((.*?)\) \{ )?const float v = acc\[i\]\[j\]\[(\d)\];", x)):
      e, at_mn, inside, i = int(m[4]), {"mm": m[1], "nn": m[2]}, m[3] or "", i + 1
      while (d := re.match(r"float (e\d+) = (.*);", lines[i])):
        stmts.append((d[1], d[2]))
        i += 1
      x = lines[i]
    if (m := re.match(r"vstore_half_rte\((.*?), (cbase \+ .*), data\d+\);", x)): val, at, kind = m[1], m[2], "half"
    elif (m := re.match(r"data\d+\[(cbase \+ .*?)\] = ts_bf16_bits\((.*)\);", x)): val, at, kind = m[2], m[1], "bf16"
    elif (m := re.match(r"data\d+\[(cbase \+ .*?)\] = (.*);", x)): val, at, kind = m[2], m[1], "float"
    else:
      i += 1
      continue
    if e is None: e, val = int(re.fullmatch(r"acc\[i\]\[j\]\[(\d)\]", val)[1]), "v"  # type: ignore[index]  # no epilogue
    out.append((e, at_mn, stmts, val, at, kind, inside))
    i += 1
  assert sorted(x[0] for x in out) == [0, 1, 2, 3], out
  return out

def _f32(fn):  # OpenCL's float functions, in float32 (numpy's may differ from the device's by an ulp: tests allow for it)
  def f(x: float) -> float:
    with np.errstate(all="ignore"): return float(fn(np.float32(x)))
  return f
_MATH = {"E2": _f32(np.exp2), "L2": _f32(np.log2), "SQ": _f32(np.sqrt), "SN": _f32(np.sin), "RC": _f32(lambda x: np.float32(1) / x)}

def _half(x: float) -> float:
  with np.errstate(over="ignore"): return float(np.float16(x))  # past half's range: inf, as vstore_half_rte
def _bf16(x: float) -> float: return float(bf16_round(x))
def _max(a: float, b: float) -> float: return a if (a > b or a != a) else b

def _f(expr: str) -> str:
  """An epilogue's float C expression as Python over the model's buffers (B[n]: the values the kernel reads)."""
  expr = re.sub(r"\((?:int|long)\)", "", expr)
  expr = re.sub(r"vload_half\(([^,]*), data(\d+)\)", r"B[\2][int(\1)]", expr)
  expr = re.sub(r"as_float\(\(\(uint\)data(\d+)\[([^\]]*)\]\)<<16\)", r"B[\1][int(\2)]", expr)
  expr = re.sub(r"data(\d+)\[([^\]]*)\]", r"B[\1][int(\2)]", expr)
  expr = expr.replace("ts_half_round(", "H(").replace("ts_bf16_round(", "BF(")
  for c_fn, py in (("exp2(", "E2("), ("log2(", "L2("), ("sqrt(", "SQ("), ("sin(", "SN(")): expr = expr.replace(c_fn, py)
  expr = re.sub(r"\(1\.0f/(\w+)\)", r"RC(\1)", expr)
  expr = re.sub(r"\(\(\((\w+)\)>\((\w+)\)\|\|\(\1\)!=\(\1\)\)\?\(\1\):\(\2\)\)", r"MX(\1, \2)", expr)
  return re.sub(r"(\d+\.\d*(?:e[-+]?\d+)?)f\b", r"\1", expr)

def simulate(src: str, bufs: dict[int, np.ndarray], out_buf: int, out_size: int, k_total: int, groups=((0, 0),),
             out: np.ndarray | None = None) -> np.ndarray:
  """Run a one-stage tensor-core kernel (Tile stages=1) for the work-groups at `groups` ((bm, bn) pairs), batch 0, on the
  model. Every global read and store must land inside its buffer (an edge tile's guards are checked that way); a copy
  reads as many halves as its instruction says (16 bytes, or its `nv` where the instruction takes it)."""
  out = np.full(out_size, np.nan) if out is None else out
  for bm, bn in groups: _simulate_group(src, bufs, out, k_total, bm, bn)
  return out

def _simulate_group(src: str, bufs: dict[int, np.ndarray], out: np.ndarray, k_total: int, bm: int, bn: int) -> None:
  lines = [x.strip() for x in src.splitlines()]
  T = int(re.search(r"reqd_work_group_size\((\d+)", src)[1])  # type: ignore[index]
  decl = {m[1]: np.zeros(int(m[2])) for m in re.finditer(r"__local ushort (As|Bs)\[(\d+)\]", src)}
  wline = next(x for x in lines if x.startswith("const int wm ="))
  acc_shape = tuple(int(x) for x in re.search(r"float acc\[(\d+)\]\[(\d+)\]", src).groups())  # type: ignore[union-attr]
  MI, NI = acc_shape
  # the copies: (loop count, index line, src line, dst line) per operand, from the k loop's body
  copies = []
  for i, x in enumerate(lines):
    if (m := re.match(r"for \(int i = 0; i < (\d+); i\+\+\) \{", x)) and "tid + i" in lines[i + 1]:
      copies.append((int(m[1]), lines[i + 1], lines[i + 2], lines[i + 3], lines[i + 4]))
  lds = [re.search(r'x4(\.trans)?\.shared\.b16 .*: "=r"\((\w+)\[(\d+)\]\[(\d+)\]\), "=r"\(\w+\[(\d+)\]\[(\d+)\]\), "=r"\(\w+\[(\d+)\]\[(\d+)\]\), '
                   r'"=r"\(\w+\[(\d+)\]\[(\d+)\]\) : "r"\((sA|sB) \+ \((.*)\) \* 2\)\);', x) for x in lines if "ldmatrix" in x]
  assert 'asm("mma.sync' in src and '"r"(af[i][0]), "r"(af[i][1]), "r"(af[i][2]), "r"(af[i][3]), "r"(bf[j][0]), "r"(bf[j][1])' in src
  stores = _stores(lines)
  base = {"abase": 0, "bbase": 0, "cbase": 0, "bm": bm, "bn": bn}
  ebases = {m[1]: _ev(m[2], {"bz": 0}) for x in lines if (m := re.match(r"const (?:int|long) (ebase\d+) = (.*);", x))}
  accs = {}
  def read(buf: int, at: int, n: int) -> np.ndarray:
    assert 0 <= at and at + n <= len(bufs[buf]), f"a read of data{buf}[{at}:{at + n}] past its {len(bufs[buf])} elements"
    return bufs[buf][at:at + n]
  for kt in range(k_total // tc_match.BK):
    for name in decl: decl[name][:] = np.nan
    for count, idx_line, src_line, dst_line, op_line in copies:
      for tid in range(T):
        for i in range(count):
          env = {**base, "tid": tid, "i": i, "kt": kt}
          for part in _decls(idx_line.removeprefix("int ")):
            k, v = part.split(" = ")
            env[k] = _ev(v, env)
          if src_line.startswith("__global"):  # 16-byte chunks
            buf, s_expr = re.match(r"__global const ushort\* src = \(\(__global const ushort\*\)data(\d+)\) \+ (.*);", src_line).groups()  # type: ignore[union-attr]
            name, d_expr = re.match(r"__local ushort\* dst = (As|Bs) \+ (.*);", dst_line).groups()  # type: ignore[union-attr]
            s0, d0 = _ev(s_expr, env), _ev(d_expr, env)
            # the halves the instruction reads: src-size nv*2 bytes (cp.async), the guarded vector copy's nv, else 8
            n = env["nv"] if ('"r"(nv * 2)' in op_line or op_line.startswith("if (nv == 8)")) else 8
            decl[name][d0:d0 + 8] = np.concatenate([read(int(buf), s0, n), np.zeros(8 - n)])
          else:  # element by element
            name, d_expr, guard, buf, s_expr = re.match(r"(As|Bs)\[(.*)\] = (ok \? )?\(\(__global const ushort\*\)data(\d+)\)\[(.*?)\]"
                                                        r"(?: : 0)?;", src_line).groups()  # type: ignore[union-attr]
            decl[name][_ev(d_expr, env)] = read(int(buf), _ev(s_expr, env), 1)[0] if not guard or env["ok"] else 0
    for warp in range(T // 32):
      wenv = {"warp": warp}
      for part in _decls(wline.removeprefix("const int ")):
        k, v = part.split(" = ")
        wenv[k] = _ev(v, wenv)
      acc = accs.setdefault(warp, np.zeros((MI, NI, 32, 4)))
      for kk in range(0, tc_match.BK, 16):
        regs: dict[str, dict] = {"af": {}, "bf": {}}
        for m in lds:
          trans, arr, mem, expr = bool(m[1]), m[2], decl["As" if m[11] == "sA" else "Bs"], m[12]
          got = _ldmatrix(mem, [_ev(expr, {**wenv, "kk": kk, "lane": lane}) for lane in range(32)], trans)
          for j in range(4): regs[arr][(int(m[3 + 2 * j]), int(m[4 + 2 * j]))] = [got[lane][j] for lane in range(32)]
        for i in range(MI):
          for j in range(NI):
            a = [[regs["af"][(i, r)][lane] for r in range(4)] for lane in range(32)]
            b = [[regs["bf"][(j, r)][lane] for r in range(2)] for lane in range(32)]
            _mma(a, b, acc[i, j])
      mline = next(x for x in lines if x.startswith("const int m = "))
      for i in range(MI):
        for j in range(NI):
          for lane in range(32):
            env = {**base, **wenv, "i": i, "j": j, "g": lane // 4, "t": lane % 4}
            for part in _decls(mline.removeprefix("const int ")):
              k, v = part.split(" = ")
              env[k] = _ev(v, env)
            for e, at_mn, stmts, val, idx_expr, kind, inside in stores:
              senv = {**env, **{c: _ev(expr, env) for c, expr in at_mn.items()}}  # this store's own (mm, nn)
              if inside and not _ev(inside, senv): continue  # an edge tile's output past the matrix: not stored
              fenv = {**senv, **ebases, "v": acc[i, j, lane, e], "B": bufs, "H": _half, "BF": _bf16, "MX": _max, **_MATH}
              for name, expr in stmts: fenv[name] = eval(_f(expr), {}, fenv)  # noqa: S307  (our own rendered text)
              x = eval(_f(val), {}, fenv)  # noqa: S307
              at = _ev(idx_expr, senv)
              assert 0 <= at < len(out), f"a store at {at}, past the output's {len(out)} elements"
              out[at] = _half(x) if kind == "half" else _bf16(x) if kind == "bf16" else x

LAYOUTS = [(False, False), (True, False), (False, True), (True, True)]

def _check_layout(at: bool, bt: bool, tile: tc_match.Tile, planted: bool = False) -> float:
  M, N, K = tile.bm, tile.bn, 64
  ast = mm(M, K, N, at=at, bt=bt)
  k = Kernel(ast, [TC(2)])
  mt = tc_match.match(k)
  assert not isinstance(mt, str)
  src = tensor_core.render(k, mt, dataclasses.replace(tile, stages=1), "tc_model")
  rng = np.random.default_rng(0)
  A, B = rng.integers(-3, 4, (M, K)).astype(np.float64), rng.integers(-3, 4, (K, N)).astype(np.float64)
  bufs = {mt.a.buf: (A.T if at else A).reshape(-1).copy(), mt.b.buf: (B.T if bt else B).reshape(-1).copy()}
  got = simulate(src, bufs, mt.c.buf, M * N, K)
  return float(np.abs(got - (A @ B).reshape(-1)).max())

@pytest.mark.parametrize("at,bt", LAYOUTS)
@pytest.mark.parametrize("tile", [2, 3], ids=["padded", "swizzled"])
def test_the_kernel_moves_the_right_numbers_to_the_tensor_cores(at, bt, tile):
  # every operand layout ([m][k] and [k][m] for A, [k][n] and [n][k] for B), padded and swizzled local memory
  assert _check_layout(at, bt, tc_match.TILES[tile]) == 0

def test_the_model_catches_the_planted_fragment_layout(monkeypatch):
  # the plant of tests/replay/plants (tc_fragment): A read with the other ldmatrix mode, rows and columns swapped
  monkeypatch.setattr(tensor_core, "a_ldmatrix_trans", lambda rows_k: not rows_k)
  for at in (False, True): assert _check_layout(at, False, tc_match.TILES[2]) > 1

def _reference(ast, values: dict[int, np.ndarray], out_buf: int, size: int) -> np.ndarray:
  """The NUMPY interpreter runs the AST on the same values (a bfloat16 buffer holds their bits)."""
  from tinysched.runtime import interpreter  # (the reference: this test's one use of it)
  host: list[np.ndarray] = []
  for u in sorted({u for u in ast.toposort() if u.op is Ops.DEFINE_GLOBAL}, key=lambda u: u.arg):
    dt = u.dtype.base
    x = np.zeros(size) if u.arg == out_buf else values[u.arg]
    host.append((x.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16) if dt == dtypes.bfloat16 else x.astype(dt.fmt))
  interpreter.exec_ast(ast, host, {})
  o = host[out_buf]
  return (o.astype(np.uint32) << 16).view(np.float32).astype(np.float64) if o.dtype == np.uint16 else o.astype(np.float64)

def _epilogue_errors(dt, gelu: bool = False) -> list[float]:
  """Per epilogue (a bias, a scale and ReLU, a residual, a float result): the largest difference between the model and
  the NUMPY interpreter on the same values. Small integers keep every product and sum exact: what is left to differ is
  what the epilogue does."""
  x, w, bias, res = (Tensor.empty(*s, dtype=dt) for s in ((64, 64), (64, 64), (64,), (64, 64)))
  errs = []
  for out in [(x @ w + bias).gelu()] if gelu else (((x @ w + bias) * 0.5).relu(), res + x @ w, (x @ w).float() * 3 - 1):
    ast = ast_of(out)
    k = Kernel(ast, [TC(1)])
    mt = tc_match.match(k)
    assert not isinstance(mt, str) and mt.value is not mt.red
    src = tensor_core.render(k, mt, dataclasses.replace(tc_match.TILES[1], stages=1), "tc_model")
    rng = np.random.default_rng(2)
    size: dict[int, int] = {}  # each input buffer: as many elements as its views reach
    for u in ast.toposort():
      if u.op is Ops.LOAD: size[u.src[0].arg] = max(size.get(u.src[0].arg, 0), int(u.src[1].arg.real_size()))
    values = {i: rng.integers(-3, 4, n).astype(np.float64) for i, n in size.items()}
    got = simulate(src, values, mt.c.buf, 64 * 64, 64)
    errs.append(float(np.abs(got - _reference(ast, values, mt.c.buf, 64 * 64)).max()))
  return errs

@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.bfloat16], ids=["half", "bf16"])
def test_epilogues_compute_what_the_interpreter_computes(dt):
  assert _epilogue_errors(dt) == [0, 0, 0]

@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.bfloat16], ids=["half", "bf16"])
def test_a_gelu_epilogue_computes_what_the_interpreter_computes(dt):
  # exp2 and 1/x: the model's float32 functions (numpy's) and the interpreter's may differ by an ulp before rounding, so
  # an output may move by one ulp of the dtype (|values| here stay under 8: 2^-8 for half, 2^-5 for bfloat16)
  assert _epilogue_errors(dt, gelu=True)[0] <= (2.0 ** -8 if dt == dtypes.float16 else 2.0 ** -5)
  assert default_opts(ast_of((Tensor.empty(64, 64, dtype=dt) @ Tensor.empty(64, 64, dtype=dt)).gelu()), NVIDIA_LIKE_GPU)[0].op is OptOps.TC

def test_the_model_catches_an_epilogue_reading_the_wrong_element(monkeypatch):
  orig = tensor_core._load
  monkeypatch.setattr(tensor_core, "_load", lambda buf, dt, at: orig(buf, dt, f"(({at}) ^ 1)"))  # neighbours swapped
  errs = _epilogue_errors(dtypes.float16)
  assert errs[0] > 0 and errs[1] > 0 and errs[2] == 0  # the bias and the residual are loads; the third epilogue has none

def test_a_strided_operand_is_copied_element_by_element():
  # neither m nor k contiguous (a slice of every other column): no 16-byte chunks, scalar copies, still right
  a = Tensor.empty(128, 128, dtype=dtypes.float16)[:, ::2]
  b = Tensor.empty(64, 128, dtype=dtypes.float16)
  k = Kernel(ast_of(a @ b), [TC(2)])
  mt = tc_match.match(k)
  assert not isinstance(mt, str)
  src = tensor_core.render(k, mt, dataclasses.replace(tc_match.TILES[2], stages=1), "tc_model")
  assert "As[(0) *" in src and "cp.async" not in src
  rng = np.random.default_rng(1)
  A, B = rng.integers(-3, 4, (128, 128)).astype(np.float64), rng.integers(-3, 4, (64, 128)).astype(np.float64)
  got = simulate(src, {mt.a.buf: A.reshape(-1), mt.b.buf: B.reshape(-1)}, mt.c.buf, 128 * 128, 64)
  assert np.abs(got - (A[:, ::2] @ B).reshape(-1)).max() == 0

# *** edge tiles: M and N that the tile does not divide ***

def _edge_error(at: bool, bt: bool, M: int = 84, N: int = 70, tile: int = 1, mangle=lambda src: src) -> float:
  """Every work-group of an (M x 64) @ (64 x N) kernel on the model, the last ones hanging over both edges (84 and 70
  are no multiple of 64, and 70 and 84 rows of a transposed operand are no multiple of 8: partial 16-byte chunks)."""
  K = 64
  k = Kernel(mm(M, K, N, at=at, bt=bt), [TC(tile)])
  mt = tc_match.match(k)
  assert not isinstance(mt, str)
  t = dataclasses.replace(tc_match.TILES[tile], stages=1)
  src = mangle(tensor_core.render(k, mt, t, "tc_model"))
  rng = np.random.default_rng(4)
  A, B = rng.integers(-3, 4, (M, K)).astype(np.float64), rng.integers(-3, 4, (K, N)).astype(np.float64)
  bufs = {mt.a.buf: (A.T if at else A).reshape(-1).copy(), mt.b.buf: (B.T if bt else B).reshape(-1).copy()}
  gn, gm = tc_match.grid(mt, t)
  got = simulate(src, bufs, mt.c.buf, M * N, K, groups=[(i * t.bm, j * t.bn) for i in range(gm) for j in range(gn)])
  return float(np.nan_to_num(np.abs(got - (A @ B).reshape(-1)), nan=np.inf).max())

@pytest.mark.parametrize("at,bt", LAYOUTS)
def test_edge_tiles_store_exactly_the_matrix(at, bt):
  # zeros past the edges, reads and stores inside the buffers (the model asserts both), every output once
  assert _edge_error(at, bt) == 0

def test_the_model_catches_an_edge_tile_without_its_guards(monkeypatch):
  # a store guard dropped: the edge tile writes past the output (or over the next row's outputs)
  with pytest.raises(AssertionError, match="past the output"):
    _edge_error(False, False, mangle=lambda src: re.sub(r"if \((mm|nn) < \d+( && nn < \d+)?\) \{", "if (1) {", src))
  # the copies unguarded: a partial chunk at the end of B reads past the buffer
  orig = tensor_core._copy
  monkeypatch.setattr(tensor_core, "_copy", lambda *a, **kw: orig(*a[:10]))
  with pytest.raises(AssertionError, match="past its"): _edge_error(True, True)

def test_a_vocabulary_wide_head_takes_tensor_cores():
  # GPT-2's tied head: 64 tokens x 768 times 768 x 50257 (no tile divides 50257); the 64x64 tile, not 128x128 (which would
  # compute twice the rows)
  x, wte = Tensor.empty(64, 768, dtype=dtypes.float16), Tensor.empty(50257, 768, dtype=dtypes.float16)
  ast = ast_of(x @ wte.T)
  assert default_opts(ast, NVIDIA_LIKE_GPU) == (TC(1),)
  p = to_program(ast, None, NVIDIA_LIKE_GPU)
  assert p.global_size == (-(-50257 // 64) * 128, 1, 1) and "nn < 50257" in p.src and "mm <" not in p.src
  # shapes the tiles divide render as before: no guard anywhere
  assert "nv" not in to_program(mm(256, 64, 256), None, NVIDIA_LIKE_GPU).src
  # far too small for a tile (more than half of it past the edges): not taken
  assert all(o.op is not OptOps.TC for o in default_opts(mm(16, 64, 16), NVIDIA_LIKE_GPU))

@pytest.mark.parametrize("case", ["B 1001 of 1008 columns", "A^T 116 of 128 columns"])
def test_a_chunk_partly_past_the_edge_reads_only_inside(case):
  # rows aligned for cp.async (1008 and 128 halves), the matrix ending mid-chunk: the last chunk's halves past the edge are
  # not read (the model's buffers end where the views do) and the product is the interpreter's
  f16 = dtypes.float16
  out = (Tensor.empty(120, 64, dtype=f16) @ Tensor.empty(64, 1008, dtype=f16)[:, :1001] if case.startswith("B")
         else Tensor.empty(64, 128, dtype=f16)[:, :116].T @ Tensor.empty(64, 256, dtype=f16))
  ast = ast_of(out)
  assert default_opts(ast, NVIDIA_LIKE_GPU)[0].op is OptOps.TC
  k = Kernel(ast, [TC(2)])
  mt = tc_match.match(k)
  assert not isinstance(mt, str) and (mt.M, mt.N) in ((120, 1001), (116, 256))
  t = dataclasses.replace(tc_match.TILES[2], stages=1)
  src = tensor_core.render(k, mt, t, "tc_model")
  size: dict[int, int] = {}
  for u in ast.toposort():
    if u.op is Ops.LOAD: size[u.src[0].arg] = max(size.get(u.src[0].arg, 0), int(u.src[1].arg.real_size()))
  rng = np.random.default_rng(6)
  values = {i: rng.integers(-3, 4, n).astype(np.float64) for i, n in size.items()}
  gn, gm = tc_match.grid(mt, t)
  got = simulate(src, values, mt.c.buf, mt.M * mt.N, mt.K, groups=[(i * t.bm, j * t.bn) for i in range(gm) for j in range(gn)])
  assert np.abs(got - _reference(ast, values, mt.c.buf, mt.M * mt.N)).max() == 0
