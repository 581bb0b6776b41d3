"""The canonical, versioned JSON encoding of UOp graphs.

A document is `{"format": "tinysched-uop", "version": 1, "nodes": [...], "roots": [...], ...}`; each
node is `[op name, dtype, [source indices], arg]` with sources always earlier in the list. Args are
typed JSON: null/true/false/int/str as themselves, and tagged objects for the rest:
`{"f": float.hex}` (exact, keeps -0.0, inf, nan), `{"t": [...]}` tuple, `{"op": "ADD"}`,
`{"dt": "float", "ptr": 1, "n": 4}`, `{"u": i}` a node of the same document (symbolic ints inside
views), `{"v": [shape, strides, offset, mask]}` a View, `{"st": [views]}` a ShapeTracker.

Canonical: BUFFER numbers are replaced by their first-appearance order, JSON is written with sorted
keys and no whitespace, so the same work captured in two processes has the same bytes and `key`
(sha256 hex of the bytes). Decoding validates everything and raises IncompatibleCapture; it never
runs code (no pickle, no eval).
"""
from __future__ import annotations
import hashlib, json
from typing import Any
from tinysched.dtype import DType, PtrDType, dtypes
from tinysched.ops import Ops
from tinysched.uop import UOp
from tinysched.shape import View, ShapeTracker

FORMAT, VERSION = "tinysched-uop", 1

class IncompatibleCapture(ValueError):
  """A stored capture cannot be decoded by this code (unknown version, op, dtype or a malformed node)."""

_DTYPE_ENC: dict[DType, dict] = {}  # dtypes are canonical objects: encode each once
def _enc_dtype(d: DType) -> dict:
  if (out := _DTYPE_ENC.get(d)) is not None: return out
  base = d.base if isinstance(d, PtrDType) else d
  out = {"dt": base.scalar().name}
  if base.count != 1: out["n"] = base.count
  if isinstance(d, PtrDType): out["ptr"] = 1
  return _DTYPE_ENC.setdefault(d, out)

def _has_uop(x: Any) -> bool:
  if isinstance(x, UOp): return True
  if isinstance(x, tuple): return any(_has_uop(a) for a in x)
  if isinstance(x, View): return not x._ints
  if isinstance(x, ShapeTracker): return any(not v._ints for v in x.views)
  return False

class _Encoder:
  def __init__(self, canonical_buffers: bool = True):
    self.nodes: list[list] = []
    self.index: dict[UOp, int] = {}
    self.buf_nums: dict[Any, int] = {}
    self.canonical_buffers = canonical_buffers
  def arg(self, x: Any) -> Any:
    if x is None or type(x) in (bool, int, str): return x
    if type(x) is float: return {"f": x.hex()}
    if isinstance(x, tuple): return {"t": [self.arg(a) for a in x]}
    if isinstance(x, Ops): return {"op": x.name}
    if isinstance(x, DType): return _enc_dtype(x)
    if isinstance(x, UOp): return {"u": self.node(x)}
    if isinstance(x, View): return {"v": [self.arg(x.shape), self.arg(x.strides), self.arg(x.offset), self.arg(x.mask)]}
    if isinstance(x, ShapeTracker): return {"st": [self.arg(v) for v in x.views]}
    raise TypeError(f"cannot encode an argument of type {type(x).__name__}: {x!r}")
  def node(self, root: UOp) -> int:
    if (i := self.index.get(root)) is not None: return i
    for u in root.toposort():
      if u in self.index: continue
      arg = u.arg
      if u.op is Ops.BUFFER and self.canonical_buffers:
        # renumber by first appearance: buffer numbers depend on the whole program, not on this graph
        arg = (self.buf_nums.setdefault(arg[0], len(self.buf_nums)), arg[1])
      if arg is u.arg and (enc_arg := u.__dict__.get("_enc_arg")) is not None: pass
      else:
        enc_arg = self.arg(arg)  # may add symbolic nodes first
        # an argument without nodes inside encodes the same in every document: keep it on the (immutable) node
        if arg is u.arg and not _has_uop(arg): u.__dict__["_enc_arg"] = enc_arg
      self.index[u] = len(self.nodes)
      self.nodes.append([u.op.name, _enc_dtype(u.dtype), [self.index[s] for s in u.src], enc_arg])
    return self.index[root]

