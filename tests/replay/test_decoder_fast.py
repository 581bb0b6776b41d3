"""The decoder's fast path (replay/store/encode.py `_Decoder._fast_node`) against its checking path (`_Decoder._node`): on
any bytes both give the same result (the same interned UOps, or IncompatibleCapture with the same message), real
captures take the fast path, and decode(encode(g)) is g for random graphs. The plants at the end show the comparison
going red for the bugs a fast path is prone to (a looser type check, an exception it does not hand over)."""
import glob, json, math
from contextlib import contextmanager
from pathlib import Path
from unittest import mock
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
import replay.store.encode as E
from replay.store.encode import IncompatibleCapture, decode_graph, decode_kernel_input, decode_schedule_input, encode_graph
from replay.store.sqlite import Store
from tinysched.dtype import dtypes
from tinysched.ops import Ops
from tinysched.shape import ShapeTracker, View
from tinysched.uop import UOp, Variable
from tests.replay.test_decoder_fuzz import CASES, FIXED, mutated

ROOT = Path(__file__).resolve().parents[2]
DECODERS = (decode_graph, decode_kernel_input, decode_schedule_input)

@contextmanager
def checking_only():
  """Every node through the checking path: the reference the fast path must match."""
  with mock.patch.object(E._Decoder, "_fast_node", lambda self, i, n: self._node(i, n)): yield

def _outcome(decode, data: bytes):
  try: out = decode(data)
  except IncompatibleCapture as e: return ("incompatible", str(e))
  return ("ok", out)

def _same(a, b) -> bool:
  # UOps are interned: the same graph is the same object; dicts compare key by key, in order
  if isinstance(a, UOp) or isinstance(b, UOp): return a is b
  if isinstance(a, dict) and isinstance(b, dict):
    return len(a) == len(b) and all(_same(ka, kb) and _same(va, vb) for (ka, va), (kb, vb) in zip(a.items(), b.items()))
  if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
    return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
  return type(a) is type(b) and a == b

def assert_agree(data: bytes) -> None:
  """Fast and checking paths: the same outcome for every decoder, whatever the caches hold (twice: the first decode
  fills them)."""
  for decode in DECODERS:
    for _ in range(2):
      fast = _outcome(decode, data)
      with checking_only(): slow = _outcome(decode, data)
      assert fast[0] == slow[0], f"{decode.__name__}: fast {fast!r} vs checking {slow!r}"
      assert _same(fast[1], slow[1]), f"{decode.__name__}: fast {fast!r} vs checking {slow!r}"

# *** real and hostile documents ***

def _store_payloads(limit_per_store: int = 3) -> list[bytes]:
  out = []
  for p in sorted(glob.glob(str(ROOT / "captures" / "*.db"))):
    s = Store(p, readonly=True)
    try:
      for level in ("schedule", "kernel"):
        for r in list(s.captures(level=level))[:limit_per_store]: out.append(s.blob(r["input_key"]))
    finally: s.close()
  return out

def test_committed_captures_agree_and_take_the_fast_path():
  payloads = _store_payloads()
  assert payloads
  for data in payloads: assert_agree(data)
  # once the caches are warm, only symbolic views (node references inside the argument) need the checking path
  slow = []
  orig = E._Decoder._node
  with mock.patch.object(E._Decoder, "_node", lambda self, i, n: slow.append(n) or orig(self, i, n)):
    for data in payloads: E.parse(data)
  assert [n for n in slow if '{"u":' not in json.dumps(n[3])] == []
  assert len(slow) < 10

@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_corpus_agrees(path):
  assert_agree(path.read_bytes())

@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), **FIXED)
@given(mutated())
def test_mutated_documents_agree(data):
  assert_agree(data)

def _doc(nodes, roots=None) -> bytes:
  return json.dumps({"format": "tinysched-uop", "version": 1, "nodes": nodes, "roots": roots or [len(nodes) - 1]}).encode()

