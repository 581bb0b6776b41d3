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
runs code (no pickle, no eval). Every node must be one a pass could have made: its sources (how many, of
what op and dtype), dtype and argument are checked against tinysched's op table (tinysched/opspec.py),
so a type-wrong graph is incompatible, never replayed as if it were real.
"""
from __future__ import annotations
import hashlib, json, os, re, reprlib
from dataclasses import fields
from typing import Any
from tinysched.dtype import DType, PtrDType, dtypes, ALL as ALL_DTYPES
from tinysched.ops import Ops
from tinysched.opspec import is_value, problem as op_problem
from tinysched.uop import UOp, make_uop, _SYM_OPS
from tinysched.shape import View, ShapeTracker
from tinysched.codegen.target import Target
from tinysched.schedule import SCHEDULE_FLAGS
from replay.store import upgrade

FORMAT, VERSION = "tinysched-uop", 1

class IncompatibleCapture(ValueError):
  """A stored capture cannot be decoded by this code (unknown version, op, dtype, a malformed node,
  or a document over the size limits below)."""

_DTYPE_ENC: dict[DType, dict] = {}  # dtypes are canonical objects: encode each once
def _enc_dtype(d: DType) -> dict:
  if (out := _DTYPE_ENC.get(d)) is not None: return out
  base = d.base if isinstance(d, PtrDType) else d
  out = {"dt": base.scalar().name}
  if base.count != 1: out["n"] = base.count
  if isinstance(d, PtrDType): out["ptr"] = 1
  return _DTYPE_ENC.setdefault(d, out)

_OP_NAMES = {o: o.name for o in Ops}

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
    index, nodes, dtype_enc = self.index, self.nodes, _DTYPE_ENC
    for u in root.toposort():
      if u in index: continue
      arg = u.arg
      if (op := u.op) is _BUFFER and self.canonical_buffers:
        # renumber by first appearance: buffer numbers depend on the whole program, not on this graph
        arg = (self.buf_nums.setdefault(arg[0], len(self.buf_nums)), arg[1])
      if arg is u.arg and (enc_arg := u.__dict__.get("_enc_arg")) is not None: pass
      else:
        enc_arg = self.arg(arg)  # may add symbolic nodes first
        # an argument without nodes inside encodes the same in every document: keep it on the (immutable) node
        if arg is u.arg and not _has_uop(arg): u.__dict__["_enc_arg"] = enc_arg
      index[u] = len(nodes)
      # (names and dtypes from tables: an Enum's .name is a Python-level property, ~1 us a read)
      nodes.append([_OP_NAMES[op], dtype_enc.get(u.dtype) or _enc_dtype(u.dtype), [index[s] for s in u.src], enc_arg])
    return index[root]

def canonical_bytes(doc: dict) -> bytes:
  return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode()

def key_of(data: bytes) -> str: return hashlib.sha256(data).hexdigest()

# the encoding of no graph at all (a schedule call that made no kernel)
EMPTY_GRAPH = canonical_bytes({"format": FORMAT, "version": VERSION, "nodes": [], "roots": []})

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

def encode_schedule_input(big_graph: UOp, var_vals: dict[UOp, int], stats: dict | None = None, flags: dict | None = None) -> bytes:
  """(big graph, var_vals, scheduler flags) of one schedule_graph call. Flags at their defaults are not written, so a
  capture made with default flags has the same key as one made before flags were recorded."""
  enc = _Encoder()
  enc.node(big_graph)
  vv = sorted(([enc.node(v), int(val)] for v, val in var_vals.items()), key=lambda p: p[0])
  extra: dict = {"var_vals": vv}
  if flags: extra["flags"] = {k: flags[k] for k in sorted(flags)}
  return encode_graph([big_graph], extra, enc, stats)

# *** decoding ***
#
# A stored capture may come from another branch, another version or a crafted file, so decoding checks every
# type, range and reference and raises only IncompatibleCapture. The limits below are far above what real
# captures need (the committed baseline's largest payload is 0.25 MB with 3,081 nodes, 9 levels of nesting and
# 21-character strings); they keep a hostile document from costing unbounded memory or time.
# MAX_PAYLOAD: decompressed bytes of one payload (parsing JSON costs ~15x its size in memory); REPLAY_MAX_PAYLOAD_MB raises it
MAX_PAYLOAD = int(float(os.environ.get("REPLAY_MAX_PAYLOAD_MB", "32")) * 2**20)
MAX_NODES = 500_000         # nodes of one document (~1 KB of memory each, decoded)
MAX_ARG_DEPTH = 32          # nesting of one node argument
MAX_TUPLE = 4096            # elements of one tuple argument
MAX_STR = 4096              # characters of one string argument
MAX_DIMS = 64               # dimensions of a view, views of a shape tracker, reduce axes
MAX_VEC = 64                # lanes of a vector dtype
MAX_DIM = 2**48             # a view's dimension, |stride|; |offset| < 2**62
INT_LO, INT_HI = -2**63, 2**64 - 1  # any integer argument: int64 .. uint64

_OPS = {o.name: o for o in Ops}
# MODEL_FIELD: the model level's record beside its graphs (replay/levels/model.py): plain JSON, no node references, so an
# upgrade carries it through unchanged
MODEL_FIELD = "model"
_DOC_KEYS = frozenset({"format", "version", "nodes", "roots", "var_vals", "assigns", "opts", "target", "flags", MODEL_FIELD})

_REPR = reprlib.Repr()
_REPR.maxstring, _REPR.maxother, _REPR.maxlevel, _REPR.maxlist, _REPR.maxdict = 60, 60, 3, 6, 4
def _brief(x: Any) -> str: return _REPR.repr(x)  # bounded in length and depth, whatever the input

# decoded views are immutable values: reuse them across documents (a store repeats the same views a lot). Keys
# hold only validated plain ints (never bools), so equal keys mean identical views.
_VIEW_CACHE: dict[tuple, View] = {}
_ST_CACHE: dict[tuple, ShapeTracker] = {}

def _shape_tracker(views: tuple[View, ...]) -> ShapeTracker:
  """One ShapeTracker per tuple of decoded views (bounded: cleared past 65536 entries)."""
  if (cst := _ST_CACHE.get(views)) is None:
    if len(_ST_CACHE) > 65536: _ST_CACHE.clear()
    cst = _ST_CACHE[views] = ShapeTracker(views)
  return cst

_DTYPE_NAMES = {d.name: d for d in (dtypes.void, *ALL_DTYPES)}  # canonical names only: the encoder writes no alias
_DTYPE_DEC: dict[tuple, DType] = {}  # keyed by the validated fields, so a result never depends on what came before
def _dec_dtype(x: Any, where: str) -> DType:
  if type(x) is not dict or type(x.get("dt")) is not str or len(x) != 1 + ("n" in x) + ("ptr" in x):
    raise IncompatibleCapture(f"{where}: malformed dtype {_brief(x)}")
  n, ptr = x.get("n"), x.get("ptr")
  if n is not None and not (type(n) is int and 2 <= n <= MAX_VEC): raise IncompatibleCapture(f"{where}: bad vector width {_brief(n)}")
  if ptr is not None and not (type(ptr) is int and ptr == 1): raise IncompatibleCapture(f"{where}: malformed dtype {_brief(x)}")
  k = (x["dt"], n, ptr)
  if (d := _DTYPE_DEC.get(k)) is not None: return d
  if (d := _DTYPE_NAMES.get(x["dt"])) is None: raise IncompatibleCapture(f"{where}: unknown dtype {_brief(x['dt'])}")
  if n is not None:
    if d is dtypes.void: raise IncompatibleCapture(f"{where}: a void dtype has no vector form")
    d = d.vec(n)
  if ptr is not None: d = d.ptr()
  _DTYPE_DEC[k] = d  # bounded: names x widths x ptr
  return d

class _Slow(Exception):
  """The fast decoding path does not handle this node: decode it with the checking path."""

# what the fast path's lookups and conversions raise on input they do not handle (an unknown name, an unhashable key,
# a forward reference, float.fromhex's ValueError and OverflowError, the shared node checks): the node goes to `_node`
_HAND_OVER = (_Slow, KeyError, TypeError, IndexError, ValueError, OverflowError, IncompatibleCapture)

def _fast_dtype(x: Any) -> DType:
  """A dtype decoded before (only `_dec_dtype` fills the table, after its checks). Exact types: JSON true == 1 in a key."""
  if type(x) is dict:
    n, ptr = x.get("n"), x.get("ptr")
    if (n is None or type(n) is int) and (ptr is None or type(ptr) is int) and len(x) == 1 + (n is not None) + (ptr is not None) \
       and (d := _DTYPE_DEC.get((x.get("dt"), n, ptr))) is not None: return d
  raise _Slow

def _fast_view(w: Any) -> View:
  """An int-only view decoded before (only `_Decoder._view` fills the cache, after its checks); anything else: _Slow."""
  if type(w) is dict and len(w) == 1 and type(f := w.get("v")) is list and len(f) == 4:
    sh, sd, off, mk = f
    if type(sh) is dict and type(sd) is dict and type(off) is int and len(sh) == 1 and len(sd) == 1:
      shape, strides = sh.get("t"), sd.get("t")
      if type(shape) is list and type(strides) is list:
        for e in shape:
          if type(e) is not int: raise _Slow
        for e in strides:
          if type(e) is not int: raise _Slow
        if mk is None: mask = None
        elif type(mk) is dict and len(mk) == 1 and type(ml := mk.get("t")) is list:
          ms = []
          for m in ml:
            if not (type(m) is dict and len(m) == 1 and type(be := m.get("t")) is list and len(be) == 2 and type(be[0]) is int
                    and type(be[1]) is int): raise _Slow
            ms.append((be[0], be[1]))
          mask = tuple(ms)
        else: raise _Slow
        k = (tuple(shape), tuple(strides), off, mask)
        if (v := _VIEW_CACHE.get(k)) is not None: return v
        # first seen: made here if it is in range (else the checking path says why), not by decoding the node again
        if _int_view_fits(*k): return _int_view(k)
  raise _Slow

def _int_view_fits(shape: tuple, strides: tuple, offset: int, mask: tuple | None) -> bool:
  """Whether an int-only view passes the range checks of `_Decoder._view` (which says what is wrong when not)."""
  if len(shape) != len(strides) or len(shape) > MAX_DIMS or not -2**62 <= offset <= 2**62: return False
  if shape and not (0 <= min(shape) and max(shape) <= MAX_DIM and -MAX_DIM <= min(strides) and max(strides) <= MAX_DIM): return False
  return mask is None or (len(mask) == len(shape) and all(0 <= b <= e <= s and e <= MAX_DIM for (b, e), s in zip(mask, shape)))

def _int_view(k: tuple) -> View:
  """The View of an int-only (shape, strides, offset, mask) that passed the checks, made once (both decoding paths)."""
  if (cv := _VIEW_CACHE.get(k)) is None:
    if len(_VIEW_CACHE) > 65536: _VIEW_CACHE.clear()
    cv = _VIEW_CACHE[k] = View(*k)
  return cv

class _Decoder:
  def __init__(self, doc: Any):
    if type(doc) is not dict: raise IncompatibleCapture("document is not a JSON object")
    if doc.get("format") != FORMAT: raise IncompatibleCapture(f"unknown format {_brief(doc.get('format'))} (expected {FORMAT!r})")
    if type(doc.get("version")) is not int or doc["version"] != VERSION:  # type first: JSON true == 1 in Python
      raise IncompatibleCapture(f"format version {_brief(doc.get('version'))} is not supported by this code (it reads version {VERSION})")
    if unknown := set(doc) - _DOC_KEYS: raise IncompatibleCapture(f"unknown document field(s) {_brief(sorted(map(str, unknown)))}")
    nodes = doc.get("nodes")
    if type(nodes) is not list: raise IncompatibleCapture("document has no node list")
    if len(nodes) > MAX_NODES: raise IncompatibleCapture(f"document has {len(nodes)} nodes, more than the limit of {MAX_NODES}")
    self.doc = doc
    self.uops: list[UOp] = []
    self.sym_ok: set[UOp] = set()  # nodes checked to be symbolic integer expressions
    fast, uops = self._fast_node, self.uops
    for i, n in enumerate(nodes): uops.append(fast(i, n))
    if "opts" in doc: _check_opts(doc["opts"])
    if "target" in doc: _check_target(doc["target"])
    # checked here, whichever decoder asks: a document is valid or not as a whole
    self._var_vals, self._assigns = self._read_var_vals(), self._read_assigns()

  def _ref(self, i: Any, where: str) -> UOp:
    # only earlier nodes: this also makes every decoded graph acyclic
    if type(i) is not int or not 0 <= i < len(self.uops): raise IncompatibleCapture(f"{where}: reference {_brief(i)} is not an earlier node")
    return self.uops[i]
  def _refs(self, xs: Any, where: str) -> list[UOp]:
    if type(xs) is not list: raise IncompatibleCapture(f"{where}: expected a list of node references, got {_brief(xs)}")
    return [self._ref(i, where) for i in xs]

  def arg(self, x: Any, where: str, depth: int = 0) -> Any:
    if depth > MAX_ARG_DEPTH: raise IncompatibleCapture(f"{where}: argument nested deeper than {MAX_ARG_DEPTH}")
    t = type(x)
    if x is None or t is bool: return x
    if t is int:
      if not INT_LO <= x <= INT_HI: raise IncompatibleCapture(f"{where}: integer {_brief(x)} out of range")
      return x
    if t is str:
      if len(x) > MAX_STR: raise IncompatibleCapture(f"{where}: string argument of {len(x)} characters (limit {MAX_STR})")
      return x
    if t is dict and len(x) == 1:
      (tag, v), = x.items()
      if tag == "f":
        if type(v) is not str or len(v) > 64: raise IncompatibleCapture(f"{where}: malformed float {_brief(v)}")
        try: return float.fromhex(v)
        except (ValueError, OverflowError): raise IncompatibleCapture(f"{where}: malformed float {_brief(v)}") from None
      if tag == "t" and type(v) is list:
        if len(v) > MAX_TUPLE: raise IncompatibleCapture(f"{where}: tuple argument of {len(v)} elements (limit {MAX_TUPLE})")
        return tuple(self.arg(a, where, depth + 1) for a in v)
      if tag == "op":
        if type(v) is not str or v not in _OPS: raise IncompatibleCapture(f"{where}: unknown op {_brief(v)} in an argument")
        return _OPS[v]
      if tag == "u": return self._ref(v, where)
      if tag == "v": return self._view(v, where, depth)
      if tag == "st" and type(v) is list:
        if not 1 <= len(v) <= MAX_DIMS: raise IncompatibleCapture(f"{where}: a shape tracker needs 1 to {MAX_DIMS} views, got {len(v)}")
        views = tuple(self.arg(a, where, depth + 1) for a in v)
        if not all(type(w) is View for w in views): raise IncompatibleCapture(f"{where}: malformed shape tracker")
        return _shape_tracker(views)
    if t is dict and "dt" in x: return _dec_dtype(x, where)
    raise IncompatibleCapture(f"{where}: malformed argument {_brief(x)}")

  def _view(self, v: Any, where: str, depth: int) -> View:
    if type(v) is not list or len(v) != 4: raise IncompatibleCapture(f"{where}: malformed view {_brief(v)}")
    shape, strides, offset, mask = (self.arg(a, where, depth + 1) for a in v)
    if type(shape) is not tuple or type(strides) is not tuple or len(shape) != len(strides) or len(shape) > MAX_DIMS:
      raise IncompatibleCapture(f"{where}: malformed view {_brief(v)}")
    for s in shape: self._sint(s, 0, MAX_DIM, where, "dimension")
    for s in strides: self._sint(s, -MAX_DIM, MAX_DIM, where, "stride")
    self._sint(offset, -2**62, 2**62, where, "offset")
    if mask is not None:
      if type(mask) is not tuple or len(mask) != len(shape) or not all(type(m) is tuple and len(m) == 2 for m in mask):
        raise IncompatibleCapture(f"{where}: malformed view mask {_brief(mask)}")
      for (b, e), s in zip(mask, shape):
        self._sint(b, 0, MAX_DIM, where, "mask bound")
        self._sint(e, 0, MAX_DIM, where, "mask bound")
        if type(b) is int and type(e) is int and (b > e or (type(s) is int and e > s)):
          raise IncompatibleCapture(f"{where}: view mask {_brief(mask)} does not fit shape {_brief(shape)}")
    if all(type(a) is int for a in shape + strides + (offset,)) and (mask is None or all(type(a) is int for m in mask for a in m)):
      return _int_view((shape, strides, offset, mask))
    return View(shape, strides, offset, mask)

  def _sint(self, x: Any, lo: int, hi: int, where: str, what: str) -> None:
    """A view field: a plain int in [lo, hi], or a symbolic integer expression."""
    if type(x) is int:
      if not lo <= x <= hi: raise IncompatibleCapture(f"{where}: view {what} {x} out of range [{lo}, {hi}]")
      return
    if not isinstance(x, UOp): raise IncompatibleCapture(f"{where}: view {what} {_brief(x)} is not an integer")
    if x in self.sym_ok: return
    if not (dtypes.is_int(x.dtype) and is_value(x.dtype)): raise IncompatibleCapture(f"{where}: view {what} refers to a {x.dtype} node")
    for u in x.toposort():  # printing and index code walk these: only symbolic-integer ops may be inside
      if u in self.sym_ok: continue
      if u.op not in _SYM_OPS or not is_value(u.dtype) or not (dtypes.is_int(u.dtype) or u.dtype is dtypes.bool):
        raise IncompatibleCapture(f"{where}: view {what} contains a {u.op.name} {u.dtype} node, not a symbolic integer")
      self.sym_ok.add(u)

  def _node(self, i: int, n: Any) -> UOp:
    where = f"node {i}"
    if not (type(n) is list and len(n) == 4 and type(n[0]) is str and type(n[2]) is list):
      raise IncompatibleCapture(f"{where}: malformed node {_brief(n)}")
    if (op := _OPS.get(n[0])) is None: raise IncompatibleCapture(f"{where}: unknown op {_brief(n[0])} (this code knows {len(_OPS)} ops)")
    dtype = _dec_dtype(n[1], where)
    src = tuple([self._ref(r, f"{where}: {op.name} source {k}") for k, r in enumerate(n[2])])  # (which source of which op)
    arg = self.arg(n[3], where)
    _check_node(op, dtype, src, arg, where)
    try: return UOp(op, dtype, src, arg)
    except (TypeError, ValueError) as e: raise IncompatibleCapture(f"{where}: {e}") from None

  # The fast path: the shapes real captures have (plain args, int-only views, cached dtypes) decoded with less per-node
  # Python. It never decides that a node is bad: at the first doubt it hands the whole node to `_node` (which checks
  # everything and says why), so it can only accept what `_node` accepts and builds the same UOp. The node checks
  # themselves (_check_node) are shared, not copied.
  def _fast_node(self, i: int, n: Any) -> UOp:
    try:
      name, dt, srcs, a = n  # (a ValueError or TypeError for anything but 4 things)
      if type(n) is not list or type(srcs) is not list: raise _Slow
      op = _OPS[name]  # a KeyError, or a TypeError for an unhashable name: the slow path says which
      # (most nodes: a plain dtype {"dt": name} decoded before, looked up here without a call)
      if type(dt) is not dict or len(dt) != 1 or (dtype := _DTYPE_DEC.get((dt.get("dt"), None, None))) is None: dtype = _fast_dtype(dt)
      uops = self.uops
      for s in srcs:
        if type(s) is not int or s < 0: raise _Slow  # (bools too: a reference is a plain int)
      src = tuple([uops[s] for s in srcs])  # an IndexError for a reference to a later node
      arg = a if a is None else self._fast_arg(a, 0)
      _check_node(op, dtype, src, arg, "")
      return make_uop(op, dtype, src, arg)  # (UOp(...) itself, without the class call's slower path)
    except _HAND_OVER: return self._node(i, n)

  def _fast_arg(self, x: Any, depth: int) -> Any:
    t = type(x)
    if t is int:
      if INT_LO <= x <= INT_HI: return x
      raise _Slow
    if x is None or t is bool: return x
    if t is str:
      if len(x) <= MAX_STR: return x
      raise _Slow
    if t is not dict or depth >= 8: raise _Slow  # deeper nesting is rare: `arg` counts it against MAX_ARG_DEPTH
    if len(x) == 1:
      (tag, v), = x.items()
      if tag == "t" and type(v) is list and len(v) <= MAX_TUPLE:
        # (plain ints, most elements, taken here: a call per element was a third of the time of decoding an argument)
        return tuple([e if type(e) is int and INT_LO <= e <= INT_HI else self._fast_arg(e, depth + 1) for e in v])
      if tag == "st" and type(v) is list and 1 <= len(v) <= MAX_DIMS:
        views = tuple([_fast_view(w) for w in v])
        return _shape_tracker(views)
      if tag == "op" and type(v) is str: return _OPS[v]
      if tag == "f" and type(v) is str and len(v) <= 64: return float.fromhex(v)
      if tag != "dt": raise _Slow  # node references ("u") and views outside a shape tracker
    return _fast_dtype(x)

  def roots(self) -> list[UOp]:
    r = self.doc.get("roots")
    if type(r) is not list or not r: raise IncompatibleCapture("document has no roots")
    return self._refs(r, "roots")
  def var_vals(self) -> dict[UOp, int]: return dict(self._var_vals)
  def assigns(self) -> dict[UOp, None]: return dict(self._assigns)
  def _read_var_vals(self) -> dict[UOp, int]:
    vv = self.doc.get("var_vals", [])
    if type(vv) is not list: raise IncompatibleCapture(f"var_vals is not a list: {_brief(vv)}")
    out: dict[UOp, int] = {}
    for p in vv:
      if not (type(p) is list and len(p) == 2 and type(p[1]) is int): raise IncompatibleCapture(f"malformed var_vals entry {_brief(p)}")
      v = self._ref(p[0], "var_vals")
      if v.op is not Ops.DEFINE_VAR: raise IncompatibleCapture(f"var_vals entry is a {v.op.name}, not a DEFINE_VAR")
      name, lo, hi = v.arg
      if not lo <= p[1] <= hi: raise IncompatibleCapture(f"var_vals: {name}={p[1]} is outside its range [{lo}, {hi}]")
      if v in out: raise IncompatibleCapture(f"var_vals: {name} appears twice")
      out[v] = p[1]
    return out
  def _read_assigns(self) -> dict[UOp, None]:
    out: dict[UOp, None] = {}
    for b in self._refs(self.doc.get("assigns", []), "assigns"):
      if b.op is not Ops.BUFFER: raise IncompatibleCapture(f"assigns entry is a {b.op.name}, not a BUFFER")
      out[b] = None
    return out

def _bad(where: str, op: Ops, why: str) -> IncompatibleCapture: return IncompatibleCapture(f"{where}: {op.name} {why}")

# the ops whose arguments the decoder's size limits bound, read once (an `Ops.X` read costs ~70 ns on Python 3.11)
_BUFFER, _DEFINE_GLOBAL, _REDUCE_AXIS = Ops.BUFFER, Ops.DEFINE_GLOBAL, Ops.REDUCE_AXIS
_LIMITED = frozenset((_BUFFER, _DEFINE_GLOBAL, _REDUCE_AXIS))

def _check_node(op: Ops, dtype: DType, src: tuple[UOp, ...], arg: Any, where: str) -> None:
  """A node no pass makes cannot be replayed: its sources, dtype and argument must be what tinysched's op table says
  (tinysched/opspec.py, the one home of those rules), and its sizes within the decoder's limits."""
  if (why := op_problem(op, dtype, src, arg)) is not None: raise _bad(where, op, why)
  if op not in _LIMITED: return
  if op is _BUFFER:
    if arg[1][1] > MAX_DIM: raise _bad(where, op, f"of {arg[1][1]} elements is over the limit of {MAX_DIM}")
  elif op is _DEFINE_GLOBAL:
    if arg >= 2**31: raise _bad(where, op, f"number {arg} is over the limit of {2**31 - 1}")
  # axes within MAX_DIMS; whether they fit the source's shape is the scheduler's business (its own tests build such graphs)
  elif len(arg[1]) > MAX_DIMS or any(a >= MAX_DIMS for a in arg[1]): raise _bad(where, op, f"needs axes in [0, {MAX_DIMS}), got {_brief(arg)}")

