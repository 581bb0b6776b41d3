"""Pattern rewriting: UPat describes a node shape, PatternMatcher is an ordered list of named rules,
graph_rewrite applies a matcher bottom-up to a fixed point.

Rules are data: `PatternMatcher.rule_names()` lists them and `graph_rewrite(..., track=list)` records
which rule rewrote which node, so replay reports can name the rule behind a change; `FIRED` (a list, when set) sees
every rule that fires, through graph_rewrite or a direct `PatternMatcher.rewrite` (replay coverage). `rewrite_limit(n)` lets
only the first n rule applications happen (replay blame bisects it).
"""
from __future__ import annotations
import contextlib, hashlib, inspect, itertools, os, threading
from typing import Any, Callable, Iterable, Iterator, TypeVar, Union
from tinysched.dtype import DType
from tinysched.ops import Ops, GroupOp
from tinysched.uop import UOp, make_uop, _intern_arg, REWRITES

class _Any:
  def __repr__(self): return "ANY"
ANY = _Any()  # "match any argument"

def _as_tuple(x: Any) -> tuple | None:
  if x is None: return None
  return tuple(x) if isinstance(x, (tuple, set, frozenset, list)) else (x,)

class UPat:
  """A node pattern.

  op: an Ops, a collection of Ops, or None (any). dtype: a DType, collection, or None.
  src: None (any sources); a tuple (in order; for patterns whose ops are all commutative, also in any
  order); a list (in any order); or a single UPat (every source matches it, any count).
  arg: the exact argument, or ANY. name: bind the matched node under this name; a name bound twice
  must bind the same node. allow_any_len: a tuple src matches a prefix of the node's sources.
  src_ops: ops that must each appear among the node's direct sources, for a pattern that leaves its sources open
  (src None) but whose rule can only fire when one is there: the matcher rejects other nodes before calling it
  (a tuple src has these checks from its own source patterns).
  """
  __slots__ = ("op", "dtype", "src", "arg", "name", "allow_any_len", "_perms", "_all", "early_reject", "_opset", "_dtset", "_single")
  def __init__(self, op: Ops | Iterable[Ops] | None = None, dtype: DType | Iterable[DType] | None = None,
               src: tuple[UPat, ...] | list[UPat] | UPat | None = None, arg: Any = ANY, name: str | None = None,
               allow_any_len: bool = False, src_ops: Iterable[Ops] = ()):
    self.op: tuple[Ops, ...] | None = tuple(sorted(_as_tuple(op))) if op is not None else None  # type: ignore[arg-type]  # a tuple: op is not None
    self.dtype = _as_tuple(dtype)
    # sets for the membership tests on the hot path; the tuples keep a deterministic order for everything else
    self._opset = frozenset(self.op) if self.op is not None else None
    self._dtset = frozenset(self.dtype) if self.dtype is not None else None
    self.arg, self.name, self.allow_any_len = arg, name, allow_any_len
    self.src = src
    self._all: UPat | None = src if isinstance(src, UPat) else None
    self._perms: list[tuple[UPat, ...]] | None = None
    if isinstance(src, list): self._perms = [tuple(p) for p in itertools.permutations(src)]
    elif isinstance(src, tuple):
      commutative = self.op is not None and all(o in GroupOp.Commutative for o in self.op) and len(src) == 2
      self._perms = [src, src[::-1]] if commutative else [src]
    # ops the node's direct sources must contain: checked before any recursion
    req: set[Ops] = set(src_ops)
    if src_ops and src is not None: raise ValueError("src_ops is for a pattern with open sources (src None)")
    if isinstance(src, (tuple, list)):
      for p in src:
        if p.op is not None and len(p.op) == 1: req.add(p.op[0])
    self.early_reject = frozenset(req)
    # at most one binding can match (no any-order sources anywhere below): match_one applies
    self._single: bool = self._all._single if self._all is not None else \
      self._perms is None or (len(self._perms) == 1 and all(p._single for p in self._perms[0]))

  @staticmethod
  def var(name: str | None = None, dtype: DType | Iterable[DType] | None = None) -> UPat: return UPat(dtype=dtype, name=name)
  @staticmethod
  def cvar(name: str | None = None, dtype: DType | Iterable[DType] | None = None) -> UPat: return UPat(Ops.CONST, dtype, name=name)
  @staticmethod
  def const(dtype: DType | Iterable[DType] | None, b: Any) -> UPat: return UPat(Ops.CONST, dtype, arg=b)
  @staticmethod
  def any(*pats: UPat) -> UPat: return _UPatAny(pats)
  def view(self, st: Any = ANY, name: str | None = None) -> UPat: return UPat(Ops.VIEW, None, (self,), st, name)
  def alu(self, op: Ops, *src: UPat, name: str | None = None) -> UPat: return UPat(op, None, (self,) + src, name=name)
  def __repr__(self):
    ops = "any" if self.op is None else "|".join(o.name for o in self.op)
    return f"UPat({ops}{'' if self.name is None else ' as ' + self.name})"

  def match(self, u: UOp, store: dict[str, UOp]) -> list[dict[str, UOp]]:
    """Every binding under which `u` matches (more than one only through any-order sources)."""
    if self._opset is not None and u.op not in self._opset: return []
    if self._dtset is not None and u.dtype not in self._dtset and u.dtype.scalar() not in self._dtset: return []
    if self.arg is not ANY and not _arg_eq(self.arg, u.arg): return []
    if self.name is not None:
      if (b := store.get(self.name)) is not None:
        if b is not u: return []
      else: store = {**store, self.name: u}
    # (the ops the sources must hold: a tuple src's own, or src_ops; an every-source pattern has none)
    if self.early_reject and not self.early_reject.issubset({s.op for s in u.src}): return []
    if self.src is None: return [store]
    if self._all is not None:
      res = [store]
      for s in u.src: res = [b2 for b in res for b2 in self._all.match(s, b)]
      return res
    out: list[dict[str, UOp]] = []
    for perm in self._perms:  # type: ignore[union-attr]
      if len(perm) != len(u.src) and not (self.allow_any_len and len(perm) <= len(u.src)): continue
      res = [store]
      for p, s in zip(perm, u.src):
        res = [b2 for b in res for b2 in p.match(s, b)]
        if not res: break
      out.extend(res)
    return out

  def may_lead(self, first: Ops | None) -> bool:
    """False only when no node whose first source has op `first` (None: a node without sources) can match.
    (An `any` pattern has no op set of its own: it is never ruled out.)"""
    if self.src is None or isinstance(self, _UPatAny): return True
    if self._all is not None: return first is None or self._all._opset is None or first in self._all._opset
    for perm in self._perms:  # type: ignore[union-attr]
      if not perm or (first is not None and (perm[0]._opset is None or first in perm[0]._opset)): return True
    return False

  def match_one(self, u: UOp, store: dict[str, UOp]) -> dict[str, UOp] | None:
    """`match` for a pattern with at most one binding (`_single`): that binding or None. It binds into `store` in
    place: with no other order to try, a failed match is never resumed, and the caller passes a fresh dict."""
    if self._opset is not None and u.op not in self._opset: return None
    if self._dtset is not None and u.dtype not in self._dtset and u.dtype.scalar() not in self._dtset: return None
    if self.arg is not ANY and not _arg_eq(self.arg, u.arg): return None
    if (name := self.name) is not None:
      if (b := store.get(name)) is None: store[name] = u
      elif b is not u: return None
    if self.src is None: return store if not self.early_reject or self.early_reject.issubset({s.op for s in u.src}) else None
    if (each := self._all) is not None:
      for s in u.src:
        if each.match_one(s, store) is None: return None
      return store
    pats, srcs = self._perms[0], u.src  # type: ignore[index]
    if len(pats) != len(srcs) and not (self.allow_any_len and len(pats) <= len(srcs)): return None
    for p, s in zip(pats, srcs):
      if p.match_one(s, store) is None: return None
    return store

