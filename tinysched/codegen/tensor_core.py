"""Tensor cores: a matmul-shaped kernel rendered as a tiled kernel whose inner product is NVIDIA's warp-level
`mma.sync.m16n8k16` (fp16 or bf16 operands, fp32 accumulation), written as inline PTX in OpenCL C.

The Opt is `Opt(OptOps.TC, 0, tile)`: applied first and alone (it fixes the whole schedule), `tile` one of
tc_match.TILES, which also says which kernels qualify (`match`: a sum of products of two fp16 or bf16 loads, one
unmasked view each, and an elementwise epilogue). It is recorded in program captures like any other Opt; the heuristic
chooses it only for a target whose `tensor_cores` names the instruction set (`SM80`: a real NVIDIA device whose
compiler passes the probe, runtime/opencl.py, or the named `nvidia-like-gpu` target); lowering it for any other
target (PoCL) is refused.

Numbers: products are exact in fp32 (11+11 or 8+8 significant bits) and summed in fp32 in a different order than the
reference; an AST whose product is rounded to half before the sum (`CAST(float, MUL(half, half))`) is computed
without that rounding. Both stay inside half's tolerance (replay/execute/inputs.py, 1e-2); a wrong fragment layout is off
by O(1) (measured: relative error 12 on an H100). The epilogue (a bias, a residual, a scale, ReLU, GELU) computes in
float with OpenCL's float functions and rounds every inexact half or bfloat16 result where the AST has it, as the
renderer does for half without cl_khr_fp16 (opencl.py).

The kernel: a work-group of warps_m x warps_n warps computes a bm x bn output tile; each warp (bm/warps_m) x
(bn/warps_n) of it as m16n8 fragments. Per step of BK=32 along K, each operand's tile is copied into local memory in the
layout its memory has (the direction that is contiguous in global memory stays contiguous: A as [m][k] or [k][m], B as
[k][n] or [n][k]; rows padded by 8 halves, or their 16-byte chunks XOR-swizzled, so the 8 rows one ldmatrix reads fall
in distinct banks). With 16-byte aligned rows, `cp.async` fills the next stages while this one is multiplied (one
barrier a step); otherwise vector or scalar loads, one stage. Fragments are read with `ldmatrix` (`.trans` where the
layout is transposed to what mma wants). Where the tile does not divide M or N, the last tiles hang over the matrix:
their copies read only what lies inside it (cp.async's source size, else guarded loads) and fill the rest with zeros,
and their stores are guarded; shapes the tiles divide render without a guard.
"""
from __future__ import annotations
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING
import numpy as np
from tinysched.dtype import DType, dtypes, bf16_round
from tinysched.ops import Ops
from tinysched.uop import UOp
from tinysched.cost import ProgramCost
from tinysched.codegen.target import Target, SM80
from tinysched.codegen.opencl import scalar_helpers, render_const
from tinysched.codegen.tc_match import BK, TILES, Tile, Operand, Match, match, fits, grid, const_of

if TYPE_CHECKING: from tinysched.codegen.kernel import Kernel  # (for types only)

PAD = 8  # halves added to each local row: 16 bytes, so ldmatrix's 8 row addresses hit 8 different bank groups

# *** layouts: how each operand's tile sits in local memory, and how ldmatrix reads it ***