def _check_opts(opts: Any) -> None:
  if type(opts) is not list or len(opts) > 256: raise IncompatibleCapture(f"malformed optimization choices {_brief(opts)}")
  for o in opts:
    if not (type(o) is list and len(o) == 3 and type(o[0]) is str and len(o[0]) <= 32 and type(o[1]) is int and 0 <= o[1] < MAX_DIMS
            and type(o[2]) is int and 0 <= o[2] <= 2**16):
      raise IncompatibleCapture(f"malformed optimization choice {_brief(o)}")

def _check_target(t: Any) -> None:
  if type(t) is not dict or len(t) > 64: raise IncompatibleCapture(f"malformed target {_brief(t)}")
  kinds = {f.name: type(f.default) for f in fields(Target)}  # each field as the type of its default
  for k, v in t.items():
    kind = kinds.get(k)  # unknown fields are refused by Target.from_dict, with their names
    if kind is None: continue
    if kind is tuple: ok = type(v) is list and len(v) <= 16 and all(type(x) is int and 0 <= x < 2**31 for x in v)
    elif kind is int: ok = type(v) is int and 0 <= v < 2**63
    elif kind is str: ok = type(v) is str and len(v) <= MAX_STR
    else: ok = type(v) is kind
    if not ok: raise IncompatibleCapture(f"target field {k!r} has a malformed value {_brief(v)}")

