"""The scheduler's shortcuts for speed: each must give what the long way gives, and notice when its inputs change."""
import gc
import pytest
from hypothesis import given, settings, strategies as st
from tinysched import Tensor
import tinysched.schedule as S
from tinysched.scheduling import kernel_ast as KA, fusion, bigraph
from tinysched.codegen import lowerer
from tinysched.scheduling.kernel_ast import rules_fingerprint, same_rules
from tinysched import rewrite as rewrite_mod
from tinysched.uop import UOp

def _slow_fingerprint() -> tuple:
  # the fingerprint read afresh, without the memo: what rules_fingerprint must always equal
  KA._READS.clear()
  return rules_fingerprint()

def test_the_fingerprint_is_kept_while_nothing_changes():
  fp = rules_fingerprint()
  assert rules_fingerprint() is fp and same_rules(fp, _slow_fingerprint())

def test_the_fingerprint_is_every_rule_of_the_namespaces():
  # rules_fingerprint picks the rules by their type (asked once per type): the same objects, in the same order, as
  # asking every value
  import itertools
  values = list(itertools.chain.from_iterable(ns.values() for ns in KA._rule_namespaces()))
  expected = tuple(o for o in values if KA._is_rule(o))
  assert len(expected) > 300 and same_rules(_slow_fingerprint(), expected)

@pytest.mark.parametrize("patch", [
  lambda mp: mp.setattr(KA, "views_down", KA.views_down + KA.compose_rules),             # a matcher of a pass module
  lambda mp: mp.setattr(fusion._Fusion, "group_reduce", lambda self, *a, **k: None),     # a method (class namespace)
  lambda mp: mp.setattr(lowerer, "LOWERING_PASSES", tuple(list(lowerer.LOWERING_PASSES))),  # an equal tuple, a new object
  lambda mp: mp.setattr(rewrite_mod, "make_uop", type(rewrite_mod.make_uop)(rewrite_mod.make_uop.__func__, UOp)),  # an equal bound method
  lambda mp: mp.setattr(bigraph, "a_new_rule", lambda u: u, raising=False),              # a new name
  lambda mp: mp.delattr(bigraph, "under_views"),                                         # a name gone
  lambda mp: mp.setattr(bigraph, "under_views", 0),                                      # a rule replaced by no rule
])
def test_the_fingerprint_sees_every_patch(monkeypatch, patch):
  before = rules_fingerprint()
  patch(monkeypatch)
  after = rules_fingerprint()
  assert not same_rules(before, after) and same_rules(after, _slow_fingerprint())
  monkeypatch.undo()
  back = rules_fingerprint()
  assert not same_rules(back, after) and same_rules(back, _slow_fingerprint())

def test_the_fingerprint_survives_a_value_whose_equality_cannot_answer(monkeypatch):
  # comparing a namespace's values runs their ==: a replaced numpy array answers with an array, which has no truth value
  import numpy as np
  monkeypatch.setattr(bigraph, "_some_table", np.arange(4), raising=False)
  fp = rules_fingerprint()
  monkeypatch.setattr(bigraph, "_some_table", np.arange(4) + 1)  # no rule: the same rules
  assert rules_fingerprint() is fp

def test_the_fingerprint_reads_a_replaced_class(monkeypatch):
  # the namespaces' modules are found once, their classes on every call: a method patched on a class that itself
  # replaced the original is a rule change too
  rules_fingerprint()
  monkeypatch.setattr(fusion, "_Fusion", type("_Fusion", (fusion._Fusion,), {}))
  first = rules_fingerprint()
  monkeypatch.setattr(fusion._Fusion, "group_reduce", lambda self, *a, **k: None)
  second = rules_fingerprint()
  assert not same_rules(first, second) and same_rules(second, _slow_fingerprint())

def test_cycle_collection_resumes_after_a_schedule():
  assert gc.isenabled()
  (Tensor.ones(4, 4).contiguous() + 1).schedule()
  assert gc.isenabled()