class _UPatAny(UPat):
  def __init__(self, pats: tuple[UPat, ...]):
    super().__init__()
    self.src = pats
    self._single = False
  def match(self, u: UOp, store: dict[str, UOp]) -> list[dict[str, UOp]]:
    return [b for p in self.src for b in p.match(u, store)]  # type: ignore[union-attr]

def _arg_eq(a: Any, b: Any) -> bool:
  # type-strict like interning, also inside tuples: True must not match 1, and 0.0 must not match -0.0
  return _intern_arg(a) == _intern_arg(b)

Rule = Union[tuple[UPat, Callable], tuple[UPat, Callable, str]]

def _rule_name(fn: Callable) -> str:
  name = getattr(fn, "__name__", "rule")
  if name != "<lambda>": return name
  code = fn.__code__
  return f"{os.path.basename(code.co_filename).removesuffix('.py')}:{code.co_firstlineno}"

class PatternMatcher:
  """An ordered list of (UPat, fn[, name]) rules; the first fn that returns a node wins.

  fn receives the bound names as keyword arguments, plus `ctx` if it declares that parameter.
  Matchers compose with `+` (the left one's rules are tried first).
  """
  def __init__(self, rules: list[Rule], name: str = "matcher"):
    self.name = name
    self.rules: list[tuple[UPat, Callable, str, bool]] = []
    for r in rules:
      pat, fn = r[0], r[1]
      rname = r[2] if len(r) == 3 else _rule_name(fn)
      self.rules.append((pat, fn, rname, "ctx" in inspect.signature(fn).parameters))
    # index rules by op for early rejection, keeping the global order inside every bucket
    self.pdict: dict[Ops, list[tuple[UPat, Callable, str, bool]]] = {op: [] for op in Ops}
    for rule in self.rules:
      for op in (rule[0].op if rule[0].op is not None else tuple(Ops)): self.pdict[op].append(rule)
    # the same buckets for rewrite_named, each rule with whether its pattern binds at most once (match_one)
    self._tries = {op: [(*rule, rule[0]._single) for rule in rules] for op, rules in self.pdict.items()}
    self.pure = not any(has_ctx for _, _, _, has_ctx in self.rules)  # no rule sees a ctx (see shared_results)
    # ops of which a node without sources can match some rule: graph_rewrite takes any other leaf as its own result at
    # once (rewrite_named would try no rule on it: may_lead(None) rules them all out)
    self.leaf_rules: frozenset[Ops] = frozenset(op for op, tries in self._tries.items() if any(t[0].may_lead(None) for t in tries))
    # and split further by the op of the node's first source, filled on first use: a node only tries the rules that
    # can match it (the order inside a bucket is the rules' order)
    self._by_first: dict[Ops, dict[Ops | None, list[tuple[UPat, Callable, str, bool, bool]]]] = {op: {} for op in Ops}
  def __add__(self, other: PatternMatcher) -> PatternMatcher:
    return PatternMatcher([(p, f, n) for p, f, n, _ in self.rules + other.rules], name=f"{self.name}+{other.name}")
  def rule_names(self) -> list[str]: return [n for _, _, n, _ in self.rules]
  def __repr__(self): return f"PatternMatcher({self.name}, {len(self.rules)} rules)"

  def rewrite_named(self, u: UOp, ctx: Any = None) -> tuple[UOp, str] | None:
    """Try the rules in order on one node: (new node, rule name) of the first that fires."""
    src_ops: set[Ops] | None = None
    # (one dict per op, keyed by the first source's op: no key tuple to build per node)
    if (tries := (by_first := self._by_first[u.op]).get(first := u.src[0].op if u.src else None)) is None:
      tries = by_first[first] = [t for t in self._tries[u.op] if t[0].may_lead(first)]
    for pat, fn, name, has_ctx, single in tries:
      if pat.early_reject:  # cheap pre-check before the recursive match
        if src_ops is None: src_ops = {s.op for s in u.src}
        if not pat.early_reject.issubset(src_ops): continue
      if single:
        if (one := pat.match_one(u, {})) is None: continue
        found: Iterable[dict[str, UOp]] = (one,)
      else: found = pat.match(u, {})
      for bound in found:
        ret = fn(ctx=ctx, **bound) if has_ctx else fn(**bound)
        if ret is not None and ret is not u:
          if LIMIT is not None and not LIMIT.admit(name, u, ret): return None
          if FIRED is not None: FIRED.append((name, fn))
          return ret, name
    return None
  def rewrite(self, u: UOp, ctx: Any = None) -> UOp | None:
    r = self.rewrite_named(u, ctx)
    return None if r is None else r[0]