_BUF = ["BUFFER", {"dt": "float", "ptr": 1}, [], {"t": [0, {"t": ["CPU", 12, {"dt": "float"}]}]}]
_VIEW_ARG = {"st": [{"v": [{"t": [3, 1, 4]}, {"t": [4, 0, 1]}, 0, None]}]}
_MASKED = {"st": [{"v": [{"t": [3, 1, 4]}, {"t": [4, 0, 1]}, 0, {"t": [{"t": [0, 2]}, {"t": [0, 1]}, {"t": [1, 4]}]}]}]}

# near misses of what the fast path accepts: values JSON can spell that compare equal in Python (true == 1 == 1.0),
# negative and forward references, out-of-range numbers. Each is decoded once in its valid form first, so the caches
# hold the value it is equal to.
NEAR_MISSES = {
  "valid": [_BUF, ["VIEW", {"dt": "float"}, [0], _VIEW_ARG]],
  "valid_masked": [_BUF, ["VIEW", {"dt": "float"}, [0], _MASKED]],
  "ptr_true": [["BUFFER", {"dt": "float", "ptr": True}, [], _BUF[3]]],
  "ptr_float": [["BUFFER", {"dt": "float", "ptr": 1.0}, [], _BUF[3]]],
  "vec_float": [["CONST", {"dt": "float", "n": 4.0}, [], {"f": "0x1p+0"}]],
  "dtype_null_width": [["CONST", {"dt": "float", "n": None}, [], {"f": "0x1p+0"}]],
  "dtype_name_list": [["CONST", {"dt": ["float"]}, [], 1]],
  "op_name_list": [[["CONST"], {"dt": "float"}, [], 1]],
  "src_true": [_BUF, ["VIEW", {"dt": "float"}, [True], _VIEW_ARG]],
  "src_negative": [_BUF, ["VIEW", {"dt": "float"}, [-1], _VIEW_ARG]],
  "src_forward": [_BUF, ["VIEW", {"dt": "float"}, [5], _VIEW_ARG]],
  "src_self": [["NEG", {"dt": "float"}, [0], None]],
  "view_shape_true": [_BUF, ["VIEW", {"dt": "float"}, [0], {"st": [{"v": [{"t": [3, True, 4]}, {"t": [4, 0, 1]}, 0, None]}]}]],
  "view_stride_float": [_BUF, ["VIEW", {"dt": "float"}, [0], {"st": [{"v": [{"t": [3, 1, 4]}, {"t": [4.0, 0, 1]}, 0, None]}]}]],
  "view_offset_false": [_BUF, ["VIEW", {"dt": "float"}, [0], {"st": [{"v": [{"t": [3, 1, 4]}, {"t": [4, False, 1]}, False, None]}]}]],
  "mask_true": [_BUF, ["VIEW", {"dt": "float"}, [0],
                       {"st": [{"v": [{"t": [3, 1, 4]}, {"t": [4, 0, 1]}, 0, {"t": [{"t": [False, 2]}, {"t": [0, True]}, {"t": [True, 4]}]}]}]}]],
  "mask_past_shape": [_BUF, ["VIEW", {"dt": "float"}, [0],
                             {"st": [{"v": [{"t": [3, 1, 4]}, {"t": [4, 0, 1]}, 0, {"t": [{"t": [0, 2]}, {"t": [0, 1]}, {"t": [1, 5]}]}]}]}]],
  # int-only views out of range, never seen before: the fast path makes first-seen views itself (_int_view_fits)
  "view_dim_too_big": [_BUF, ["VIEW", {"dt": "float"}, [0], {"st": [{"v": [{"t": [3, E.MAX_DIM + 1]}, {"t": [1, 0]}, 0, None]}]}]],
  "view_dim_negative": [_BUF, ["VIEW", {"dt": "float"}, [0], {"st": [{"v": [{"t": [3, -2]}, {"t": [1, 0]}, 0, None]}]}]],
  "view_stride_too_big": [_BUF, ["VIEW", {"dt": "float"}, [0], {"st": [{"v": [{"t": [3, 2]}, {"t": [-E.MAX_DIM - 1, 0]}, 0, None]}]}]],
  "view_offset_too_big": [_BUF, ["VIEW", {"dt": "float"}, [0], {"st": [{"v": [{"t": [3, 2]}, {"t": [2, 1]}, 2**62 + 1, None]}]}]],
  "view_ranks_differ": [_BUF, ["VIEW", {"dt": "float"}, [0], {"st": [{"v": [{"t": [3, 2]}, {"t": [2, 1, 1]}, 0, None]}]}]],
  "view_too_many_dims": [_BUF, ["VIEW", {"dt": "float"}, [0],
                                {"st": [{"v": [{"t": [1] * (E.MAX_DIMS + 1)}, {"t": [0] * (E.MAX_DIMS + 1)}, 0, None]}]}]],
  "mask_reversed": [_BUF, ["VIEW", {"dt": "float"}, [0],
                           {"st": [{"v": [{"t": [3, 2]}, {"t": [2, 1]}, 0, {"t": [{"t": [2, 1]}, {"t": [0, 2]}]}]}]}]],
  "mask_negative": [_BUF, ["VIEW", {"dt": "float"}, [0],
                           {"st": [{"v": [{"t": [3, 2]}, {"t": [2, 1]}, 0, {"t": [{"t": [-1, 1]}, {"t": [0, 2]}]}]}]}]],
  "mask_rank_differs": [_BUF, ["VIEW", {"dt": "float"}, [0], {"st": [{"v": [{"t": [3, 2]}, {"t": [2, 1]}, 0, {"t": [{"t": [0, 1]}]}]}]}]],
  "view_extra_field": [_BUF, ["VIEW", {"dt": "float"}, [0], {"st": [{"v": [{"t": [3, 1, 4]}, {"t": [4, 0, 1]}, 0, None], "x": 1}]}]],
  "no_views": [_BUF, ["VIEW", {"dt": "float"}, [0], {"st": []}]],
  "buffer_number_true": [["BUFFER", {"dt": "float", "ptr": 1}, [], {"t": [True, {"t": ["CPU", 12, {"dt": "float"}]}]}]],
  "int_too_big": [["CONST", {"dt": "int"}, [], 2**64]],
  "string_too_long": [["CONST", {"dt": "int"}, [], "x" * (E.MAX_STR + 1)]],
  "float_overflow": [["CONST", {"dt": "float"}, [], {"f": "0x1p+99999"}]],
  "float_garbage": [["CONST", {"dt": "float"}, [], {"f": "zz"}]],
  "float_long": [["CONST", {"dt": "float"}, [], {"f": "0x1p+0" + " " * 64}]],
  "alu_with_arg": [["CONST", {"dt": "float"}, [], {"f": "0x1p+0"}], ["NEG", {"dt": "float"}, [0], 1]],
  "alu_arity": [["CONST", {"dt": "float"}, [], {"f": "0x1p+0"}], ["ADD", {"dt": "float"}, [0], None]],
  "unknown_op_in_arg": [["CONST", {"dt": "float"}, [], {"f": "0x1p+0"}], ["REDUCE_AXIS", {"dt": "float"}, [0], {"t": [{"op": "FOO"}, {"t": [0]}]}]],
  "deep_tuple": [["SINK", {"dt": "void"}, [], {"t": [{"t": [{"t": [{"t": [{"t": [{"t": [{"t": [{"t": [{"t": [{"t": [1]}]}]}]}]}]}]}]}]}]}]],
  "too_deep_tuple": [["SINK", {"dt": "void"}, [], json.loads('{"t":[' * (E.MAX_ARG_DEPTH + 2) + "1" + "]}" * (E.MAX_ARG_DEPTH + 2))]],
}