def test_cycle_collection_resumes_after_a_failed_schedule(monkeypatch):
  def boom(*a, **k): raise S.ScheduleError("planted")
  monkeypatch.setattr(S, "group_stores", boom)
  with pytest.raises(S.ScheduleError, match="planted"): (Tensor.ones(4, 4).contiguous() + 1).schedule()
  assert gc.isenabled()

def test_cycle_collection_switched_off_by_the_caller_stays_off():
  gc.disable()
  try:
    (Tensor.ones(4, 4).contiguous() + 1).schedule()
    assert not gc.isenabled()
  finally: gc.enable()

def test_no_cycle_collection_while_scheduling(monkeypatch):
  seen = []
  orig = S.group_stores
  monkeypatch.setattr(S, "group_stores", lambda *a, **k: (seen.append(gc.isenabled()), orig(*a, **k))[1])
  (Tensor.ones(4, 4).contiguous() + 1).schedule()
  assert seen == [False]

def test_the_fingerprint_is_kept_when_only_state_changes(monkeypatch):
  fp = rules_fingerprint()
  monkeypatch.setattr(S, "_TENSOR_MEMO", S.KernelMemo())  # a reset memo is no rule change
  assert rules_fingerprint() is fp
  monkeypatch.setattr(S, "_TENSOR_MEMO", lambda: None)    # a rule where there was none is
  assert not same_rules(rules_fingerprint(), fp)

def test_a_dead_node_frees_its_intern_entry_and_a_live_one_keeps_it():
  import tinysched.uop as U
  from tinysched.ops import Ops
  from tinysched.dtype import dtypes
  def key(n): return (Ops.CONST, dtypes.int32, (), U._intern_arg(n))
  a = U.UOp(Ops.CONST, dtypes.int32, (), 987654321)
  assert U._ucache[key(987654321)]() is a
  del a
  assert key(987654321) not in U._ucache
  b = U.UOp(Ops.CONST, dtypes.int32, (), 987654322)
  r = U._ucache[key(987654322)]
  U._forget(r)  # a stale callback for the key (its node alive): the entry stays
  assert U._ucache[key(987654322)]() is b and U.UOp(Ops.CONST, dtypes.int32, (), 987654322) is b

def test_the_prebuilt_matcher_pairs_follow_a_patched_matcher(monkeypatch):
  built = KA.finish_and_number()
  assert KA.finish_and_number() is built and built.rule_names() == KA.finish_rules.rule_names() + KA.number_rules.rule_names()
  patched = KA.PatternMatcher([(r[0], r[1], r[2]) for r in KA.finish_rules.rules[:-1]], name="finish_rules")
  monkeypatch.setattr(KA, "finish_rules", patched)
  assert KA.finish_and_number().rule_names() == patched.rule_names() + KA.number_rules.rule_names()

def test_leaves_a_rule_can_match_are_still_rewritten():
  from tinysched.ops import Ops
  from tinysched.dtype import dtypes
  from tinysched.rewrite import UPat, PatternMatcher, graph_rewrite
  from tinysched.uop import UOp
  one, two = UOp.const(dtypes.int32, 1), UOp.const(dtypes.int32, 2)
  x = UOp(Ops.DEFINE_VAR, dtypes.int32, (), ("x", 0, 9))
  tree = UOp(Ops.ADD, dtypes.int32, (UOp(Ops.MUL, dtypes.int32, (x, one)), one))
  # a rule for leaves of an op, and one for the same op that needs a source (it never matches a leaf)
  pm = PatternMatcher([(UPat(Ops.CONST, arg=1), lambda: two, "one_is_two"),
                       (UPat(Ops.DEFINE_VAR, src=(UPat(),)), lambda: one, "never_a_leaf")])
  assert pm.leaf_rules == frozenset({Ops.CONST})
  track: list = []
  out = graph_rewrite(tree, pm, track=track)
  assert out is UOp(Ops.ADD, dtypes.int32, (UOp(Ops.MUL, dtypes.int32, (x, two)), two)) and [t[0] for t in track] == ["one_is_two"]