def canonical_bytes(doc: dict) -> bytes:
  return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode()

def key_of(data: bytes) -> str: return hashlib.sha256(data).hexdigest()

def encode_graph(roots: list[UOp], extra: dict | None = None, encoder: _Encoder | None = None, stats: dict | None = None) -> bytes:
  """Canonical bytes of a document holding `roots` (and `extra`, which may hold {"u": i} refs made by the encoder).
  `stats`, if given, receives the document's node count and op names (summary columns of the store)."""
  enc = encoder or _Encoder()
  root_idx = [enc.node(r) for r in roots]
  doc = {"format": FORMAT, "version": VERSION, "nodes": enc.nodes, "roots": root_idx, **(extra or {})}
  if stats is not None: stats.update(node_count=len(enc.nodes), ops=sorted({n[0] for n in enc.nodes}), buf_nums=dict(enc.buf_nums))
  return canonical_bytes(doc)

def encode_kernel_input(pre: UOp, var_vals: dict[UOp, int], assigns, stats: dict | None = None) -> bytes:
  """(pre-sink, var_vals, assigns) of one full_ast_rewrite call. Only the Variables and assign targets that
  appear in `pre` are kept: the others cannot influence the kernel, and keeping them would make the key depend
  on the rest of the program."""
  enc = _Encoder()
  enc.node(pre)
  present = enc.index
  vv = sorted(([enc.node(v), int(val)] for v, val in var_vals.items() if v in present), key=lambda p: p[0])
  asg = sorted(enc.index[b] for b in assigns if b in present)
  return encode_graph([pre], {"var_vals": vv, "assigns": asg}, enc, stats)

def encode_schedule_input(big_graph: UOp, var_vals: dict[UOp, int], stats: dict | None = None) -> bytes:
  enc = _Encoder()
  enc.node(big_graph)
  vv = sorted(([enc.node(v), int(val)] for v, val in var_vals.items()), key=lambda p: p[0])
  return encode_graph([big_graph], {"var_vals": vv}, enc, stats)

# *** decoding ***

_OPS = {o.name: o for o in Ops}
# decoded views are immutable values: reuse them across documents (a store repeats the same views a lot)
_VIEW_CACHE: dict[tuple, View] = {}
_ST_CACHE: dict[tuple, ShapeTracker] = {}

_DTYPE_DEC: dict[tuple, DType] = {}
def _dec_dtype(x: Any, where: str) -> DType:
  if type(x) is dict and (d := _DTYPE_DEC.get((x.get("dt"), x.get("n"), x.get("ptr")))) is not None and len(x) <= 3: return d
  d = _dec_dtype_slow(x, where)
  _DTYPE_DEC[(x["dt"], x.get("n"), x.get("ptr"))] = d
  return d

def _dec_dtype_slow(x: Any, where: str) -> DType:
  if not isinstance(x, dict) or not isinstance(x.get("dt"), str): raise IncompatibleCapture(f"{where}: malformed dtype {x!r}")
  if set(x) - {"dt", "n", "ptr"}: raise IncompatibleCapture(f"{where}: malformed dtype {x!r}")
  if x["dt"] == "void": d = dtypes.void
  else:
    try: d = dtypes.from_name(x["dt"])
    except KeyError: raise IncompatibleCapture(f"{where}: unknown dtype {x['dt']!r}") from None
  if "n" in x:
    if not isinstance(x["n"], int) or x["n"] < 1: raise IncompatibleCapture(f"{where}: bad vector width {x['n']!r}")
    d = d.vec(x["n"])
  if x.get("ptr"): d = d.ptr()
  return d

