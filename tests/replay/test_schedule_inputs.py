"""The scheduler is a pure function of what it is given: no memo that outlives the caller's schedule, and the
scheduler flags are part of the captured input, so a replay runs what ran when the capture was made."""
import sqlite3
import numpy as np
import pytest
import replay
from replay.check.pool import check
from replay.store.encode import IncompatibleCapture, decode_schedule_input, encode_schedule_input
import replay.store.encode as E
from tinysched import Tensor, nn
from tinysched.helpers import Context, FUSE_ARANGE

from tinysched.ops import Ops
from tinysched.rewrite import PatternMatcher, UPat
import tinysched.schedule as S
import tinysched.scheduling.kernel_ast as KA

OTHER = 1 - FUSE_ARANGE.default  # the non-default value of the one scheduler flag

swap = PatternMatcher([(UPat((Ops.ADD, Ops.MUL), name="x"),
                        lambda x: x.replace(src=x.src[::-1]) if x.src[0].key < x.src[1].key else None, "swap")], name="swap")

def _asts(t: Tensor) -> list[str]:
  return [si.ast.key for si in t.schedule() if si.ast.op is Ops.SINK]

def _graph():
  Tensor.manual_seed(0)
  x, w = Tensor.rand(4, 8).realize(), Tensor.rand(8, 3).realize()
  return (x @ w + 1).relu() * 2

def test_a_patched_rule_is_never_served_an_old_ast(monkeypatch):
  before = _asts(_graph())
  monkeypatch.setattr(KA, "views_down", KA.views_down + swap)
  patched = _asts(_graph())
  assert patched != before  # the same graph, scheduled again in this process, with the new rule
  monkeypatch.undo()
  assert _asts(_graph()) == before

def test_a_memo_shared_across_schedules_would_be_stale(monkeypatch):
  # the design this replaces: one process-wide memo. Shown failing the check above, so the check can fail.
  shared = KA.KernelMemo()
  orig = S.schedule_graph
  monkeypatch.setattr(S, "schedule_graph", lambda g, vv, flags=None, memo=None: orig(g, vv, flags, shared))
  before = _asts(_graph())
  monkeypatch.setattr(KA, "views_down", KA.views_down + swap)
  assert _asts(_graph()) == before  # stale: the rule change is invisible

def test_the_memo_shares_repeated_layers_within_one_schedule():
  Tensor.manual_seed(0)
  x = Tensor.rand(4, 16).realize()
  layers = [nn.Linear(16, 16) for _ in range(4)]
  for layer in layers: layer.weight.realize(); layer.bias.realize()
  h = x
  for layer in layers: h = layer(h).relu()
  memo = KA.KernelMemo()
  orig = memo.rewrite
  calls = []
  memo.rewrite = lambda pre, assigned: calls.append(1) or orig(pre, assigned)
  big = S.build_big_graph([h.lazydata.base])
  kernels, _ = S.schedule_graph(big.sink, big.var_vals, {}, memo)
  # four kernels, two rewrites: the first layer reads x (a buffer with data), the other three read the previous store
  assert len(kernels) == 4 and len(calls) == 4 and memo.size() == 2
  fresh, _ = S.schedule_graph(big.sink, big.var_vals, {})
  assert [k.ast for k in fresh] == [k.ast for k in kernels]

def _embedding():
  Tensor.manual_seed(1)
  emb = nn.Embedding(300, 8)
  emb.weight.realize()
  return emb(Tensor([[3, 299, 0]]))

def test_flags_are_recorded_with_the_schedule_and_replayed(tmp_path, monkeypatch):
  monkeypatch.delenv("FUSE_ARANGE", raising=False)
  db = tmp_path / "f.db"
  with replay.capture(db, label="flags"):
    with Context(FUSE_ARANGE=OTHER): on = _embedding().numpy()
    off = _embedding().numpy()
  np.testing.assert_array_equal(on, off)
  c = sqlite3.connect(db)
  rows = c.execute("select g.data from captures c join graphs g on g.key = c.input_key where c.level = 'schedule'").fetchall()
  from replay.store.sqlite import Store
  st = Store(db, readonly=True)
  flags = sorted(str(decode_schedule_input(st.blob(k))[2]) for (k,) in c.execute("select input_key from captures where level='schedule'"))
  assert f"{{'FUSE_ARANGE': {OTHER}}}" in flags and "{}" in flags, flags
  assert rows
  # replayed here, where FUSE_ARANGE is off, and where it is on: both sides run with the captured flags
  assert check([str(db)]).counts()["changed"] == 0
  monkeypatch.setenv("FUSE_ARANGE", str(OTHER))
  assert check([str(db)]).counts()["changed"] == 0