def _pre_sinks() -> list:
  """The pre-sinks of kernels of many forms: reduces under expands and pads, several stores, an assign, a conv and its
  backward with FUSE_CONV_BW, an embedding gather with FUSE_ARANGE, a shrink of a permute."""
  from tinysched import capture_hook
  from tinysched.helpers import Context
  pres: list = []
  def hook(level, inputs, output, info=None):
    if level == "kernel": pres.append(inputs)
  def models():
    x, w = Tensor.rand(8, 16).realize(), Tensor.rand(16, 4).realize()
    yield [(x @ w).relu().log_softmax(-1)]
    yield [x.sum(1), x.max(1), (x - x.mean(1, keepdim=True)).pad(((1, 1), (0, 2))).exp()]
    r = Tensor.rand(8, 16).realize().sum(1, keepdim=True)  # (not x.sum(1) again: scheduled above, it is a buffer now)
    yield [r * 2, (r * 2).expand(8, 3) + 1, r + 1]  # one kernel of three stores, one read back by another
    a = Tensor.zeros(8, 16).contiguous().realize()
    yield [a.assign(a + x * 2)]
    img, k = Tensor.rand(2, 3, 8, 8, requires_grad=True), Tensor.rand(4, 3, 3, 3, requires_grad=True)
    img.conv2d(k, padding=1).relu().sum().backward()
    yield [img.grad, k.grad]
    yield [Tensor.rand(50, 8).realize()[Tensor([3, 1, 4, 1, 5])], x.permute(1, 0)[2:10, 1:7].contiguous() * 3]
  prev, capture_hook.HOOK = capture_hook.HOOK, hook
  try:
    with Context(FUSE_CONV_BW=1, FUSE_ARANGE=1):
      for outs in models():
        S._TENSOR_MEMO = S.KernelMemo()  # every kernel rewritten, so every one reaches the hook
        outs[0].schedule(*outs[1:])
  finally: capture_hook.HOOK = prev
  return pres

def test_inline_and_views_up_in_one_walk_are_the_two_walks(monkeypatch):
  from tinysched.rewrite import graph_rewrite
  def both_ways(pre, assigned):
    stored = {s.src[0]: s.src[2] for s in pre.src}
    first = KA._combine(KA.inline_rules, KA.own_store_rules) if len(pre.src) > 1 else KA.inline_rules
    return graph_rewrite(graph_rewrite(pre, first, stored), KA.views_up), graph_rewrite(pre, KA.inline_and_up(len(pre.src) > 1), stored)
  pres = _pre_sinks()
  assert len(pres) >= 15 and any(len(p.src) > 1 for p, _, _ in pres) and any(a for _, _, a in pres)
  for pre, _, assigned in pres:
    two, one = both_ways(pre, assigned)
    assert one is two
  # planted: an inline rule that matches a form only views_up makes (a view pushed onto a constant), which breaks what
  # the one walk rests on
  from tinysched.rewrite import UPat, PatternMatcher
  from tinysched.ops import Ops
  planted = PatternMatcher([(UPat(Ops.VIEW, src=(UPat(Ops.CONST, name="c"),)), lambda c: c.const_like(0), "planted")])
  monkeypatch.setattr(KA, "inline_rules", KA.inline_rules + planted)
  assert any(a is not b for a, b in (both_ways(pre, assigned) for pre, _, assigned in pres))

@pytest.mark.parametrize("planted", [False, True])
def test_a_kernel_rewritten_outside_a_schedule_frees_by_refcount(monkeypatch, planted):
  """full_ast_rewrite called on its own (replay's kernel rows) leaves no walk on the pre-sink: the pre-sink holds
  no cycle through itself, so it is freed as soon as the caller lets go (planted: nothing dropped)."""
  import weakref
  if planted: monkeypatch.setattr(S, "KEPT_WALKS", ())
  pres = _pre_sinks()
  pre, var_vals, assigned = next(p for p in pres if p[0].src[0].src[2].op is not S.Ops.CONST)
  del pres
  S.full_ast_rewrite(pre, var_vals, assigned, KA.KernelMemo())
  left = [k for k in ("_topo",) if k in pre.__dict__]
  ref = weakref.ref(pre)
  gc.disable()
  try:
    del pre
    freed = ref() is None
  finally: gc.enable()
  assert (left, freed) == ((["_topo"], False) if planted else ([], True))