class _Decoder:
  def __init__(self, doc: Any):
    if not isinstance(doc, dict): raise IncompatibleCapture("document is not a JSON object")
    if doc.get("format") != FORMAT: raise IncompatibleCapture(f"unknown format {doc.get('format')!r} (expected {FORMAT!r})")
    if doc.get("version") != VERSION:
      raise IncompatibleCapture(f"format version {doc.get('version')!r} is not supported by this code (it reads version {VERSION})")
    if not isinstance(doc.get("nodes"), list): raise IncompatibleCapture("document has no node list")
    self.doc = doc
    self.uops: list[UOp] = []
    for i, n in enumerate(doc["nodes"]): self.uops.append(self._node(i, n))
  def _ref(self, i: Any, where: str) -> UOp:
    if type(i) is not int or not 0 <= i < len(self.uops): raise IncompatibleCapture(f"{where}: reference {i!r} is not an earlier node")
    return self.uops[i]
  def arg(self, x: Any, where: str) -> Any:
    if x is None or type(x) in (bool, int, str): return x
    if isinstance(x, dict) and len(x) == 1:
      (tag, v), = x.items()
      if tag == "f":
        if not isinstance(v, str): raise IncompatibleCapture(f"{where}: malformed float {v!r}")
        try: return float.fromhex(v)
        except (ValueError, OverflowError): raise IncompatibleCapture(f"{where}: malformed float {v!r}") from None
      if tag == "t" and isinstance(v, list): return tuple(self.arg(a, where) for a in v)
      if tag == "op":
        if v not in _OPS: raise IncompatibleCapture(f"{where}: unknown op {v!r} in an argument")
        return _OPS[v]
      if tag == "u": return self._ref(v, where)
      if tag == "v" and isinstance(v, list) and len(v) == 4:
        shape, strides, offset, mask = (self.arg(a, where) for a in v)
        if not (isinstance(shape, tuple) and isinstance(strides, tuple) and len(shape) == len(strides)) or \
            not all(isinstance(s, (int, UOp)) for s in shape + strides + (offset,)) or \
            (mask is not None and not (isinstance(mask, tuple) and len(mask) == len(shape) and
                                       all(isinstance(m, tuple) and len(m) == 2 for m in mask))):
          raise IncompatibleCapture(f"{where}: malformed view {v!r}")
        if all(type(x) is int for x in shape + strides + (offset,)):
          k = (shape, strides, offset, mask)
          if (cv := _VIEW_CACHE.get(k)) is None:
            if len(_VIEW_CACHE) > 65536: _VIEW_CACHE.clear()
            cv = _VIEW_CACHE[k] = View(shape, strides, offset, mask)
          return cv
        return View(shape, strides, offset, mask)
      if tag == "st" and isinstance(v, list):
        views = tuple(self.arg(a, where) for a in v)
        if not views or not all(isinstance(w, View) for w in views): raise IncompatibleCapture(f"{where}: malformed shape tracker")
        if (cst := _ST_CACHE.get(views)) is None:
          if len(_ST_CACHE) > 65536: _ST_CACHE.clear()
          cst = _ST_CACHE[views] = ShapeTracker(views)
        return cst
    if isinstance(x, dict) and "dt" in x: return _dec_dtype(x, where)
    raise IncompatibleCapture(f"{where}: malformed argument {x!r}")
  def _node(self, i: int, n: Any) -> UOp:
    where = f"node {i}"
    if not (isinstance(n, list) and len(n) == 4 and isinstance(n[0], str) and isinstance(n[2], list)):
      raise IncompatibleCapture(f"{where}: malformed node {str(n)[:80]}")
    if n[0] not in _OPS: raise IncompatibleCapture(f"{where}: unknown op {n[0]!r} (this code knows {len(_OPS)} ops)")
    op = _OPS[n[0]]
    dtype = _dec_dtype(n[1], where)
    src = tuple(self._ref(s, where) for s in n[2])
    arg = self.arg(n[3], where)
    if op is Ops.BUFFER and not (isinstance(arg, tuple) and len(arg) == 2 and isinstance(arg[0], int)):
      raise IncompatibleCapture(f"{where}: malformed BUFFER argument {arg!r}")
    if op is Ops.VIEW and not isinstance(arg, ShapeTracker): raise IncompatibleCapture(f"{where}: VIEW without a shape tracker")
    if op is Ops.REDUCE_AXIS and not (isinstance(arg, tuple) and len(arg) == 2 and isinstance(arg[0], Ops) and isinstance(arg[1], tuple)):
      raise IncompatibleCapture(f"{where}: malformed REDUCE_AXIS argument {arg!r}")
    try: return UOp(op, dtype, src, arg)
    except TypeError as e: raise IncompatibleCapture(f"{where}: {e}") from None
  def roots(self) -> list[UOp]:
    r = self.doc.get("roots")
    if not isinstance(r, list) or not r: raise IncompatibleCapture("document has no roots")
    return [self._ref(i, "roots") for i in r]
  def var_vals(self) -> dict[UOp, int]:
    out: dict[UOp, int] = {}
    for p in self.doc.get("var_vals", []):
      if not (isinstance(p, list) and len(p) == 2 and type(p[1]) is int): raise IncompatibleCapture(f"malformed var_vals entry {p!r}")
      v = self._ref(p[0], "var_vals")
      if v.op is not Ops.DEFINE_VAR: raise IncompatibleCapture(f"var_vals entry is a {v.op}, not a DEFINE_VAR")
      out[v] = p[1]
    return out
  def assigns(self) -> dict[UOp, None]:
    out: dict[UOp, None] = {}
    for i in self.doc.get("assigns", []):
      b = self._ref(i, "assigns")
      if b.op is not Ops.BUFFER: raise IncompatibleCapture(f"assigns entry is a {b.op}, not a BUFFER")
      out[b] = None
    return out

