"""Decoded graphs are type-checked node by node against tinysched's op table (tinysched/opspec.py SPECS): a stored
graph no pass could have made (a LOAD of a CONST, a STORE of one source, a WHERE gated by a float) is `incompatible`,
with the node's index, its op and what was expected vs found, never `changed` (which a gate marker could waive) or an
`error` from deep inside the scheduler. Each rule class is shown on a real encoded kernel mutated by hand; a plant shows
the old silent decode; and every graph real schedules make (all three capture levels) passes."""
import copy, json, sqlite3, zlib
from pathlib import Path
from unittest import mock
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings, strategies as st
import replay
import replay.store.encode as E
from replay import levels
from replay.cli.app import main as cli
from replay.store.encode import (IncompatibleCapture, decode_graph, decode_kernel_input, decode_schedule_input, encode_graph, encode_kernel_input,
                                 key_of)
from replay.store.sqlite import Store
from tinysched import Tensor, Variable, capture_hook, dtypes
from tinysched.codegen.program import to_program
from tinysched.lazy import LazyBuffer
from tinysched.ops import Ops
from tinysched.opspec import SPECS, OpSpecError, problem, verify
from tinysched.schedule import create_schedule_with_vars, full_ast_rewrite
from tinysched.uop import UOp
from tinysched.shape import ShapeTracker

FIXED = {"derandomize": True, "database": None}  # the same examples every run (a gate must not pass or fail by luck)

def _kernel() -> tuple[dict, dict]:
  """(AST document, pre-sink document) of one real kernel: a padded constant (VALID, WHERE), a LOAD, a reduce, a STORE."""
  got = []
  capture_hook.HOOK = lambda level, inputs, output, info=None: got.append((level, inputs, output))
  try:
    Tensor.manual_seed(0)
    x = Tensor.rand(4, 6).realize()
    ((x * 2).pad(((0, 0), (1, 1))).sum(1) + 1).realize()
  finally: capture_hook.HOOK = None
  (pre, vv, asg), ast = next((i, o) for lvl, i, o in got if lvl == "kernel" and any(u.op is Ops.REDUCE_AXIS for u in o.toposort()))
  return json.loads(encode_graph([ast])), json.loads(encode_kernel_input(pre, vv, asg))

AST, PRE = _kernel()

def _at(doc: dict, op: str, k: int = 0) -> int:
  """The document index of the k-th node of `op`."""
  return [i for i, n in enumerate(doc["nodes"]) if n[0] == op][k]

def _shift(x, by: int):
  # node references inside an argument ({"u": i}) move with the nodes
  if isinstance(x, dict): return {"u": x["u"] + by} if set(x) == {"u"} else {k: _shift(v, by) for k, v in x.items()}
  return [_shift(a, by) for a in x] if isinstance(x, list) else x

def _prepend(doc: dict, node: list) -> dict:
  """`doc` with `node` first: every reference moves up by one (sources stay earlier than their users)."""
  out = copy.deepcopy(doc)
  out["nodes"] = [node] + [[op, dt, [s + 1 for s in src], _shift(arg, 1)] for op, dt, src, arg in out["nodes"]]
  out["roots"] = [r + 1 for r in out["roots"]]
  if "var_vals" in out: out["var_vals"] = [[i + 1, v] for i, v in out["var_vals"]]
  if "assigns" in out: out["assigns"] = [i + 1 for i in out["assigns"]]
  return out

def _with(doc: dict, i: int, field: int, value) -> dict:
  out = copy.deepcopy(doc)
  out["nodes"][i][field] = value
  return out

def _refused(doc: dict, decode=decode_graph) -> str:
  """The reason `decode` refuses `doc` with, the same on the fast and the checking path."""
  data = json.dumps(doc).encode()
  with pytest.raises(IncompatibleCapture) as fast: decode(data)
  with mock.patch.object(E._Decoder, "_fast_node", lambda self, i, n: self._node(i, n)), pytest.raises(IncompatibleCapture) as slow: decode(data)
  assert str(fast.value) == str(slow.value)
  return str(fast.value)

# the kernel with a float CONST first: node 0 is earlier than every node, so any source may be pointed at it
A = _prepend(AST, ["CONST", {"dt": "float"}, [], {"f": "0x1p+0"}])

def test_the_base_documents_decode():
  ast = decode_graph(json.dumps(AST).encode())[0]
  assert ast.op is Ops.SINK and decode_graph(json.dumps(A).encode())[0] is ast
  assert decode_kernel_input(json.dumps(PRE).encode())[0].op is Ops.SINK