@pytest.mark.parametrize("planted", [False, True])
def test_a_memo_keeps_pre_sinks_without_cycles(monkeypatch, planted):
  """A memo keeps the pre-sinks it rewrote without their structural key (KernelMemo.pending), and keys them by structure
  when another of their signature comes: neither leaves a walk on them, so dropping the memo frees them by refcount
  (planted: the keying's walk left on the kept pre-sink)."""
  import weakref
  if planted: monkeypatch.setattr(KA.KernelMemo, "_keyed_entry", _keep_walks(KA.KernelMemo._keyed_entry))
  pres = _pre_sinks()
  pre, var_vals, assigned = next(p for p in pres if p[0].src[0].src[2].op is not S.Ops.CONST)
  del pres
  memo = KA.KernelMemo()
  S.full_ast_rewrite(pre, var_vals, assigned, memo)
  assert memo.size() == 1 and [p for ps in memo.pending.values() for p, _ in ps] == [pre]
  # another pre-sink of the same signature (a copy with other buffer numbers): both are keyed by structure
  twin = _renumbered(pre)
  assert twin is not pre
  ast, _ = S.full_ast_rewrite(twin, var_vals, {}, memo)
  assert not memo.pending and len(memo.entries) == 1 and ast is S.full_ast_rewrite(pre, var_vals, assigned)[0]
  left = [k for k in ("_topo",) if k in pre.__dict__]
  ref = weakref.ref(pre)
  gc.disable()
  try:
    del pre, memo
    freed = ref() is None
  finally: gc.enable()
  assert (bool(left), freed) == ((True, False) if planted else (False, True))

def _keep_walks(f):
  # the planted bug: _keyed_entry leaves a walk (the toposort, which holds the pre-sink itself) on a kept pre-sink
  from tinysched.scheduling.bigraph import topo_of
  def g(self, pre, sig, entry=None):
    r = f(self, pre, sig, entry)
    topo_of(pre)
    return r
  return g

def _renumbered(pre):
  """`pre` with every BUFFER's number moved up by 1000: the same kernel on other buffers (one structural key)."""
  from tinysched.uop import UOp
  new = {}
  for u in pre.toposort():
    if u.op is S.Ops.BUFFER: new[u] = UOp(u.op, u.dtype, (), (u.arg[0] + 1000, u.arg[1]))
    else: new[u] = UOp(u.op, u.dtype, tuple(new[s] for s in u.src), u.arg)
  return new[pre]

def test_a_reused_memo_keeps_as_many_schedules_as_its_caller_asks():
  made = KA.KernelMemo.kept(None)
  assert made.max_schedules == KA.KernelMemo.MAX_SCHEDULES
  again = KA.KernelMemo.kept(made, max_schedules=0)  # (replay's per-check memo keeps none)
  again.keep_schedule(("a graph",), ([], {}))
  assert again is made and not again.schedules


# *** the big graph's walk of the lazy graph recurses, and walks on a stack past the recursion limit: one order ***

@st.composite
def _lazy_graphs(draw) -> list:
  pool = [Tensor.ones(2, 3).contiguous(), Tensor.full((2, 3), 2.0), Tensor.ones(3, 2).contiguous().T]
  for _ in range(draw(st.integers(1, 20))):
    a, b = (pool[draw(st.integers(0, len(pool) - 1))] for _ in range(2))
    pool.append(draw(st.sampled_from([lambda: a + b, lambda: a * b, lambda: a.exp(), lambda: a.sum(1, keepdim=True).expand(2, 3),
                                      lambda: a.reshape(3, 2).T, lambda: (a + b).contiguous()]))())
  return [t.lazydata for t in pool[-draw(st.integers(1, min(3, len(pool)))):]]