def parse(data: bytes) -> _Decoder:
  try: doc = json.loads(data)
  except (ValueError, UnicodeDecodeError) as e: raise IncompatibleCapture(f"not valid JSON: {e}") from None
  try: return _Decoder(doc)
  except RecursionError: raise IncompatibleCapture("document is nested too deeply") from None

def decode_graph(data: bytes) -> list[UOp]: return parse(data).roots()

def decode_kernel_input(data: bytes) -> tuple[UOp, dict[UOp, int], dict[UOp, None]]:
  d = parse(data)
  roots = d.roots()
  if len(roots) != 1 or roots[0].op is not Ops.SINK: raise IncompatibleCapture("a kernel input must have one SINK root")
  return roots[0], d.var_vals(), d.assigns()

def decode_schedule_input(data: bytes) -> tuple[UOp, dict[UOp, int]]:
  d = parse(data)
  roots = d.roots()
  if len(roots) != 1 or roots[0].op is not Ops.SINK: raise IncompatibleCapture("a schedule input must have one SINK root")
  return roots[0], d.var_vals()

def bound_values(root: UOp, var_vals: dict[UOp, int] | None = None) -> dict[str, int]:
  """{name: value} of every Variable a graph uses: bound anywhere inside node arguments (views, an ASSIGN's view),
  or given in var_vals for DEFINE_VAR nodes."""
  out: dict[str, int] = {}
  def visit(x: Any) -> None:
    if isinstance(x, UOp):
      for u in x.toposort():
        if u.op is Ops.BIND: out[u.src[0].arg[0]] = u.src[1].arg
    elif isinstance(x, tuple):
      for a in x: visit(a)
    elif isinstance(x, ShapeTracker):
      for v in x.views: visit(v)
    elif isinstance(x, View):
      if not x._ints or x.mask is not None: visit((x.shape, x.strides, x.offset, x.mask))
  for u in root.toposort():
    if u.op is Ops.DEFINE_VAR and var_vals and u in var_vals: out[u.arg[0]] = var_vals[u]
    elif u.op is Ops.BIND: out[u.src[0].arg[0]] = u.src[1].arg
    elif u.arg is not None and not isinstance(u.arg, (int, str, float, bool)): visit(u.arg)
  return dict(sorted(out.items()))