class RewriteLimit:
  """At most `n` rule applications, counted over every rewrite while it is installed (`with rewrite_limit(n)`);
  later applications are refused, as if no rule matched: the bisection knob of LLVM's -opt-bisect-limit. Records
  the last admitted application (rule name, node, result), so a bisection can name the n-th, and a digest of all
  of them (rule names and content keys, in order), so two code versions can tell where their rewriting parts."""
  def __init__(self, n: int) -> None:
    self.n, self.spent = n, 0
    self.last: tuple[str, UOp, UOp] | None = None
    self._h = hashlib.sha256()
  def admit(self, name: str, u: UOp, ret: UOp) -> bool:
    if self.spent >= self.n: return False
    self.spent += 1
    self.last = (name, u, ret)
    # a renderer's rules return source text, not nodes
    self._h.update(f"{name}|{u.key}|{ret.key if isinstance(ret, UOp) else repr(ret)};".encode())
    return True
  @property
  def digest(self) -> str: return self._h.hexdigest()

LIMIT: RewriteLimit | None = None  # installed by rewrite_limit: None (the default) never limits
# when set (a list), every rule that fires anywhere appends (rule name, its function): graph_rewrite's and the direct
# PatternMatcher.rewrite calls of the renderer and the lowerer alike (replay coverage counts them). The function tells
# apart rules of one name in different matchers, and is the same object in a combined matcher `a + b`.
FIRED: list[tuple[str, Callable | Decisions]] | None = None  # Decisions.note reports here too