@settings(max_examples=100, deadline=None)
@given(_lazy_graphs())
def test_lazy_post_order_is_the_same_on_the_stack(outs):
  assert [id(lb) for lb in bigraph._post_order(outs)] == [id(lb) for lb in bigraph._post_order_on_a_stack(outs)]

def test_lazy_post_order_past_the_recursion_limit():
  import sys
  x = Tensor.ones(4).contiguous()
  for _ in range(sys.getrecursionlimit() + 100): x = x + 1
  order = bigraph._post_order([x.lazydata])
  assert order[-1] is x.lazydata and [id(lb) for lb in order] == [id(lb) for lb in bigraph._post_order_on_a_stack([x.lazydata])]

def test_a_scheduled_lazy_graph_frees_by_refcount():
  # scheduling makes no cycle that holds the lazy graph (a self-calling closure in the walk did: the lazy cache then
  # handed the scheduled buffers of a dropped graph to the next equal expression, until a cycle collection)
  import weakref
  # an earlier test's garbage cycle (a traceback's frames) can hold a lazy buffer that the lazy cache shares with this graph
  # (the scalar 1.0 of Tensor.ones): collected first, so the test sees only what scheduling this graph keeps. Without it the
  # outcome depended on when the collector last ran (which a capture or another test order moves)
  gc.collect()
  gc.disable()
  try:
    t = (Tensor.ones(3, 5).contiguous() * 7 + 2).sum(1)
    lbs, todo = [], [t.lazydata]
    while todo:
      lb = todo.pop()
      lbs.append(weakref.ref(lb))
      todo.extend([lb.base] if lb.base is not lb else getattr(lb, "srcs", ()))
    sched = t.schedule()
    assert len(sched) >= 1 and len(lbs) > 4
    del t, sched, lb, todo
    assert [r for r in lbs if r() is not None] == []
  finally: gc.enable()


# *** the memo's structural key: two pre-sinks share one exactly when renumbering their buffers makes them one graph ***

def _renumbered_graph(pre):
  """The reference the key stands for, built the long way: `pre` with its BUFFERs renumbered 0.. in first-use order,
  as interned nodes (two pre-sinks are one kernel up to buffers exactly when these are the same object)."""
  from tinysched.uop import UOp
  new, n = {}, 0
  for u in pre.toposort():
    if u.op is S.Ops.BUFFER: new[u], n = UOp(u.op, u.dtype, (), (n, u.arg[1])), n + 1
    else: new[u] = UOp(u.op, u.dtype, tuple(new[s] for s in u.src), u.arg)
  return new[pre]

def _key(pre): return KA.structural_key(pre.toposort())

_LOOK_ALIKE = [1, 1.0, True, 0.0, -0.0]  # constants that are == (or print alike) but are not one node

def _build(prog: list, sizes: list[int], outs: list[int]):
  """A pre-sink-shaped graph (STOREs of elementwise trees over LOADs) from a little program: ("load", buffer, view),
  ("const", value), ("alu", op, i, j) over earlier entries; the STOREs write buffers `outs` with the last entries."""
  from tinysched.dtype import dtypes
  from tinysched.shape import ShapeTracker
  views = [UOp(S.Ops.VIEW, dtypes.void, (), ShapeTracker.from_shape(s)) for s in ((4,), (2, 2))]
  def buf(i): return UOp(S.Ops.BUFFER, dtypes.float.ptr(), (), (i, ("OPENCL", sizes[i], dtypes.float)))
  made: list = []
  for ins in prog:
    if ins[0] == "load": made.append(UOp(S.Ops.LOAD, dtypes.float, (buf(ins[1]), views[ins[2]])))
    elif ins[0] == "const": made.append(UOp(S.Ops.CONST, dtypes.float, (), ins[1]))
    else: made.append(UOp(ins[1], dtypes.float, (made[ins[2]], made[ins[3]])))
  return UOp(S.Ops.SINK, dtypes.void, tuple(UOp(S.Ops.STORE, dtypes.void, (buf(o), views[0], made[-1 - i])) for i, o in enumerate(outs)))