@dataclass(frozen=True)
class Staging:
  rows_k: bool       # local rows run along k ([k][m] for A, [k][n] for B), else along m / n
  rows: int          # local rows
  cols: int          # halves per row
  row_stride: int    # global elements between consecutive local rows
  col_stride: int    # global elements between consecutive columns (1: contiguous, copied in 16-byte chunks)
  aligned: bool      # every 8-column chunk starts 16-byte aligned in global memory (cp.async can copy it)
  swizzle: bool
  @property
  def ld(self) -> int: return self.cols if self.swizzle else self.cols + PAD
  @property
  def size(self) -> int: return self.rows * self.ld   # halves per stage
  def at(self, r: str, c: str, chunk: bool) -> str:
    """The offset (halves) of row r, column c in a stage; `chunk`: c is a multiple of 8 (a 16-byte chunk's start).
    Swizzled: chunk c/8 of row r sits at (c/8) ^ f(r), f spreading the 8 rows one ldmatrix reads over 8 bank groups."""
    if not self.swizzle: return f"({r}) * {self.ld} + ({c})"
    f = f"(({r}) & 7)" if self.cols >= 64 else f"((({r}) >> 1) & 3)"  # 8+ chunks a row: rows 0-7 apart; 4 chunks (BK): pairs
    if chunk: return f"({r}) * {self.ld} + ((({c}) >> 3) ^ {f}) * 8"
    return f"({r}) * {self.ld} + ((({c}) >> 3) ^ {f}) * 8 + (({c}) & 7)"

def _staging(op: Operand, mn_axis: int, k_axis: int, mn: int, batch_axes: tuple[int, ...], swizzle: bool) -> Staging:
  s_mn, s_k = op.strides[mn_axis], op.strides[k_axis]
  if s_k == 1: rows_k, rs, cs = False, s_mn, 1       # [mn][k]: k contiguous
  elif s_mn == 1: rows_k, rs, cs = True, s_k, 1      # [k][mn]: mn contiguous
  else: rows_k, rs, cs = False, s_mn, s_k            # neither: [mn][k], element by element
  aligned = cs == 1 and rs % 8 == 0 and op.offset % 8 == 0 and all(op.strides[i] % 8 == 0 for i in batch_axes)
  return Staging(rows_k, BK if rows_k else mn, mn if rows_k else BK, rs, cs, aligned, swizzle)

def a_ldmatrix_trans(rows_k: bool) -> bool:
  """Whether A's fragments are read transposed: mma wants A by rows (m), so a [k][m] tile is read with `.trans`. The
  planted fragment-layout bug (tests/replay/plants) inverts this answer."""
  return rows_k

def b_ldmatrix_trans(rows_k: bool) -> bool:
  """mma wants B by columns (n): a [k][n] tile is read with `.trans`, an [n][k] tile as it is."""
  return rows_k

# *** rendering ***

def _ctype_idx(*ops_shape: tuple[Operand, tuple[int, ...]]) -> str:
  """int when every index of every operand fits 32 bits, else long."""
  hi = 0
  for op, shape in ops_shape:
    hi = max(hi, op.offset + sum((n - 1) * abs(s) for n, s in zip(shape, op.strides)))
  return "int" if hi < 2**31 - 1 else "long"