class Decisions:
  """The named choices of a pass that decides without rewriting (fusion's grouping of stores into kernels). Each
  `note(name)` reports to `FIRED` like a rule firing, so replay coverage counts which captures exercised which
  choice; a name must be declared up front (a typo would otherwise be a choice no capture can ever cover)."""
  def __init__(self, name: str, choices: dict[str, str]) -> None:
    self.name, self.choices = name, dict(choices)  # choice -> what it means, one line
  def names(self) -> list[str]: return list(self.choices)
  def note(self, choice: str) -> None:
    if FIRED is not None:
      if choice not in self.choices: raise KeyError(f"{self.name}: undeclared decision {choice!r}")
      FIRED.append((choice, self))
  def __repr__(self): return f"Decisions({self.name}, {len(self.choices)} choices)"

L = TypeVar("L", bound=RewriteLimit)

@contextlib.contextmanager
def limited(limit: L) -> Iterator[L]:
  """Install `limit` (a RewriteLimit or a subclass) over every rewrite inside the block. Caches of derived results that
  outlive the block (view algebra memos) may then hold results of a limited rewrite: run it in a process of its own."""
  global LIMIT
  prev, LIMIT = LIMIT, limit
  try: yield limit
  finally: LIMIT = prev

def rewrite_limit(n: int) -> contextlib.AbstractContextManager[RewriteLimit]:
  """Allow only the first `n` rule applications inside the block (see RewriteLimit and `limited`)."""
  return limited(RewriteLimit(n))

class RuleAblation(RewriteLimit):
  """Every rule application admitted but those of the rules named `off` (refused as if they had not matched): replay's
  cause search turns rules off to find the ones without which the stored output comes back (replay/check/causes.py)."""
  def __init__(self, off: Iterable[str]) -> None:
    super().__init__(1 << 62)
    self.off = frozenset(off)
  def admit(self, name: str, u: UOp, ret: UOp) -> bool: return name not in self.off and super().admit(name, u, ret)

def rules_off(names: Iterable[str]) -> contextlib.AbstractContextManager[RuleAblation]:
  """Run the block with the named rules turned off (RuleAblation); the same caveat as `limited`: in a process of its own."""
  return limited(RuleAblation(names))

class RuleCap(RewriteLimit):
  """Every rule application admitted but those of rule `name` past its first `k` (refused as if it had not matched),
  and the k-th kept (`at`: node, result): bisecting k pins which application of a blamed rule makes a program wrong
  (replay/triage/reference.py)."""
  def __init__(self, name: str, k: int) -> None:
    super().__init__(1 << 62)
    self.name, self.k, self.seen = name, k, 0
    self.at: tuple[UOp, UOp] | None = None
  def admit(self, name: str, u: UOp, ret: UOp) -> bool:
    if name == self.name:
      if self.seen >= self.k: return False
      self.seen += 1
      self.at = (u, ret)
    return super().admit(name, u, ret)

def rule_capped(name: str, k: int) -> contextlib.AbstractContextManager[RuleCap]:
  """Run the block with only the first `k` applications of rule `name` admitted (RuleCap); in a process of its own."""
  return limited(RuleCap(name, k))

class RewriteLoop(RuntimeError): pass

