"""Default optimizations per device: `default_opts(ast, target) -> tuple[Opt, ...]`.

A pure function of (ast, target), so the chosen opts can be recorded and replayed. The choices:

GPU (target.is_gpu)
- a matmul of fp16 or bf16 operands summed in fp32 (tc_match.match), on a target with tensor cores: Opt(TC), 128x128
  tiles where they make at least one work-group per compute unit, else 64x64 (tensor_core.py); TINYSCHED_TC=0 forbids it
  (the target then has no tensor cores);
- matmul-shaped reduce (one reduce axis, two output axes each read by only one of two inputs):
  register tiles of 8x8 outputs per thread (two upcasts of 4 and 2 per axis, the 2 outer to the
  local threads so float4 reads stay conflict-free), 16x16 threads, the reduce unrolled by 8 and
  both inputs staged tile by tile through local memory (BM=BN=128, BK=8); smaller tiles when the
  shape does not divide; a skinny matmul (fewer such tiles than compute units: GPT-2's 64 tokens
  times a weight) instead splits the reduce over 16 threads of the work-group (GROUP) with 4x4 or
  smaller register tiles, as many work-groups as two per compute unit;
- convolution-shaped reduce (a channel axis and small window axes; one input, the weight, varies with
  one output axis only) with few outputs: 8 output channels per thread, 7 or 14 columns per
  work-group, the channel reduce split over 16 threads, the window unrolled;
- reduces with few outputs (less than a few waves of threads): GROUP the reduce over up to 256
  threads; when the reduce axis is contiguous in memory it is unrolled by 4 first, so every thread
  reads float4 and consecutive threads read consecutive float4s; when instead the outputs are the
  contiguous direction (column sums), LOCAL takes up to 32 neighbouring outputs (hardware dim 0)
  and GROUP splits the reduce over the rest of the work-group;
- everything else: upcast the contiguous output axis by 4 (float4 loads/stores), unroll small
  reduces, and a work-group of up to 256 threads along the output axes.
CPU: upcast the contiguous output axis by 4, register-tile matmuls (8x16 outputs per work-item)
and unroll small reduces; no work-groups (PoCL picks them and vectorizes across work-items).

A kernel whose reduces all fold to closed forms (lowerer.reduce_folds: arange) is treated as elementwise.
Every opt is tried on the kernel and kept only if it applies; the final set is lowered once for
the target and, if it exceeds a device limit, dropped to no opts.
"""
from __future__ import annotations
from tinysched.ops import Ops
from tinysched.uop import UOp
from tinysched.helpers import prod
from tinysched.codegen.kernel import Kernel, Opt, OptOps, KernelError, KernelOptError, GLOBAL, LOOP
from tinysched.codegen.target import Target, SM80
from tinysched.codegen import lowerer, tc_match, tensor_core

def _remaining(k: Kernel, axis: int, kind: str) -> int | None:
  s = next(p.size for p in k.parts[axis] if p.kind == kind)
  return s if type(s) is int else None

def _strides(k: Kernel, view: UOp) -> tuple: return k.sts[view].real_strides()

def _inner_loads(k: Kernel) -> list[UOp]:
  out: list[UOp] = []
  for r in k.reduceops:
    for u in r.src[0].toposort():
      if u.op is Ops.LOAD and u not in out: out.append(u)
  return out

def _contiguous_out_axis(k: Kernel) -> int | None:
  """The last output axis every store writes with stride 1 (float4 stores along it)."""
  if k.n_out == 0: return None
  a = k.n_out - 1
  for s in k.ast.src:
    st = _strides(k, s.src[1])
    if st[a] != 1: return None
  return a