_LOAD_OF_A_CONST = _with(A, _at(A, "LOAD"), 2, [0, A["nodes"][_at(A, "LOAD")][2][1]])

# *** one crafted document per rule class: (document, decoder, what the reason says) ***

def _cases() -> dict[str, tuple[dict, object, list[str]]]:
  store, load, mul, where, add, valid, red = (_at(A, o) for o in ("STORE", "LOAD", "MUL", "WHERE", "ADD", "VALID", "REDUCE_AXIS"))
  src = lambda i: A["nodes"][i][2]  # noqa: E731
  view = src(load)[1]
  fl = lambda i: _with(A, i, 1, {"dt": "float"})  # noqa: E731
  pstore = _at(PRE, "STORE")
  return {
    # arity
    "STORE with one source": (_with(A, store, 2, src(store)[:1]), decode_graph, [f"node {store}: STORE needs 3 sources, has 1"]),
    "ALU with one source": (_with(A, mul, 2, src(mul)[:1]), decode_graph, [f"node {mul}: MUL needs 2 sources, has 1"]),
    "ALU with three sources": (_with(A, add, 2, src(add) + [0]), decode_graph, [f"node {add}: ADD needs 2 sources, has 3"]),
    "pre-sink STORE with one source": (_with(PRE, pstore, 2, PRE["nodes"][pstore][2][:1]), decode_kernel_input,
                                       [f"node {pstore}: STORE needs 3 sources, has 1"]),
    # source kinds
    "LOAD of a CONST": (_LOAD_OF_A_CONST, decode_graph,
                        [f"node {load}: LOAD source 0 must be a buffer (BUFFER or DEFINE_GLOBAL) of the node's dtype", "found CONST dtypes.float"]),
    "LOAD indexed by a value": (_with(A, load, 2, [src(load)[0], 0]), decode_graph,
                                [f"node {load}: LOAD source 1 must be an index (a VIEW without sources), found CONST dtypes.float"]),
    "STORE into a value": (_with(A, store, 2, [0, *src(store)[1:]]), decode_graph, [f"node {store}: STORE source 0 must be a buffer", "found CONST"]),
    "WHERE gated by a float": (_with(A, where, 2, [0, 0, 0]), decode_graph,
                               [f"node {where}: WHERE source 0 must be a bool value, found CONST dtypes.float"]),
    "VALID of a value": (_with(A, valid, 2, [0]), decode_graph, [f"node {valid}: VALID source 0 must be an index"]),
    # dtypes
    "ADD of an int": (_with(A, add, 1, {"dt": "int"}), decode_graph, [f"node {add}: ADD source 0 must be a value of the node's dtype"]),
    "LOAD of another dtype": (_with(A, load, 1, {"dt": "int"}), decode_graph,
                              [f"node {load}: LOAD source 0 must be a buffer", "of the node's dtype, found DEFINE_GLOBAL dtypes.float.ptr()"]),
    "STORE with a value dtype": (fl(store), decode_graph, [f"node {store}: STORE needs dtype void, has dtypes.float"]),
    "VALID of float": (fl(valid), decode_graph, [f"node {valid}: VALID needs dtype bool, has dtypes.float"]),
    "index VIEW of float": (fl(view), decode_graph, [f"node {view}: VIEW needs dtype void with 0 source(s), has dtypes.float"]),
    # references
    "source index out of range": (_with(A, mul, 2, [src(mul)[0], len(A["nodes"]) + 5]), decode_graph,
                                  [f"node {mul}: MUL source 1: reference {len(A['nodes']) + 5} is not an earlier node"]),
    "source refers forward": (_with(A, mul, 2, [src(mul)[0], mul + 1]), decode_graph,
                              [f"node {mul}: MUL source 1: reference {mul + 1} is not an earlier node"]),
    # arguments
    "REDUCE_AXIS axes of strings": (_with(A, red, 3, {"t": [{"op": "ADD"}, {"t": ["1"]}]}), decode_graph,
                                    [f"node {red}: REDUCE_AXIS needs a scalar dtype and the argument (ADD|MUL|MAX|AND|OR", "got dtypes.float"]),
    "REDUCE_AXIS with a CMPLT": (_with(A, red, 3, {"t": [{"op": "CMPLT"}, {"t": [1]}]}), decode_graph, [f"node {red}: REDUCE_AXIS needs"]),
    "DEFINE_GLOBAL numbered by a string": (_with(A, 1, 3, "0"), decode_graph,
                                           ["node 1: DEFINE_GLOBAL needs a pointer dtype and a non-negative int", "'0'"]),
    "LOAD with an argument": (_with(A, load, 3, 1), decode_graph, [f"node {load}: LOAD needs a scalar dtype and no argument, got dtypes.float 1"]),
    "VIEW of a tuple": (_with(A, view, 3, {"t": [1]}), decode_graph, [f"node {view}: VIEW needs dtype void and a ShapeTracker as its argument"]),
    "BUFFER of another element dtype": (_with(PRE, 0, 3, {"t": [0, {"t": ["NUMPY", 4, {"dt": "int"}]}]}), decode_kernel_input,
                                        ["node 0: BUFFER needs a pointer dtype and the argument (number, (device, size, element dtype))"]),
    # ops no graph before codegen has
    "a lowering op": (_with(A, mul, 0, "RANGE"), decode_graph, [f"node {mul}: RANGE is not an op of a graph before code generation"]),
    # the level's own root: a kernel input is a SINK of STOREs (a pre-sink)
    "kernel input of a VIEW": (_with(PRE, _at(PRE, "SINK"), 2, [_at(PRE, "VIEW", 1)]), decode_kernel_input,
                               ["a kernel input is a SINK of STOREs, not of VIEW"]),
    "kernel input of nothing": (_with(PRE, _at(PRE, "SINK"), 2, []), decode_kernel_input, ["a kernel input is a SINK of STOREs, not of nothing"]),
    "schedule input of a CONST": ({**A, "nodes": A["nodes"][:1] + [["SINK", {"dt": "void"}, [0], None]], "roots": [1]}, decode_schedule_input,
                                  ["a schedule input is a SINK of VIEWs, not of CONST"]),
  }