# how many rewrites may nest (a rule firing on a node some earlier rewrite created) before graph_rewrite
# gives up: a rule that keeps producing new nodes would otherwise never reach a fixed point
REWRITE_DEPTH_LIMIT = 10000

# when set (a list), every graph_rewrite call also records (rule name, before, after) there: replay uses it to
# name the rules that built the nodes of a changed output
TRACE: list[tuple[str, UOp, UOp]] | None = None

_SHARING = threading.local()  # .results: {matcher: its results} inside a shared_results block (per thread)

@contextlib.contextmanager
def shared_results(*matchers: PatternMatcher) -> Iterator[None]:
  """Inside the block, every graph_rewrite with one of `matchers` reuses the results of the earlier ones: a kernel's
  rewrite skips the parts it shares with kernels rewritten before it. Only for matchers whose rules see no ctx and
  depend on nothing but the node (then a node's result is the same in every rewrite): one with a ctx rule is not
  shared. And only while nobody watches the rules fire (track, TRACE, FIRED, rewrite_limit), so what those see is
  unchanged. A nested block is the outer one."""
  if getattr(_SHARING, "results", None) is not None:
    yield
    return
  _SHARING.results = {pm: {} for pm in matchers if pm.pure}
  try: yield
  finally: _SHARING.results = None

def graph_rewrite(root: UOp, pm: PatternMatcher, ctx: Any = None, track: list[tuple[str, UOp, UOp]] | None = None,
                  topo: dict[UOp, None] | None = None) -> UOp:
  """Rewrite bottom-up: sources first, then the node, and whatever a rule returns is rewritten again
  until no rule fires (a fixed point). Results are memoized for the duration of the call (or of a shared_results
  block). `track`, if given, receives (rule name, before, after) for every rule that fired. `topo`: `root.toposort()`,
  where the caller has it already. The walk follows the toposort (computed here when not given: one recursive sort and
  a flat loop cost less than finding the order on _rewrite's stack); only rule results go through that stack."""
  if track is None: track = TRACE
  if topo is None: topo = root.toposort()
  shared = getattr(_SHARING, "results", None)
  if shared is not None and (done := shared.get(pm)) is not None and track is None and FIRED is None and LIMIT is None:
    del shared[pm]  # taken while this rewrite runs: one of the same matcher nested inside it gets its own
    try: return _rewrite_along(root, pm, ctx, track, done, topo)
    finally: shared[pm] = done
  return _rewrite_along(root, pm, ctx, track, {}, topo)

def _rewrite_along(root: UOp, pm: PatternMatcher, ctx: Any, track: list[tuple[str, UOp, UOp]] | None, done: dict[UOp, UOp],
                   topo: dict[UOp, None]) -> UOp:
  """_rewrite over a graph whose toposort is known: its nodes in that order (every node's sources come before it, in the
  order _rewrite's descent meets them, so rules with a ctx see the same sequence), and only what a rule returns goes
  through _rewrite's stack. The given graph is a DAG: no node of it can be met again on its own path."""
  get_done = done.__getitem__
  pdict, leaf_rules, rewrite = pm.pdict, pm.leaf_rules, pm.rewrite_named
  for n in topo:
    if n in done: continue
    if src := n.src:
      new_src = tuple(map(get_done, src))
      nn = n if new_src == src else make_uop(n.op, n.dtype, new_src, n.arg)  # tuple == compares identity first, in C
    elif n.op not in leaf_rules:
      done[n] = n
      continue
    else: nn = n
    if not pdict[nn.op] or (r := rewrite(nn, ctx)) is None:
      done[n] = nn
      continue
    if track is not None: track.append((r[1], nn, r[0]))
    done[n] = done[r[0]] if r[0] in done else _settle(r[0], pm, ctx, track, done)
  return done[root]

# the two ways a rule loops, said the same way by _settle and _rewrite
def _reentered(pm: PatternMatcher, n: UOp) -> RewriteLoop:
  return RewriteLoop(f"{pm.name}: rewriting {n.op} produced a graph containing itself; a rule loops")
def _too_deep(pm: PatternMatcher, rule: str, n: UOp) -> RewriteLoop:
  return RewriteLoop(f"{pm.name}: {REWRITE_DEPTH_LIMIT} nested rewrites without reaching a fixed point (last rule {rule!r} on {n.op}); a rule loops")