def _copy(name: str, buf: str, base: str, st: Staging, stage: str, row0: str, col0: str, threads: int, use_async: bool,
          idx: str, edge: tuple[bool, int] | None = None) -> list[str]:
  """Code that copies one operand's tile into local stage `stage` (an expression): rows x cols halves, 8 per chunk.
  `edge`: (m or n runs along the local rows, the matrix's size along it) where the last tile hangs over the matrix: what
  lies past it is filled with zeros and never read (its products land only in outputs that are not stored)."""
  out: list[str] = []
  assert (st.rows * st.cols // 8) % threads == 0, "tiles are powers of two, larger than a work-group's chunks"
  if st.col_stride == 1:
    per = st.cols // 8
    # nv: how many of the chunk's 8 halves lie inside the matrix
    nv = "" if edge is None else f", nv = ({row0} + r < {edge[1]}) * 8" if edge[0] else f", nv = min(max({edge[1]} - ({col0} + c8), 0), 8)"
    off = f"{base} + ({idx})({row0} + r) * {st.row_stride} + ({col0} + c8)"
    if edge is not None: off = f"({off}) * (nv > 0)"  # wholly past the edge: the buffer's start, of which nothing is read
    out.append(f"for (int i = 0; i < {st.rows * per // threads}; i++) {{")
    out.append(f"  int c = tid + i * {threads}, r = c / {per}, c8 = (c % {per}) * 8{nv};")
    out.append(f"  __global const ushort* src = {buf} + {off};")
    out.append(f"  __local ushort* dst = {name} + ({stage}) * {st.size} + {st.at('r', 'c8', True)};")
    if use_async and edge is not None:  # src-size nv*2 bytes: cp.async fills the rest of the 16 with zeros
      out.append('  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"((uint)(size_t)dst), "l"(src), "r"(nv * 2));')
    elif use_async: out.append('  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"((uint)(size_t)dst), "l"(src));')
    elif edge is not None:
      out.append("  if (nv == 8) vstore8(vload8(0, src), 0, dst); else for (int x = 0; x < 8; x++) dst[x] = x < nv ? src[x] : 0;")
    else: out.append("  vstore8(vload8(0, src), 0, dst);")
    out.append("}")
  else:
    ok = "" if edge is None else f", ok = {row0} + r < {edge[1]}" if edge[0] else f", ok = {col0} + c < {edge[1]}"
    read = f"{buf}[{base} + ({idx})({row0} + r) * {st.row_stride} + ({idx})({col0} + c) * {st.col_stride}]"
    out.append(f"for (int i = 0; i < {st.rows * st.cols // threads}; i++) {{")
    out.append(f"  int e = tid + i * {threads}, r = e / {st.cols}, c = e % {st.cols}{ok};")
    out.append(f"  {name}[({stage}) * {st.size} + {st.at('r', 'c', False)}] = {read if edge is None else f'ok ? {read} : 0'};")
    out.append("}")
  return out

def _batch_terms(mt: Match, op: Operand) -> str:
  """The batch axes' part of an operand's index, from group id 2 (mixed radix over the batch axes, outer first)."""
  terms: list[str] = []
  inner = 1
  for ax, size in reversed(list(zip(mt.batch_axes, mt.batch))):
    if op.strides[ax] != 0 and size > 1:
      digit = f"(bz / {inner})" if inner > 1 else "bz"
      terms.append(f"({digit} % {size}) * {op.strides[ax]}")
    inner *= size
  return " + ".join([str(op.offset)] + terms[::-1])

_MATH = {Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SQRT: "sqrt", Ops.SIN: "sin"}  # OpenCL's float functions, as opencl.py renders them
_MEM_C = {dtypes.float32: "float", dtypes.float16: "half", dtypes.bfloat16: "ushort"}  # a buffer's element type in C

def _load(buf: int, dt: DType, at: str) -> str:
  """A float-valued read of element `at` (half and bfloat16 widen exactly)."""
  if dt == dtypes.float16: return f"vload_half({at}, data{buf})"
  if dt == dtypes.bfloat16: return f"as_float(((uint)data{buf}[{at}])<<16)"
  return f"data{buf}[{at}]"

def _const(c: float, dt: DType) -> str:
  with np.errstate(all="ignore"): v = float(np.float16(c)) if dt == dtypes.float16 else bf16_round(c) if dt == dtypes.bfloat16 else c
  return render_const(v, dtypes.float32)

def _epilogue_code(mt: Match, k: Kernel, idx: str, m: str, n: str, helpers: dict[str, None]) -> tuple[list[str], str]:
  """Statements computing the stored value at output (m, n) from the sum `v`, and the name of the result. Values are
  floats; a half or bfloat16 result of an op that can be inexact (all but negation and max) is rounded to its dtype
  there, as the renderer does for float-carried dtypes (opencl.py), so the epilogue computes what the AST says."""
  names: dict[UOp, str] = {mt.red: "v"}
  lines: list[str] = []
  loads = dict(mt.epi_loads)
  load_no = {u: i for i, u in enumerate(loads)}
  def value(u: UOp) -> str:
    if u in names: return names[u]
    if (c := const_of(u, k)) is not None: expr = _const(c.arg, c.dtype)
    elif u in loads:
      op = loads[u]
      expr = _load(op.buf, op.dtype, f"ebase{load_no[u]} + ({idx})({m}) * {op.strides[mt.m_axis]} + ({idx})({n}) * {op.strides[mt.n_axis]}")
    else:
      a = [value(x) for x in u.src]
      if u.op is Ops.ADD: expr = f"({a[0]}+{a[1]})"
      elif u.op is Ops.MUL: expr = f"({a[0]}*{a[1]})"
      elif u.op is Ops.NEG: expr = f"(-{a[0]})"
      elif u.op is Ops.MAX: expr = f"((({a[0]})>({a[1]})||({a[0]})!=({a[0]}))?({a[0]}):({a[1]}))"  # NaN-propagating, as opencl.py
      elif u.op in _MATH: expr = f"{_MATH[u.op]}({a[0]})"
      elif u.op is Ops.RECIP: expr = f"(1.0f/{a[0]})"
      elif u.src[0] is mt.red and mt.red.dtype == dtypes.bfloat16:  # a bfloat16 sum is carried unrounded: a cast reads it rounded
        helpers["ts_bf16_round"] = None
        expr = f"ts_bf16_round({a[0]})"
      else: expr = a[0]  # CAST among float dtypes: the value as float, rounded below when the target dtype is narrower
      if u.op not in (Ops.NEG, Ops.MAX) and u.dtype in (dtypes.float16, dtypes.bfloat16):  # (negation and max are exact)
        h = "ts_half_round" if u.dtype == dtypes.float16 else "ts_bf16_round"
        helpers[h] = None
        expr = f"{h}({expr})"
    names[u] = f"e{len(lines)}"
    lines.append(f"float {names[u]} = {expr};")
    return names[u]
  res = value(mt.value)
  return lines, res

def kernel_name(k: Kernel, tile: Tile) -> str: return f"tc{tile.bm}x{tile.bn}w{tile.threads // 32}_{k.name}"

def stagings(k: Kernel, mt: Match, tile: Tile) -> tuple[Staging, Staging, int]:
  """A's and B's local layouts, and the stages the kernel keeps (1 where an operand cannot be copied by cp.async)."""
  sa = _staging(mt.a, mt.m_axis, k.n_out, tile.bm, mt.batch_axes, tile.swizzle)
  sb = _staging(mt.b, mt.n_axis, k.n_out, tile.bn, mt.batch_axes, tile.swizzle)
  return sa, sb, tile.stages if sa.aligned and sb.aligned else 1

def local_bytes(k: Kernel, mt: Match, tile: Tile) -> int:
  sa, sb, nst = stagings(k, mt, tile)
  return 2 * nst * (sa.size + sb.size)

def render(k: Kernel, mt: Match, tile: Tile, name: str) -> str:
  """The OpenCL C source of `mt` computed with `tile` (see the module doc)."""
  T = tile.threads
  sa, sb, S = stagings(k, mt, tile)
  full = tuple(int(x) for x in k.full_shape)  # type: ignore[arg-type]  # all ints: match() refuses symbolic shapes
  idx = _ctype_idx(*[(op, full) for op in (mt.a, mt.b, mt.c, *(op for _, op in mt.epi_loads))])
  wtm, wtn = tile.bm // tile.warps_m, tile.bn // tile.warps_n
  MI, NI = tile.mi, tile.ni
  ins = "bf16" if mt.in_dtype == dtypes.bfloat16 else "f16"
  args = [f"__global {'' if b.arg in k.outbufs else 'const '}{_MEM_C[b.dtype.base]}* data{b.arg}" for b in k.bufs]
  helpers: dict[str, None] = {"ts_bf16_bits": None} if mt.c.dtype == dtypes.bfloat16 else {}
  L: list[str] = []
  L.append(f"__kernel __attribute__((reqd_work_group_size({T}, 1, 1))) void {name}({', '.join(args)}) {{")
  body: list[str] = []
  # 16-byte aligned: cp.async writes and ldmatrix reads whole 16-byte rows
  body.append(f"__local ushort As[{S * sa.size}] __attribute__((aligned(16)));")
  body.append(f"__local ushort Bs[{S * sb.size}] __attribute__((aligned(16)));")
  body.append("const int tid = get_local_id(0), warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;")
  body.append(f"const int bn = get_group_id(0) * {tile.bn}, bm = get_group_id(1) * {tile.bm}, bz = get_group_id(2);")
  body.append(f"const {idx} abase = {_batch_terms(mt, mt.a)}, bbase = {_batch_terms(mt, mt.b)}, cbase = {_batch_terms(mt, mt.c)};")
  for i, (_, op) in enumerate(mt.epi_loads): body.append(f"const {idx} ebase{i} = {_batch_terms(mt, op)};")
  body.append(f"const int wm = (warp / {tile.warps_n}) * {wtm}, wn = (warp % {tile.warps_n}) * {wtn};")
  body.append(f"float acc[{MI}][{NI}][4];")
  body.append(f"for (int i = 0; i < {MI}; i++) for (int j = 0; j < {NI}; j++) for (int e = 0; e < 4; e++) acc[i][j][e] = 0.0f;")
  use_async = S > 1
  # the tiles hang over the matrix where the tile does not divide it: those copies and stores are guarded
  em, en = mt.M % tile.bm != 0, mt.N % tile.bn != 0
  def copies(stage: str, k0: str) -> list[str]:
    a_rc = (k0, "bm") if sa.rows_k else ("bm", k0)
    b_rc = (k0, "bn") if sb.rows_k else ("bn", k0)
    return _copy("As", f"((__global const ushort*)data{mt.a.buf})", "abase", sa, stage, a_rc[0], a_rc[1], T, use_async, idx,
                 (not sa.rows_k, mt.M) if em else None) + \
           _copy("Bs", f"((__global const ushort*)data{mt.b.buf})", "bbase", sb, stage, b_rc[0], b_rc[1], T, use_async, idx,
                 (not sb.rows_k, mt.N) if en else None)
  # per lane, the row of which 8x8 matrix it points ldmatrix at
  def a_addr(mi: int) -> str:
    # 4 matrices in mma's register order a0..a3: (m 0-7, k 0-7), (m 8-15, k 0-7), (m 0-7, k 8-15), (m 8-15, k 8-15)
    if not sa.rows_k: return sa.at(f"wm + {mi * 16} + (lane & 15)", "kk + (lane >> 4) * 8", True)
    return sa.at("kk + (lane & 7) + (lane >> 4) * 8", f"wm + {mi * 16} + ((lane >> 3) & 1) * 8", True)
  def b_addr(ni: int) -> str:
    # 4 matrices: b[ni][0], b[ni][1], b[ni+1][0], b[ni+1][1] = (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15), (k 8-15, n 8-15)
    if sb.rows_k: return sb.at("kk + (lane & 7) + ((lane >> 3) & 1) * 8", f"wn + {ni * 8} + (lane >> 4) * 8", True)
    return sb.at(f"wn + {ni * 8} + (lane & 7) + (lane >> 4) * 8", "kk + ((lane >> 3) & 1) * 8", True)
  a_tr = ".trans" if a_ldmatrix_trans(sa.rows_k) else ""
  b_tr = ".trans" if b_ldmatrix_trans(sb.rows_k) else ""
  def compute(stage: str) -> list[str]:
    out = [f"const uint sA = (uint)(size_t)As + ({stage}) * {sa.size * 2}, sB = (uint)(size_t)Bs + ({stage}) * {sb.size * 2};",
           f"for (int kk = 0; kk < {BK}; kk += 16) {{", f"  uint af[{MI}][4], bf[{NI}][2];"]
    for mi in range(MI):
      out.append(f'  asm volatile("ldmatrix.sync.aligned.m8n8.x4{a_tr}.shared.b16 {{%0,%1,%2,%3}}, [%4];" : "=r"(af[{mi}][0]), '
                 f'"=r"(af[{mi}][1]), "=r"(af[{mi}][2]), "=r"(af[{mi}][3]) : "r"(sA + ({a_addr(mi)}) * 2));')
    for ni in range(0, NI, 2):
      out.append(f'  asm volatile("ldmatrix.sync.aligned.m8n8.x4{b_tr}.shared.b16 {{%0,%1,%2,%3}}, [%4];" : "=r"(bf[{ni}][0]), '
                 f'"=r"(bf[{ni}][1]), "=r"(bf[{ni + 1}][0]), "=r"(bf[{ni + 1}][1]) : "r"(sB + ({b_addr(ni)}) * 2));')
    out.append(f"  for (int i = 0; i < {MI}; i++) for (int j = 0; j < {NI}; j++)")
    out.append(f'    asm("mma.sync.aligned.m16n8k16.row.col.f32.{ins}.{ins}.f32 {{%0,%1,%2,%3}}, {{%4,%5,%6,%7}}, {{%8,%9}}, {{%0,%1,%2,%3}};"')
    out.append('        : "+f"(acc[i][j][0]), "+f"(acc[i][j][1]), "+f"(acc[i][j][2]), "+f"(acc[i][j][3])')
    out.append('        : "r"(af[i][0]), "r"(af[i][1]), "r"(af[i][2]), "r"(af[i][3]), "r"(bf[j][0]), "r"(bf[j][1]));')
    out.append("}")
    return out
  kt = mt.K // BK
  if use_async:
    # S-1 stages in flight: at step kt, wait for its stage, then refill the stage step kt-1 used (one barrier a step:
    # it both publishes stage kt and ends every warp's reads of stage kt-1)
    for s in range(S - 1):
      if s < kt: body += copies(str(s), str(s * BK))
      body.append('asm volatile("cp.async.commit_group;");')
    body.append("int st = 0;")
    body.append(f"for (int kt = 0; kt < {kt}; kt++) {{")
    body.append(f'  asm volatile("cp.async.wait_group {S - 2};");')
    body.append("  barrier(CLK_LOCAL_MEM_FENCE);")
    body.append(f"  if (kt + {S - 1} < {kt}) {{")
    nxt = f"(st + {S - 1}) % {S}" if S > 2 else "st ^ 1"
    body += ["    " + x for x in copies(nxt, f"(kt + {S - 1}) * {BK}")]
    body.append("  }")
    body.append('  asm volatile("cp.async.commit_group;");')
    body += ["  " + x for x in compute("st")]
    body.append(f"  st = st + 1 == {S} ? 0 : st + 1;")
    body.append("}")
  else:
    body.append(f"for (int kt = 0; kt < {kt}; kt++) {{")
    body += ["  " + x for x in copies("0", f"kt * {BK}")]
    body.append("  barrier(CLK_LOCAL_MEM_FENCE);")
    body += ["  " + x for x in compute("0")]
    body.append("  barrier(CLK_LOCAL_MEM_FENCE);")
    body.append("}")
  scm, scn = mt.c.strides[mt.m_axis], mt.c.strides[mt.n_axis]
  def put(v: str, m: str, n: str) -> str:
    at = f"cbase + ({idx})({m}) * {scm} + ({idx})({n}) * {scn}"
    if mt.c.dtype == dtypes.float16: return f"vstore_half_rte({v}, {at}, data{mt.c.buf});"
    if mt.c.dtype == dtypes.bfloat16: return f"data{mt.c.buf}[{at}] = ts_bf16_bits({v});"
    return f"data{mt.c.buf}[{at}] = {v};"
  body.append(f"for (int i = 0; i < {MI}; i++) for (int j = 0; j < {NI}; j++) {{")
  body.append("  const int m = bm + wm + i * 16 + g, n = bn + wn + j * 8 + t * 2;")
  # the sum, or a float32 sum's cast to the output dtype (the store rounds it): no epilogue
  plain = mt.value is mt.red or (mt.value.op is Ops.CAST and mt.value.src[0] is mt.red and mt.red.dtype == dtypes.float32)
  code, res = ([], "") if plain else _epilogue_code(mt, k, idx, "mm", "nn", helpers)  # one epilogue, at (mm, nn)
  inside = " && ".join(([f"mm < {mt.M}"] if em else []) + ([f"nn < {mt.N}"] if en else []))  # an edge tile stores what is inside
  for e, (dm, dn) in enumerate(((0, 0), (0, 1), (8, 0), (8, 1))):
    me, ne = f"m + {dm}" if dm else "m", f"n + {dn}" if dn else "n"
    if inside:
      body.append(f"  {{ const int mm = {me}, nn = {ne}; if ({inside}) {{ const float v = acc[i][j][{e}];")
      body += ["    " + x for x in code] + ["    " + put(res if not plain else "v", "mm", "nn"), "  } }"]
    elif plain: body.append("  " + put(f"acc[i][j][{e}]", me, ne))
    else:
      body.append(f"  {{ const int mm = {me}, nn = {ne}; const float v = acc[i][j][{e}];")
      body += ["    " + x for x in code] + ["    " + put(res, "mm", "nn"), "  }"]
  body.append("}")
  L += ["  " + x for x in body]
  L.append("}")
  return "\n".join(scalar_helpers(tuple(helpers)) + L) + "\n"

@dataclass(frozen=True)
class Built:
  name: str
  src: str
  global_size: tuple[int, ...]
  local_size: tuple[int, ...]
  local_mem: int
  cost: ProgramCost

class TensorCoreError(ValueError):
  """The tensor-core Opt cannot be lowered for this kernel or target."""

def refusal(k: Kernel, target: Target) -> str | None:
  """Why the tensor-core kernel for `k` (to which Opt(TC, 0, tile) applied) cannot run on `target`, or None: the target
  has no tensor cores, or the tile needs more work-items or local memory than it has. (Nothing is rendered.)"""
  if target.tensor_cores != SM80: return f"target {target.name} has no tensor cores this code generator uses (tensor_cores={target.tensor_cores!r})"
  tile, mt = TILES[k.tc], match(k)
  if isinstance(mt, str) or (why := fits(mt, tile)) is not None: return mt if isinstance(mt, str) else why
  if tile.threads > target.max_work_group_size: return f"{tile.threads} work-items exceed {target.name}'s limit"
  if (lm := local_bytes(k, mt, tile)) > target.local_mem_size: return f"{lm} bytes of local memory exceed {target.name}'s {target.local_mem_size}"
  return None

def build(k: Kernel, target: Target) -> Built:
  """The tensor-core kernel for `k` (to which Opt(TC, 0, tile) applied) on `target`, or TensorCoreError saying why not."""
  if (why := refusal(k, target)) is not None: raise TensorCoreError(f"Opt(TC, 0, {k.tc}): {why}")
  tile, mt = TILES[k.tc], match(k)
  assert not isinstance(mt, str)  # (refusal said so)
  name = kernel_name(k, tile)
  src, local_mem = render(k, mt, tile, name), local_bytes(k, mt, tile)
  nb = math.prod(mt.batch)
  gn, gm = grid(mt, tile)
  gs = (gn * tile.threads, gm, nb)
  acc = [0] * len(k.bufs)
  pos = {b.arg: i for i, b in enumerate(k.bufs)}
  acc[pos[mt.c.buf]] += mt.M * mt.N * nb
  acc[pos[mt.a.buf]] += mt.M * mt.K * nb * gn
  acc[pos[mt.b.buf]] += mt.N * mt.K * nb * gm
  for _, op in mt.epi_loads: acc[pos[op.buf]] += mt.M * mt.N * nb  # each output reads each of its epilogue loads once
  return Built(name, src, gs, (tile.threads, 1, 1), local_mem, ProgramCost(2 * mt.M * mt.N * mt.K * nb, tuple(acc)))

__all__ = ["build", "refusal", "render", "local_bytes", "Built", "TensorCoreError"]