CASES = _cases()

@pytest.mark.parametrize("case", list(CASES))
def test_type_wrong_documents_are_incompatible(case):
  doc, decode, says = CASES[case]
  why = _refused(doc, decode)
  for s in says: assert s in why, why

def test_every_op_of_the_ir_has_an_entry_or_is_a_lowering_op():
  lowering = {Ops.RANGE, Ops.SPECIAL, Ops.DEFINE_LOCAL, Ops.DEFINE_ACC, Ops.ENDRANGE, Ops.IF, Ops.ENDIF, Ops.BARRIER, Ops.VECTORIZE, Ops.GEP,
              Ops.INDEX}
  assert set(SPECS) | lowering == set(Ops) and not set(SPECS) & lowering
  for op in lowering: assert "not an op of a graph before code generation" in problem(op, dtypes.int32, (), None)

# *** plants: without the table, the same documents decode (and replay wrongly) ***

def test_plant_without_the_check_a_load_of_a_const_decodes(monkeypatch):
  monkeypatch.setattr(E, "op_problem", lambda op, dtype, src, arg: None)
  ast = decode_graph(json.dumps(_LOAD_OF_A_CONST).encode())[0]
  (load,) = [u for u in ast.toposort() if u.op is Ops.LOAD]
  assert load.src[0].op is Ops.CONST  # the old, silent behaviour: a graph no pass makes, replayed as if it were real

def test_plant_without_the_check_a_one_source_store_fails_deep_inside_the_scheduler(monkeypatch):
  monkeypatch.setattr(E, "op_problem", lambda op, dtype, src, arg: None)
  doc, decode, _ = CASES["pre-sink STORE with one source"]
  pre, vv, asg = decode(json.dumps(doc).encode())
  with pytest.raises(IndexError): full_ast_rewrite(pre, vv, asg)  # what `replay check` reported as `error: IndexError`

# *** end to end: replay check says incompatible, with the reason, exit 2 ***

def _tiny():
  Tensor.manual_seed(0)
  ((Tensor.rand(4, 6) * 2).sum(1) + 1).realize()

@pytest.fixture(scope="module")
def tiny_store(tmp_path_factory) -> Path:
  db = tmp_path_factory.mktemp("types") / "tiny.db"
  with replay.capture(db, label="types"): _tiny()
  return db

def _crafted(db: Path, column: str, mutate) -> None:
  """Point the first kernel row's input or output at its own document mutated by `mutate` (stored with a matching key)."""
  s = Store(db, readonly=True)
  try:
    row = next(r for r in s.captures(level="kernel") if any(n[0] == "REDUCE_AXIS" for n in json.loads(s.blob(r["output_key"]))["nodes"]))
    data = json.dumps(mutate(json.loads(s.blob(row[column])))).encode()
  finally: s.close()
  c = sqlite3.connect(db)
  kind = "ast" if column == "output_key" else "kernel_input"
  c.execute("INSERT OR REPLACE INTO graphs (key, kind, data, size) VALUES (?,?,?,?)", (key_of(data), kind, zlib.compress(data), len(data)))
  c.execute(f"UPDATE captures SET {column}=? WHERE id=?", (key_of(data), row["id"]))
  c.commit(); c.close()  # noqa: E702