def _settle(x: UOp, pm: PatternMatcher, ctx: Any, track: list[tuple[str, UOp, UOp]] | None, done: dict[UOp, UOp]) -> UOp:
  """What a rule returned (`x`, not done), rewritten to its fixed point, as _rewrite would: most results are one new
  node over sources that are done already (a rule rebuilt a node), and those are rewritten here in a chain, without
  _rewrite's stack; the first result with a source still to rewrite goes to _rewrite. Same order, same results."""
  get_done, leaf_rules, pdict, rewrite = done.__getitem__, pm.leaf_rules, pm.pdict, pm.rewrite_named
  chain: dict[UOp, None] = {}  # results rewritten in turn, not done yet (a rule re-creating one of them loops)
  depth = 1
  while True:
    src = x.src
    for s in src:
      if s not in done:
        if s.src or s.op in leaf_rules: break
        done[s] = s  # a leaf no rule can match: its own result (as _rewrite takes it)
    else:
      nn = x if (new_src := tuple(map(get_done, src))) == src else make_uop(x.op, x.dtype, new_src, x.arg)
      if not pdict[nn.op] or (r := rewrite(nn, ctx)) is None: final = done[x] = nn
      else:
        if track is not None: track.append((r[1], nn, r[0]))
        chain[x] = None
        if (x := r[0]) in done: final = done[x]
        elif x in chain: raise _reentered(pm, x)
        elif (depth := depth + 1) > REWRITE_DEPTH_LIMIT: raise _too_deep(pm, r[1], nn)
        else: continue
      break
    final = _rewrite(x, pm, ctx, track, done, depth)
    break
  for c in chain: done[c] = final
  return final

def _rewrite(root: UOp, pm: PatternMatcher, ctx: Any, track: list[tuple[str, UOp, UOp]] | None, done: dict[UOp, UOp],
             depth0: int = 0) -> UOp:
  """The descent on a stack, for what rules return (`depth0`: how many rewrites made `root`); it finds the order itself
  and catches a rule that re-creates its own input."""
  get_done = done.__getitem__
  # nodes entered (membership only, never iterated): one entered and not yet done is on the current path, so
  # meeting it again means a rule re-created its own input
  entered: set[UOp] = set()
  pdict, leaf_rules, rewrite = pm.pdict, pm.leaf_rules, pm.rewrite_named
  # entries: (node, stage, rewrite result, depth = how many rewrites created this node's position)
  stack: list[tuple[UOp, int, UOp | None, int]] = [(root, 0, None, depth0)]
  pop, push = stack.pop, stack.append
  while stack:
    n, stage, other, depth = pop()
    if stage == 0:
      if n in done: continue
      if n in entered: raise _reentered(pm, n)
      entered.add(n)
      kids: list[UOp] | None = None
      for s in reversed(n.src):
        if s in done: continue
        # a leaf no rule can match is its own result: no stack round trip (nothing fires, so order is moot)
        if not s.src and s.op not in leaf_rules: done[s] = s
        elif kids is None: kids = [s]
        else: kids.append(s)
      if kids is not None:
        push((n, 1, None, depth))
        for s in kids: push((s, 0, None, depth))
        continue
      # every source is done already: the node is next either way, without a stack round trip
    if stage <= 1:
      if src := n.src:
        new_src = tuple(map(get_done, src))
        nn = n if new_src == src else make_uop(n.op, n.dtype, new_src, n.arg)  # tuple == compares identity first, in C
      else: nn = n
      if not pdict[nn.op] or (r := rewrite(nn, ctx)) is None:
        done[n] = nn
        continue
      if track is not None: track.append((r[1], nn, r[0]))
      if r[0] in done:
        done[n] = done[r[0]]
        continue
      if depth >= REWRITE_DEPTH_LIMIT: raise _too_deep(pm, r[1], n)
      push((n, 2, r[0], depth))
      push((r[0], 0, None, depth + 1))
    else: done[n] = done[other]  # type: ignore[index]
  return done[root]

# UOp.substitute (uop.py cannot import this module, which builds on it): one matcher for every call, each with its own
# mapping (building one per call cost ~0.15 ms, 67 times in a process's first schedule-level replay)
_SUBSTITUTE = PatternMatcher([(UPat(name="x"), lambda ctx, x: ctx.get(x))], name="substitute")
def substitute(u: UOp, dvars: dict[UOp, UOp]) -> UOp: return graph_rewrite(u, _SUBSTITUTE, dvars)
REWRITES.substitute = substitute