def test_flags_not_recorded_is_caught(tmp_path, monkeypatch):
  # the bug this fixes, planted: drop the flags from the stored input; the replay sees a different schedule
  monkeypatch.delenv("FUSE_ARANGE", raising=False)
  orig = E.encode_schedule_input
  import replay.levels.schedule as REC  # the schedule level encodes what the recorder queued
  monkeypatch.setattr(REC, "encode_schedule_input", lambda g, vv, stats=None, flags=None: orig(g, vv, stats))
  db = tmp_path / "lost.db"
  with replay.capture(db, label="flags"):
    with Context(FUSE_ARANGE=OTHER): _embedding().numpy()
  assert check([str(db)]).counts()["changed"] >= 1

def test_default_flags_keep_the_old_key(monkeypatch):
  monkeypatch.delenv("FUSE_ARANGE", raising=False)
  g = _graph()
  big = S.build_big_graph([g.lazydata.base])
  assert encode_schedule_input(big.sink, big.var_vals) == encode_schedule_input(big.sink, big.var_vals, flags={})
  assert S.current_flags() == {}
  with Context(FUSE_ARANGE=OTHER): assert S.current_flags() == {"FUSE_ARANGE": OTHER}
  with Context(FUSE_ARANGE=FUSE_ARANGE.default): assert S.current_flags() == {}

@pytest.mark.parametrize("flags, says", [({"NOPE": 1}, "unknown scheduler flag"), ({"FUSE_ARANGE": "1"}, "not a small"),
                                         ({"FUSE_ARANGE": -1}, "not a small"), ([1], "not an object")])
def test_bad_flags_are_incompatible(flags, says):
  import json
  big = S.build_big_graph([_graph().lazydata.base])
  doc = json.loads(encode_schedule_input(big.sink, big.var_vals))
  doc["flags"] = flags
  with pytest.raises(IncompatibleCapture, match=says): decode_schedule_input(json.dumps(doc).encode())

def test_the_tensor_memo_sees_a_patched_view_algebra(monkeypatch):
  from tinysched.shape import ShapeTracker
  before = _asts(_graph())
  memo = S.tensor_memo()
  assert memo.size() and S.tensor_memo() is memo  # kept across schedules while nothing changes
  orig = ShapeTracker.simplify
  monkeypatch.setattr(ShapeTracker, "simplify", lambda self: orig(self))
  assert S.tensor_memo() is not memo and not S.tensor_memo().size()
  assert _asts(_graph()) == before

def test_a_repeated_step_reuses_its_schedule_but_capture_still_sees_every_kernel(tmp_path):
  def asts_of(t): return [si.ast for si in t.schedule()]
  first = asts_of(_graph())
  memo = S.tensor_memo()
  hit = memo.schedules[next(reversed(memo.schedules))][0]
  again = asts_of(_graph())
  assert S.tensor_memo() is memo and [k.ast for k in memo.schedules[next(reversed(memo.schedules))][0]] == again == first
  assert memo.schedules[next(reversed(memo.schedules))][0] is hit  # the stored schedule was reused, not rebuilt
  db = tmp_path / "c.db"
  with replay.capture(db, label="again"): assert asts_of(_graph()) == first  # capturing: scheduled for real
  c = sqlite3.connect(db)
  assert c.execute("select count(*) from captures where level='kernel'").fetchone()[0] >= 1

def test_many_schedules_drop_only_the_schedules(monkeypatch):
  made = S.tensor_memo()  # a memo made with the default limit: reused, it is cleared at the limit asked for now
  monkeypatch.setattr(S, "TENSOR_SCHEDULES", 1)
  _asts(_graph())
  memo = S.tensor_memo()
  assert memo is made
  entries, pending = dict(memo.entries), {k: list(v) for k, v in memo.pending.items()}
  assert entries or pending
  _asts(_graph() + 1)  # another graph: a second schedule goes over the limit
  assert S.tensor_memo() is memo and len(memo.schedules) <= 1 and all(k in memo.entries for k in entries)
  # a kernel kept without its structural key is still kept, as it was or keyed by structure now
  assert all(k in memo.pending or k in memo.keyed for k in pending)

def test_the_tensor_memo_sees_a_patched_codegen_pass(monkeypatch):
  # FUSE_ARANGE asks codegen's first passes whether a kernel can be lowered: they are rules of the schedule too
  from tinysched.codegen import lowerer
  _asts(_graph())
  memo = S.tensor_memo()
  monkeypatch.setattr(lowerer, "LOWERING_PASSES", tuple(list(lowerer.LOWERING_PASSES)))  # a new tuple, same passes
  assert S.tensor_memo() is not memo

def test_the_fingerprint_holds_its_rules_alive():
  # ids alone could be reused by a later patch once the patched object is freed; holding the objects prevents that
  from tinysched.scheduling.kernel_ast import rules_fingerprint, same_rules
  fp = rules_fingerprint()
  assert same_rules(fp, rules_fingerprint()) and KA.views_down in fp