def _matmul_axes(k: Kernel) -> tuple[int, int, UOp, UOp] | None:
  """(m axis, n axis, load A, load B) when the reduce looks like a matmul: a sum of products where A ignores n and B
  ignores m. Not a masked sum (an embedding's where(ids == arange, W, 0) has the same strides): register tiles of
  its compares and selects blow up the kernel (128 copies made PoCL's compiler take 13 GB)."""
  if k.n_red != 1 or k.n_out < 2 or type(k.full_shape[-1]) is not int: return None
  for r in k.reduceops:
    x = r.src[0]
    while x.op is Ops.CAST: x = x.src[0]
    if r.arg[0] is not Ops.ADD or x.op is not Ops.MUL: return None
  loads = _inner_loads(k)
  if len(loads) < 2: return None
  n_ax = k.n_out - 1
  for m_ax in range(k.n_out - 2, -1, -1):
    a = [ld for ld in loads if _strides(k, ld.src[1])[n_ax] == 0 and _strides(k, ld.src[1])[m_ax] != 0]
    b = [ld for ld in loads if _strides(k, ld.src[1])[m_ax] == 0 and _strides(k, ld.src[1])[n_ax] != 0]
    if a and b: return m_ax, n_ax, a[0], b[0]
  return None

def _try(k: Kernel, opts: list[Opt], *cands: Opt) -> bool:
  """Apply all of cands or none of them."""
  saved = k.state()
  for o in cands:
    try: k.apply_opt(o)
    except KernelOptError:
      k.restore(saved)
      return False
  opts.extend(cands)
  return True