def parse(data: bytes) -> _Decoder:
  if not isinstance(data, (bytes, bytearray)): raise IncompatibleCapture(f"payload is a {type(data).__name__}, not bytes")
  if len(data) > MAX_PAYLOAD: raise IncompatibleCapture(f"payload of {len(data)} bytes is over the limit of {MAX_PAYLOAD} (REPLAY_MAX_PAYLOAD_MB)")
  try: doc = json.loads(data)
  except RecursionError: raise IncompatibleCapture("not valid JSON: nested too deeply") from None
  except (ValueError, UnicodeDecodeError) as e: raise IncompatibleCapture(f"not valid JSON: {_brief(str(e))}") from None
  if type(doc) is dict and doc.get("format") == FORMAT and type(doc.get("version")) is int and doc["version"] < VERSION:
    # written before an IR refactor: carried to today's form by the registered steps (replay/store/upgrade.py)
    try: doc = upgrade.upgrade(doc, VERSION)
    except upgrade.UpgradeError as e: raise IncompatibleCapture(str(e)) from None
  try: return _Decoder(doc)
  except RecursionError: raise IncompatibleCapture("document is nested too deeply") from None

def decode_graph(data: bytes) -> list[UOp]: return parse(data).roots()

def todays_bytes(data: bytes) -> bytes | None:
  """Any stored graph document (an input with its extras, or an output) written by an older version, in today's form:
  an output as the current encoder writes it (in_todays_form), an input as the upgraded document in canonical form.
  None when it is of this version or not a graph document; IncompatibleCapture when no chain of steps carries it."""
  if (m := _VERSION_FIELD.search(data)) is None or int(m.group(1)) >= VERSION: return None  # (a scan, not a parse: most are current)
  if (out := in_todays_form(data)) is not None: return out
  try: doc = json.loads(data)
  except (ValueError, UnicodeDecodeError): return None
  if type(doc) is not dict or doc.get("format") != FORMAT or type(doc.get("version")) is not int or doc["version"] >= VERSION: return None
  try: new = canonical_bytes(upgrade.upgrade(doc, VERSION))
  except upgrade.UpgradeError as e: raise IncompatibleCapture(str(e)) from None
  parse(new)  # today's decoder must take it
  return new