@st.composite
def _programs(draw):
  prog: list = [("load", draw(st.integers(0, 3)), draw(st.integers(0, 1)))]
  for _ in range(draw(st.integers(0, 7))):
    kind = draw(st.sampled_from(["load", "const", "alu", "alu"]))
    if kind == "load": prog.append(("load", draw(st.integers(0, 3)), draw(st.integers(0, 1))))
    elif kind == "const": prog.append(("const", draw(st.sampled_from(_LOOK_ALIKE))))
    else:
      prog.append(("alu", draw(st.sampled_from([S.Ops.ADD, S.Ops.MUL])), draw(st.integers(0, len(prog) - 1)), draw(st.integers(0, len(prog) - 1))))
  sizes = draw(st.lists(st.sampled_from([4, 8]), min_size=6, max_size=6))
  outs = draw(st.lists(st.integers(4, 5), min_size=1, max_size=min(2, len(prog)), unique=True))
  return prog, sizes, outs

@st.composite
def _mutated(draw, program):
  """The program with one small change that may or may not make another kernel: a source rewired to another earlier
  entry, a constant swapped for a look-alike, another buffer read, or a buffer's size changed."""
  prog, sizes, outs = [list(x) for x in program]
  i = draw(st.integers(0, len(prog) - 1))
  ins = list(prog[i])
  if ins[0] == "alu" and i > 0: ins[draw(st.sampled_from([2, 3]))] = draw(st.integers(0, i - 1))
  elif ins[0] == "const": ins[1] = draw(st.sampled_from(_LOOK_ALIKE))
  elif ins[0] == "load": ins[1] = draw(st.integers(0, 3))
  prog[i] = tuple(ins)
  if draw(st.booleans()): sizes[draw(st.integers(0, 5))] = draw(st.sampled_from([4, 8]))
  return prog, sizes, outs

@settings(max_examples=400, deadline=None)
@given(st.data())
def test_the_structural_key_is_exact(data):
  """Against the reference (the renumbered graph, built the long way): the same key exactly when one kernel. Planted
  keys (sources by count instead of position, arguments by ==, buffer numbers kept) each fail this."""
  program = data.draw(_programs())
  a, b = _build(*program), _build(*data.draw(_mutated(program)))
  assert (_key(a) == _key(b)) == (_renumbered_graph(a) is _renumbered_graph(b))
  assert _key(a) == _key(_renumbered(a))  # the same kernel on other buffers

def test_the_structural_key_tells_apart_what_interning_tells_apart(monkeypatch):
  """Real pre-sinks: each shares its key with itself on other buffers and with no other kernel; constants that are ==
  but not one node (1, 1.0, True; 0.0, -0.0) give other keys. Planted: a key taking arguments by == (1 == 1.0 ==
  True), which would serve one kernel the AST of another."""
  from tinysched.dtype import dtypes
  pres = [p for p, _, _ in _pre_sinks()]
  keys = [_key(p) for p in pres]
  canon = [_renumbered_graph(p) for p in pres]
  for i in range(len(pres)):
    assert _key(_renumbered(pres[i])) == keys[i]
    for j in range(len(pres)): assert (keys[i] == keys[j]) == (canon[i] is canon[j])
  def store_of(c): return UOp(S.Ops.SINK, dtypes.void, (UOp(S.Ops.STORE, dtypes.void, (pres[0].src[0].src[0], pres[0].src[0].src[1],
                                                                                         UOp(S.Ops.CONST, dtypes.float, (), c))),))
  looks_alike = [store_of(c) for c in (1, 1.0, True, 0.0, -0.0)]
  assert len({_key(p) for p in looks_alike}) == 5
  monkeypatch.setattr(KA, "arg_identity", lambda arg: arg)
  assert len({_key(p) for p in looks_alike}) < 5