def _gpu_matmul(k: Kernel, opts: list[Opt], mm: tuple[int, int, UOp, UOp], t: Target) -> bool:
  m_ax, n_ax, la, lb = mm
  M, N, K = _remaining(k, m_ax, GLOBAL), _remaining(k, n_ax, GLOBAL), _remaining(k, k.n_out, LOOP)
  if M is None or N is None or K is None: return False
  stage = [Opt(OptOps.STAGE, la.src[0].arg, 0), Opt(OptOps.STAGE, lb.src[0].arg, 0)] if la.src[0].arg != lb.src[0].arg else \
    [Opt(OptOps.STAGE, la.src[0].arg, 0)]
  tiles = [(up_in, up_out, loc, bk) for up_in, up_out, loc, bk in ((4, 2, 16, 8), (4, 1, 16, 8), (4, 1, 8, 8), (2, 1, 8, 4))
           if not (M % (up_in * up_out * loc) or N % (up_in * up_out * loc) or K % bk or loc * loc > t.max_work_group_size
                   or up_in * up_out * loc * bk * 2 * 4 > t.local_mem_size)]
  # a skinny matmul (a few tokens times a weight: M = 64 in GPT-2's layers) makes fewer big tiles than the device has
  # compute units, and each tile walks all of K alone: split K over the work-group instead (GROUP)
  if not tiles or (M // (tiles[0][0] * tiles[0][1] * tiles[0][2])) * (N // (tiles[0][0] * tiles[0][1] * tiles[0][2])) < t.compute_units:
    if _gpu_split_reduce(k, opts, m_ax, n_ax, M, N, K, t): return True
  for up_in, up_out, loc, bk in tiles:
    cands = [Opt(OptOps.UPCAST, m_ax, up_in), Opt(OptOps.LOCAL, m_ax, loc)] + ([Opt(OptOps.UPCAST, m_ax, up_out)] if up_out > 1 else []) + \
            [Opt(OptOps.UPCAST, n_ax, up_in), Opt(OptOps.LOCAL, n_ax, loc)] + ([Opt(OptOps.UPCAST, n_ax, up_out)] if up_out > 1 else []) + \
            [Opt(OptOps.UNROLL, 0, bk)] + stage
    if _try(k, opts, *cands): return True
  return False

def _gpu_split_reduce(k: Kernel, opts: list[Opt], m_ax: int, n_ax: int, M: int, N: int, K: int, t: Target) -> bool:
  """Register tiles of um x un outputs per thread, 16 threads along n, the reduce split over 16 more threads (GROUP,
  combined in local memory), the largest tile that still gives two work-groups per compute unit. Measured on an H200
  (bench/matmul_opts.py, GPT-2 s64's layers): 2.5-5.5x the staged 128x128 tiles, and the best or within 10% of the
  best of 523 candidates on each shape. An n axis the 16 threads cannot divide (the 50257-wide head) gets an m tile
  of up to 16 and a GROUP of 32 (the best of 54 such candidates: 626 us against 2,713 us before)."""
  g = 16
  for um, un in ((4, 4), (4, 2), (2, 2), (2, 1), (1, 1)):
    if M % um or N % (un * 16) or K % (g * 4): continue
    if (M // um) * (N // (un * 16)) < 2 * t.compute_units and (um, un) != (1, 1): continue
    if _try(k, opts, *[o for o in (Opt(OptOps.UPCAST, m_ax, um), Opt(OptOps.UPCAST, n_ax, un)) if o.amount > 1],
            Opt(OptOps.LOCAL, n_ax, 16), Opt(OptOps.GROUP, 0, g), Opt(OptOps.UNROLL, 0, 4)): return True
  for um in (16, 8, 4, 2):
    if M % um == 0 and K % 128 == 0 and _try(k, opts, Opt(OptOps.UPCAST, m_ax, um), Opt(OptOps.GROUP, 0, 32), Opt(OptOps.UNROLL, 0, 4)):
      return True
    if M % um == 0 and K % 32 == 0 and _try(k, opts, Opt(OptOps.UPCAST, m_ax, um), Opt(OptOps.GROUP, 0, 32)): return True
  return False

def _conv_axes(k: Kernel) -> tuple[int, int, int, list[int]] | None:
  """(output-channel axis, innermost spatial output axis, channel reduce axis, window reduce axes) when the kernel looks
  like a convolution: a sum of products over a channel axis and small window axes (each at most 7) of two loads, one
  (the weight) varying with only one output axis (the output channel), the other (the image) not varying with it."""
  if k.n_red < 2 or k.n_out < 2: return None
  for r in k.reduceops:
    x = r.src[0]
    while x.op is Ops.CAST: x = x.src[0]
    if r.arg[0] is not Ops.ADD or x.op is not Ops.MUL: return None
  loads = _inner_loads(k)
  if len(loads) != 2: return None
  for w, img in (loads, loads[::-1]):
    ws, xs = _strides(k, w.src[1]), _strides(k, img.src[1])
    varying = [a for a in range(k.n_out) if ws[a] != 0]
    if len(varying) != 1 or xs[varying[0]] != 0: continue
    sizes = [_remaining(k, k.n_out + i, LOOP) for i in range(k.n_red)]
    if None in sizes: return None
    ci = max(range(k.n_red), key=lambda i: sizes[i])  # type: ignore[arg-type, return-value]  # no None: checked above
    win = [i for i in range(k.n_red) if i != ci]
    if not all(s <= 7 for i, s in enumerate(sizes) if i != ci): return None  # type: ignore[operator]
    return varying[0], max(a for a in range(k.n_out) if a != varying[0]), ci, win
  return None

def _gpu_conv(k: Kernel, opts: list[Opt], axes: tuple[int, int, int, list[int]], t: Target) -> bool:
  """8 output channels per thread (the image value read once for 8 weights), 7 or 14 neighbouring columns in the
  work-group, the channel reduce split over 16 threads (GROUP), the window unrolled. Measured on an H200
  (bench/matmul_opts.py, ResNet-18's 3x3 convolutions at one image): within 10% of the best of 473 candidates on 64,
  128 and 256 channels (1.8x, 3.0x and 4.3x the generic choice); on 512 at 7x7 not in the best 8 (the best, 37.6 us,
  had 4 channels per thread, 7 rows and a GROUP of 32; the generic choice 174 us). Only for few outputs (up to 16 per
  thread of a wave of 256 threads on every compute unit): the measurement did not cover big batches."""
  co, col, ci, win = axes
  C, W, CI = _remaining(k, co, GLOBAL), _remaining(k, col, GLOBAL), _remaining(k, k.n_out + ci, LOOP)
  if None in (C, W, CI) or prod(s for s in k.full_shape[:k.n_out] if type(s) is int) > t.compute_units * 256 * 16: return False
  uc = next((u for u in (8, 4, 2) if C % u == 0), 1)  # type: ignore[operator]
  lw = next((d for d in (14, 7, 16, 8) if W % d == 0), 1)  # type: ignore[operator]
  if CI % 16 or 16 * lw > t.max_work_group_size: return False  # type: ignore[operator]
  cands = [o for o in (Opt(OptOps.UPCAST, co, uc), Opt(OptOps.LOCAL, col, lw)) if o.amount > 1] + [Opt(OptOps.GROUP, ci, 16)] + \
          [Opt(OptOps.UNROLL, i, 0) for i in sorted(win, reverse=True)]
  return _try(k, opts, *cands)

def _pow2_divisor(n: int, limit: int) -> int:
  d = 1
  while d * 2 <= limit and n % (d * 2) == 0: d *= 2
  return d

TC_TILES = (2, 1)  # tc_match.TILES in order of preference; one that makes fewer work-groups than compute units goes last

def _gpu_tensor_cores(k: Kernel, opts: list[Opt], t: Target) -> bool:
  if t.tensor_cores != SM80 or isinstance(mt := tc_match.match(k), str): return False
  groups = lambda tile: prod(tc_match.grid(mt, tile)) * prod(mt.batch)  # noqa: E731
  # a tile whose edge tiles would compute more than half again the outputs is not taken; one that wastes more than an
  # eighth comes after those that do not (a 64-row activation times a 50257-wide vocabulary: 64x64 tiles, not 128x128)
  fitting = [a for a in TC_TILES if tc_match.fits(mt, tc_match.TILES[a]) is None and tc_match.waste(mt, tc_match.TILES[a]) <= 0.5]
  for a in sorted(fitting, key=lambda a: (groups(tc_match.TILES[a]) < t.compute_units, tc_match.waste(mt, tc_match.TILES[a]) > 0.125,
                                          fitting.index(a))):
    saved = k.state()
    if _try(k, opts, Opt(OptOps.TC, 0, a)):
      if tensor_core.refusal(k, t) is None: return True  # the device's limits (work-group size, local memory)
      k.restore(saved)
      opts.pop()
  return False

def _gpu(k: Kernel, t: Target) -> list[Opt]:
  opts: list[Opt] = []
  if k.reduceops and _gpu_tensor_cores(k, opts, t): return opts
  if k.reduceops and (mm := _matmul_axes(k)) is not None and _gpu_matmul(k, opts, mm, t): return opts
  if k.reduceops and (cv := _conv_axes(k)) is not None and _gpu_conv(k, opts, cv, t): return opts
  out_size = prod(s for s in k.full_shape[:k.n_out] if type(s) is int)
  red_size = prod(s for s in k.full_shape[k.n_out:] if type(s) is int)
  cont = _contiguous_out_axis(k)
  if k.reduceops and k.n_red >= 1 and red_size >= 256 and out_size < t.compute_units * 256:
    # few outputs: spread each reduce over a work-group
    ra = max(range(k.n_red), key=lambda i: _remaining(k, k.n_out + i, LOOP) or 0)
    R = _remaining(k, k.n_out + ra, LOOP) or 0
    loads = _inner_loads(k)
    red_contig = bool(loads) and all(_strides(k, ld.src[1])[k.n_out + ra] in (0, 1) for ld in loads) and \
      any(_strides(k, ld.src[1])[k.n_out + ra] == 1 for ld in loads)
    budget = min(256, t.max_work_group_size)
    if red_contig and R % 4 == 0 and R >= 1024: _try(k, opts, Opt(OptOps.UNROLL, ra, 4))
    elif cont is not None and not red_contig:
      # the outputs are the contiguous direction: neighbouring threads take neighbouring outputs
      if (d := _pow2_divisor(_remaining(k, cont, GLOBAL) or 1, 32)) >= 4 and _try(k, opts, Opt(OptOps.LOCAL, cont, d)): budget //= d
    R = _remaining(k, k.n_out + ra, LOOP) or 0
    g = _pow2_divisor(R, budget)
    if g >= 4: _try(k, opts, Opt(OptOps.GROUP, ra, g))
    return opts
  if cont is not None and (_remaining(k, cont, GLOBAL) or 0) % 4 == 0 and out_size >= 4 * t.compute_units * 64:
    _try(k, opts, Opt(OptOps.UPCAST, cont, 4))
  _unroll_small(k, opts)
  _locals(k, opts, t, 256)
  return opts

def _unroll_small(k: Kernel, opts: list[Opt], limit: int = 32) -> None:
  """Unroll the innermost reduce axes while the unrolled body stays small (at most `limit` copies)."""
  unrolled = 1
  for i in range(k.n_red - 1, -1, -1):
    r = _remaining(k, k.n_out + i, LOOP)
    if r is None: break
    if r < 2: continue
    if r <= 16 and unrolled * r <= limit:
      if not _try(k, opts, Opt(OptOps.UNROLL, i, 0)): break
      unrolled *= r
      continue
    if r % 4 == 0 and unrolled * 4 <= limit: _try(k, opts, Opt(OptOps.UNROLL, i, 4))
    break

def _locals(k: Kernel, opts: list[Opt], t: Target, budget: int) -> None:
  budget = min(budget, t.max_work_group_size)
  for a in range(k.n_out - 1, -1, -1):
    g = _remaining(k, a, GLOBAL)
    if g is None or g < 2 or budget < 2: continue
    lim = min(budget, t.max_work_item_sizes[0] if t.max_work_item_sizes else budget)
    d = _pow2_divisor(g, lim)
    if d >= 2 and _try(k, opts, Opt(OptOps.LOCAL, a, d)): budget //= d

def _cpu(k: Kernel, t: Target) -> list[Opt]:
  opts: list[Opt] = []
  if k.reduceops and (mm := _matmul_axes(k)) is not None:
    m_ax, n_ax, _, _ = mm
    M, N, K = _remaining(k, m_ax, GLOBAL), _remaining(k, n_ax, GLOBAL), _remaining(k, k.n_out, LOOP)
    # register tiles; PoCL vectorizes across work-items, so wide tiles along the contiguous n axis pay off (measured on AVX-512)
    for um, un in ((8, 16), (8, 8), (4, 4)):
      if M and N and K and M % um == 0 and N % un == 0 and _try(k, opts, Opt(OptOps.UPCAST, m_ax, um), Opt(OptOps.UPCAST, n_ax, un)):
        return opts
  cont = _contiguous_out_axis(k)
  if cont is not None and (_remaining(k, cont, GLOBAL) or 0) % 4 == 0 and prod(s for s in k.full_shape[:k.n_out] if type(s) is int) >= 4096:
    _try(k, opts, Opt(OptOps.UPCAST, cont, 4))
  _unroll_small(k, opts)
  return opts

def default_opts(ast: UOp, target: Target) -> tuple[Opt, ...]:
  return choose_opts(ast, target)[0]

def choose_opts(ast: UOp, target: Target):
  """(the heuristic's opts, the kernel lowered with them, or None when there are none): the lowering that proves the
  opts fit the device is the one to_program renders, so it is not done twice."""
  if ast.op is not Ops.SINK: return (), None
  try: k = Kernel(ast)
  except KernelError: return (), None
  if lowerer.reduces_fold(k, target):
    # the reduces become closed forms (arange): the kernel is elementwise, reduce opts would only add idle threads
    opts: list[Opt] = []
    cont = _contiguous_out_axis(k)
    if cont is not None and (_remaining(k, cont, GLOBAL) or 0) % 4 == 0 and prod(s for s in k.full_shape[:k.n_out] if type(s) is int) >= 4096:
      _try(k, opts, Opt(OptOps.UPCAST, cont, 4))
    if target.is_gpu: _locals(k, opts, target, 256)
  else: opts = _gpu(k, target) if target.is_gpu else _cpu(k, target)
  if opts and opts[0].op is OptOps.TC: return tuple(opts), None  # a template, not a lowering (to_program builds it; _gpu checked it fits)
  if opts:
    try: return tuple(opts), lowerer.lower(Kernel(ast, opts), target)
    except KernelOptError: return (), None  # a device limit (work-group size, local memory): run without opts
  return (), None

__all__ = ["default_opts", "choose_opts"]