@pytest.mark.parametrize("name", sorted(NEAR_MISSES))
def test_near_misses_agree(name):
  assert_agree(_doc(NEAR_MISSES["valid"]))  # the caches hold the valid dtypes and views
  assert_agree(_doc(NEAR_MISSES["valid_masked"]))
  assert_agree(_doc(NEAR_MISSES[name]))

def test_near_misses_are_refused_with_a_reason():
  for name, nodes in NEAR_MISSES.items():
    if name.startswith("valid") or name in ("dtype_null_width", "deep_tuple"): continue  # (decodable)
    with pytest.raises(IncompatibleCapture) as e: decode_graph(_doc(nodes))
    assert str(e.value), name

# *** property: decode(encode(g)) is g ***

_DT = [dtypes.float32, dtypes.int32, dtypes.bool, dtypes.float16]
_floats = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([-0.0, 0.0, math.inf, -math.inf]))

_args = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**64 - 1), _floats, st.text(max_size=8),
                                st.sampled_from([Ops.ADD, Ops.MAX, dtypes.float32, dtypes.int32.ptr(), dtypes.float32.vec(4)])),
                      lambda kids: st.lists(kids, max_size=6).map(tuple), max_leaves=30)

@st.composite
def _view(draw, sym: UOp | None):
  ndim = draw(st.integers(0, 4))
  shape = [draw(st.integers(1, 6)) for _ in range(ndim)]
  if sym is not None and ndim and draw(st.booleans()): shape[draw(st.integers(0, ndim - 1))] = sym
  strides = tuple(draw(st.integers(-8, 8)) for _ in range(ndim))
  mask = None
  if ndim and draw(st.booleans()) and all(type(s) is int for s in shape):
    mask = tuple((b := draw(st.integers(0, s)), draw(st.integers(b, s))) for s in shape)
  return View(tuple(shape), strides, draw(st.integers(-5, 20)), mask)