def _load_of_a_const(doc: dict) -> dict:
  doc = _prepend(doc, ["CONST", {"dt": "float"}, [], {"f": "0x1p+0"}])
  return _with(doc, _at(doc, "LOAD"), 2, [0, doc["nodes"][_at(doc, "LOAD")][2][1]])

def _one_source_store(doc: dict) -> dict:
  doc["nodes"][_at(doc, "STORE")][2] = doc["nodes"][_at(doc, "STORE")][2][:1]
  return doc

def _check(db: Path, tmp_path: Path):
  r = CliRunner().invoke(cli, ["check", str(db), "-j", "1", "--report-json", str(tmp_path / "r.json")])
  assert r.exception is None or isinstance(r.exception, SystemExit), r.output
  return r, json.loads((tmp_path / "r.json").read_text())

@pytest.mark.parametrize("column, mutate, says", [("output_key", _load_of_a_const, "LOAD source 0 must be a buffer"),
                                                  ("input_key", _one_source_store, "STORE needs 3 sources, has 1")])
def test_replay_check_reports_incompatible_with_the_reason(tmp_path, tiny_store, column, mutate, says):
  db = tmp_path / "crafted.db"
  db.write_bytes(tiny_store.read_bytes())
  _crafted(db, column, mutate)
  r, rep = _check(db, tmp_path)
  assert r.exit_code == 2, r.output
  assert "incompatible: 1" in r.output and "changed: 0" in r.output and "error: 0" in r.output, r.output
  (bad,) = [x for x in rep["results"] if x["outcome"] == "incompatible"]
  assert says in bad["reason"] and "node " in bad["reason"], bad["reason"]

def test_plant_without_the_check_replay_check_says_changed(tmp_path, tiny_store, monkeypatch):
  # the symptom: a type-wrong stored AST compared as if it were real is a (waivable) change, not incompatible
  monkeypatch.setattr(E, "op_problem", lambda op, dtype, src, arg: None)
  db = tmp_path / "crafted.db"
  db.write_bytes(tiny_store.read_bytes())
  _crafted(db, "output_key", _load_of_a_const)
  r, _ = _check(db, tmp_path)
  assert "changed: 1" in r.output and "incompatible: 0" in r.output, r.output

# *** every graph real schedules make passes: all three capture levels, through the recorder ***

def _programs() -> None:
  """Small Tensor programs covering the scheduler's vocabulary, captured at every level (programs rendered for a GPU target
  too, which the NUMPY device does not do by itself)."""
  Tensor.manual_seed(1)
  a, b = Tensor.rand(4, 8), Tensor.rand(8, 3)
  (a @ b).realize()                                                   # matmul
  a.sum(1).realize(); a.max(0).realize()                              # noqa: E702  reduces
  a.softmax(1).realize()                                              # softmax: two reduces, exp, reciprocal
  Tensor.rand(1, 2, 6, 6).conv2d(Tensor.rand(3, 2, 3, 3), padding=1).relu().realize()  # conv
  ((a > 0.5).where(a, 0).cast(dtypes.int32) % 3 + (a.cast(dtypes.int32) << 1)).realize()  # comparisons, WHERE, ints, casts
  a.bitcast(dtypes.int32).realize()
  v = Variable("n", 1, 4)
  (a.shrink(((0, v.bind(2)), None)).pad(((0, 0), (1, 1))) * 3).sum(0).realize()  # symbolic views, BIND
  y = Tensor.rand(8).realize()
  y.assign(y * 2 + 1).realize()                                       # ASSIGN
  y[2:6].assign(Tensor.ones(4)).realize()                             # ASSIGN through a view
  # meta ops, scheduled only (no second device to run a COPY on): COPY, EMPTY, BUFFER_VIEW
  x = Tensor.rand(8).realize()
  create_schedule_with_vars([x.to("OPENCL").lazydata, Tensor.empty(4).lazydata,
                             LazyBuffer.metaop(Ops.BUFFER_VIEW, (4,), x.dtype, x.device, arg=(4, 2), src=(x.lazydata,))])

@pytest.fixture(scope="module")
def programs_store(tmp_path_factory) -> Path:
  db = tmp_path_factory.mktemp("types") / "programs.db"
  asts: list[UOp] = []
  def also_render(level, inputs, output, info=None):
    if level == "kernel" and output.op is Ops.SINK: asts.append(output)
  with replay.capture(db, label="programs"):
    prev, capture_hook.HOOK = capture_hook.HOOK, (lambda *a, **k: (also_render(*a, **k), prev(*a, **k)))
    try: _programs()
    finally: capture_hook.HOOK = prev
    for ast in dict.fromkeys(asts): to_program(ast)
  return db