_VERSION_FIELD = re.compile(rb'"version":(\d{1,9})[,}]')

def in_todays_form(data: bytes) -> bytes | None:
  """A stored graph (an output: roots only) written by an older version, as this code would encode it: the same bytes
  the current encoder writes for the same graph, so an output that the refactor did not change compares equal by key.
  None when it is of this version (compare as stored), not a graph document, or cannot be read."""
  try:
    doc = json.loads(data)
    if type(doc) is not dict or doc.get("format") != FORMAT or type(doc.get("version")) is not int or doc["version"] >= VERSION: return None
    if set(doc) - {"format", "version", "nodes", "roots", MODEL_FIELD}: return None  # an input: its extras are the level's business
    return encode_graph(parse(data).roots(), {MODEL_FIELD: doc[MODEL_FIELD]} if MODEL_FIELD in doc else None)
  except (ValueError, IncompatibleCapture, RecursionError): return None

def decode_kernel_input(data: bytes) -> tuple[UOp, dict[UOp, int], dict[UOp, None]]:
  d = parse(data)
  roots = d.roots()
  if len(roots) != 1 or roots[0].op is not Ops.SINK: raise IncompatibleCapture("a kernel input must have one SINK root")
  # a pre-sink: the STOREs of one kernel (schedule.py cuts them from the big graph); full_ast_rewrite reads each as one
  if bad := [s.op.name for s in roots[0].src if s.op is not Ops.STORE] or ([] if roots[0].src else ["nothing"]):
    raise IncompatibleCapture(f"a kernel input is a SINK of STOREs, not of {bad[0]}")
  return roots[0], d.var_vals(), d.assigns()