def _const(draw, dt):
  v = draw(_floats) if dt in (dtypes.float32, dtypes.float16) else draw(st.booleans()) if dt is dtypes.bool else draw(st.integers(-2**31, 2**31))
  return UOp(Ops.CONST, dt, (), v)

@st.composite
def graphs(draw) -> UOp:
  """Random graphs that pass tinysched's op table (tinysched/opspec.py), as every decoded graph must: each node of a
  form some pass makes, of one value dtype (comparisons make bools)."""
  sym = Variable("n", 1, 8) if draw(st.booleans()) else None
  dt = draw(st.sampled_from(_DT))
  def st_of() -> ShapeTracker: return ShapeTracker(tuple(draw(_view(sym)) for _ in range(draw(st.integers(1, 2)))))
  nodes: list[UOp] = []
  for _ in range(draw(st.integers(1, 12))):
    kind = draw(st.sampled_from(["const", "buffer", "load", "view", "alu", "where", "reduce"]))
    if kind == "const" or not nodes: nodes.append(_const(draw, dt))
    elif kind in ("buffer", "load"):
      b = UOp(Ops.BUFFER, dt.ptr(), (), (draw(st.integers(0, 50)), ("CPU", draw(st.integers(1, 4096)), dt)))
      # a buffer that holds data (big graph), or a LOAD of it through an index (kernel)
      nodes.append(UOp(Ops.VIEW, dt, (b,), st_of()) if kind == "buffer" else UOp(Ops.LOAD, dt, (b, UOp(Ops.VIEW, dtypes.void, (), st_of()))))
    elif kind == "view": nodes.append(UOp(Ops.VIEW, dt, (draw(st.sampled_from(nodes)),), st_of()))
    elif kind == "alu":
      a, b = draw(st.sampled_from(nodes)), draw(st.sampled_from(nodes))
      op = draw(st.sampled_from([Ops.ADD, Ops.MUL, Ops.MAX, Ops.NEG, Ops.SQRT]))
      nodes.append(UOp(op, dt, (a, b) if op in (Ops.ADD, Ops.MUL, Ops.MAX) else (a,)))
    elif kind == "where":
      a, b = draw(st.sampled_from(nodes)), draw(st.sampled_from(nodes))
      gate = UOp(Ops.VALID, dtypes.bool, (UOp(Ops.VIEW, dtypes.void, (), st_of()),)) if draw(st.booleans()) else UOp(Ops.CMPLT, dtypes.bool, (a, b))
      nodes.append(UOp(Ops.WHERE, dt, (gate, a, b)))
    else:
      axes = tuple(sorted(set(draw(st.lists(st.integers(0, 7), max_size=6)))))
      nodes.append(UOp(Ops.REDUCE_AXIS, dt, (draw(st.sampled_from(nodes)),), (draw(st.sampled_from([Ops.ADD, Ops.MAX])), axes)))
  return UOp.sink_of(*nodes[-3:])