def test_every_captured_graph_of_real_programs_decodes(programs_store):
  s = Store(programs_store, readonly=True)
  try: rows = list(s.captures())
  finally: s.close()
  counts: dict[str, int] = {}
  seen_ops: set[Ops] = set()
  s = Store(programs_store, readonly=True)
  try:
    for r in rows:
      lvl, data = levels.get(r["level"]), s.blob(r["input_key"])
      inputs = lvl.decode_input(data)  # refuses a graph the table refuses
      if lvl.graph_output: lvl.decode_output(s.blob(r["output_key"]))
      counts[r["level"]] = counts.get(r["level"], 0) + 1
      verify(*(inputs.roots() if hasattr(inputs, "roots") else [inputs[0]]))
      seen_ops |= {u.op for u in E.parse(data).uops}  # (the symbolic sizes inside views too)
  finally: s.close()
  assert set(counts) == {"kernel", "schedule", "program"} and min(counts.values()) >= 3, counts
  # the meta ops and the rarer forms were made (else this test would not cover their entries)
  assert {Ops.COPY, Ops.EMPTY, Ops.BUFFER_VIEW, Ops.ASSIGN, Ops.BIND, Ops.BITCAST, Ops.WHERE, Ops.CMPLT, Ops.MOD, Ops.SHL} <= seen_ops, seen_ops

# property: random elementwise / reduce / movement chains, every graph their schedules make passes the table
_STEPS = st.lists(st.sampled_from(["exp", "relu", "neg", "sqrt", "sum0", "max1", "permute", "pad", "flip", "expand", "where", "cast", "add",
                                   "mul", "recip", "cmp", "contiguous"]), min_size=1, max_size=6)

def _apply(t: Tensor, step: str, other: Tensor) -> Tensor:
  if step == "sum0": return t.sum(0, keepdim=True).expand(t.shape)
  if step == "max1": return t.max(1, keepdim=True).expand(t.shape)
  if step == "permute": return t.permute(1, 0).permute(1, 0) if t.shape[0] != t.shape[1] else t.permute(1, 0)
  if step == "pad": return t.pad(((1, 0), (0, 1)))[1:, :-1]
  if step == "flip": return t.flip(0)
  if step == "expand": return t[:1].expand(t.shape)
  if step == "where": return (t > 0.2).where(t, other)
  if step == "cast": return t.cast(dtypes.int32).cast(dtypes.float32)
  if step in ("add", "mul"): return t + other if step == "add" else t * other
  if step == "cmp": return (t < other).cast(dtypes.float32)
  return {"exp": Tensor.exp, "relu": Tensor.relu, "neg": Tensor.neg, "sqrt": Tensor.sqrt, "recip": Tensor.reciprocal,
          "contiguous": Tensor.contiguous}[step](t)

@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), **FIXED)
@given(_STEPS)
def test_every_graph_of_random_programs_passes(steps):
  got: list = []
  capture_hook.HOOK = lambda level, inputs, output, info=None: got.append((level, inputs, output))
  try:
    t, other = Tensor.rand(3, 4), Tensor.rand(3, 4)
    for step in steps: t = _apply(t, step, other)
    create_schedule_with_vars([(t + other).lazydata])  # (+ other: at least one kernel, whatever the steps)
  finally: capture_hook.HOOK = None
  assert got
  for level, inputs, output in got:
    if level == "host": continue  # (host data entering a Tensor: an observation point, not a graph)
    # decoded (the table checks every node) and encoded again: the same bytes (BUFFERs renumbered, so not the same nodes)
    if level == "kernel":
      verify(inputs[0], output)
      assert encode_kernel_input(*decode_kernel_input(data := encode_kernel_input(*inputs))) == data
      assert decode_graph(encode_graph([output]))[0] is output  # (an AST has no BUFFER)
    else:
      verify(inputs[0], *output)
      assert encode_graph(decode_graph(data := encode_graph([inputs[0]]))) == data

def test_verify_names_the_node():
  bad = UOp(Ops.LOAD, dtypes.float32, (UOp.const(dtypes.float32, 1.0), UOp(Ops.VIEW, dtypes.void, (), ShapeTracker.from_shape((1,)))))
  with pytest.raises(OpSpecError, match="LOAD source 0 must be a buffer"): verify(UOp.sink_of(bad))