def decode_schedule_input(data: bytes) -> tuple[UOp, dict[UOp, int], dict[str, int]]:
  """(big graph, var_vals, scheduler flags): the arguments of schedule_graph."""
  d = parse(data)
  roots = d.roots()
  if len(roots) != 1 or roots[0].op is not Ops.SINK: raise IncompatibleCapture("a schedule input must have one SINK root")
  # the big graph's outputs: a VIEW(BUFFER, op) each (scheduling/bigraph.py)
  if bad := [s.op.name for s in roots[0].src if s.op is not Ops.VIEW]:
    raise IncompatibleCapture(f"a schedule input is a SINK of VIEWs, not of {bad[0]}")
  return roots[0], d.var_vals(), _schedule_flags(d.doc.get("flags", {}))

def _schedule_flags(flags: Any) -> dict[str, int]:
  if type(flags) is not dict: raise IncompatibleCapture(f"flags is not an object: {_brief(flags)}")
  for k, v in flags.items():
    if k not in SCHEDULE_FLAGS: raise IncompatibleCapture(f"unknown scheduler flag {_brief(k)} (known: {', '.join(SCHEDULE_FLAGS)})")
    if type(v) is not int or not 0 <= v <= 2**31: raise IncompatibleCapture(f"scheduler flag {k}={_brief(v)} is not a small non-negative integer")
  return dict(flags)

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