# node arguments of every scalar kind, nested, through the argument codec alone (no op takes an arbitrary argument)
@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), **FIXED)
@given(_args)
def test_arguments_round_trip(a):
  enc = E._Encoder(canonical_buffers=False).arg(a)
  dec = E._Decoder({"format": E.FORMAT, "version": E.VERSION, "nodes": []})
  for back in (dec.arg(json.loads(json.dumps(enc)), ""), dec._fast_arg(json.loads(json.dumps(enc)), 0)):
    assert E._Encoder(canonical_buffers=False).arg(back) == enc

@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), **FIXED)
@given(graphs())
def test_decode_of_encode_is_the_graph(g):
  data = E.canonical_bytes(_doc_of(g))
  for _ in range(2):  # cold (the checking path fills the caches), then warm (the fast path answers)
    assert decode_graph(data)[0] is g
  with checking_only(): assert decode_graph(data)[0] is g

def _doc_of(g: UOp) -> dict:
  # the encoder without buffer renumbering, so the decoded graph is `g` itself (renumbered, it is an equal graph with
  # other BUFFER numbers: decode_graph(encode_graph([g])) is checked against that below)
  enc = E._Encoder(canonical_buffers=False)
  return {"format": E.FORMAT, "version": E.VERSION, "nodes": enc.nodes, "roots": [enc.node(g)]}

@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck), **FIXED)
@given(graphs())
def test_canonical_encoding_round_trips(g):
  data = encode_graph([g])
  assert encode_graph(decode_graph(data)) == data
  assert_agree(data)

# *** plants: the comparison above goes red for a fast path with the usual bugs ***

def _loose_dtype(x):
  # the bug: a key without the exact-type check (JSON true == 1, so {"ptr": true} finds the pointer dtype)
  if type(x) is dict and (d := E._DTYPE_DEC.get((x.get("dt"), x.get("n"), x.get("ptr")))) is not None: return d
  raise E._Slow

def _loose_view(w):
  # the bug: view fields taken as they are (true, 1.0 and 1 are one dict key), mask unchecked
  sh, sd, off, mk = w["v"]
  mask = None if mk is None else tuple(tuple(m["t"]) for m in mk["t"])
  if (v := E._VIEW_CACHE.get((tuple(sh["t"]), tuple(sd["t"]), off, mask))) is not None: return v
  raise E._Slow

@pytest.mark.parametrize("plant,case", [(("_fast_dtype", _loose_dtype), "ptr_true"), (("_fast_dtype", _loose_dtype), "ptr_float"),
                                        (("_fast_view", _loose_view), "view_shape_true"), (("_fast_view", _loose_view), "mask_true"),
                                        (("_fast_view", _loose_view), "view_offset_false")])
def test_plant_loose_type_checks_go_red(plant, case):
  with mock.patch.object(E, *plant):
    assert_agree(_doc(NEAR_MISSES["valid"])); assert_agree(_doc(NEAR_MISSES["valid_masked"]))
    with pytest.raises(AssertionError, match="fast"): assert_agree(_doc(NEAR_MISSES[case]))

@pytest.mark.parametrize("case", ["view_dim_too_big", "view_stride_too_big", "view_offset_too_big", "mask_reversed"])
def test_plant_a_loose_range_check_of_first_seen_views_goes_red(case):
  # the fast path makes a view it has not seen when it passes the checking path's range checks: one that lets any
  # int-only view through accepts what the checking path refuses
  with mock.patch.object(E, "_int_view_fits", lambda *a: True):
    with pytest.raises(AssertionError, match="fast"): assert_agree(_doc(NEAR_MISSES[case]))

def test_plant_an_exception_not_handed_over_goes_red():
  # the bug (this fast path had it at first): float.fromhex's OverflowError not handed to the checking path
  with mock.patch.object(E, "_HAND_OVER", tuple(e for e in E._HAND_OVER if e is not OverflowError)):
    with pytest.raises(OverflowError): assert_agree(_doc(NEAR_MISSES["float_overflow"]))

def test_plant_a_disabled_fast_path_is_seen():
  with checking_only(), pytest.raises(AssertionError): test_committed_captures_agree_and_take_the_fast_path()
