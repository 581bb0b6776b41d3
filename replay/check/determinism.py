"""Nondeterminism: the same input must give the same output in every process.

The check (`Recheck`, step 4 of `replay.check.run`; on by default in `replay check` and `replay gate`) replays rows a
second time in fresh processes and compares their output keys with the check's own: a row whose outputs differ (or that
raises in one process only) gets the outcome `unstable`, exit 1, and fails `replay gate` whatever `[replay:accept]` says.

Which rows: by default every `changed` row and every `error`, plus a sample of the identical ones: one input in SAMPLE,
picked by a hash of (level, input key) that no other choice uses (not the one of --shard), and at least one row of every
store and level, so each is represented whatever the sample hits. `--twice`: every row, in two processes.

Which processes: the check's own replay ran with whatever PYTHONHASHSEED its environment gave (usually a random one);
the second replay runs with another seed (the second of `hash_seeds`, default 1,2) and another allocation order
(`Heap`: objects of random sizes allocated, kept, and a random part freed before and between rows, so the replay's
objects land in other holes, at other addresses). A set of strings iterates in an order that follows the hash seed; a
set of UOps (a UOp hashes by identity) or anything else ordered by id() follows the addresses, which a fresh process
with the same seed and the same history mostly repeats, and the perturbation does not. `--twice` replays every row in two
processes, one with each seed, the second one perturbed, and compares both with the check's own outputs.

Which perturbation exposed it: the unstable inputs (at most ATTRIBUTED) are replayed again in fresh processes that
differ from one reference process (the first seed) in one thing each: only the seed (SEED_TRIES other seeds), or only
the allocation order (ALLOC_TRIES perturbations). `exposed_by` is "allocation order" when an allocation-only process
changes the output (proof of id() order; another seed may change it too, since a seed changes what a process allocates
from its first import on), "hash seed" when only another seed does, else "neither alone" (the output depends on other
state of the process: what it replayed before, a cache, the time). With equal seeds (`--hash-seeds 1,1`) nothing is
blamed on the seed. A report whose rows say both is "both".

Same code or no verdict: a process that replays runs the code on disk. When the checking process itself runs other code
(a function patched in memory, as tests do), the outputs cannot be compared: `code_digests` of both processes differ,
and the check says so (`skipped`) instead of calling every change unstable.

A worker (`worker_main`) writes one JSON file of keys (and of its code digests) and every output's bytes (named by key)
into a temporary folder that the parent removes. `replay suite --twice` (replay/baseline/twice.py) captures models
twice under two seeds and compares the key sets.
"""
from __future__ import annotations
import argparse, dis, hashlib, json, os, random, shutil, subprocess, sys, tempfile, traceback, types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable
from tinysched import capture_hook
from tinysched.rewrite import PatternMatcher
from tinysched.schedule import cycle_gc_paused
from tinysched.scheduling.kernel_ast import KernelMemo
from replay import levels
from replay.errors import HintedError
from replay import process
from replay.process import parent_death_signal
from replay.store.encode import key_of
from replay.store.sqlite import Store
from replay.check.replayer import describe_diff
from replay.check.results import Report, Result

DEFAULT_SEEDS = (1, 2)
SAMPLE = 8          # one identical input in SAMPLE is replayed again (by key hash), plus one row per store and level
PER_PROCESS = 48    # inputs: the sample is cut among up to `jobs` processes, each with at least this many
# which perturbation exposes an unstable output (Recheck.attribute): the first ATTRIBUTED unstable inputs, replayed in
# processes that differ from a reference one only in the seed (SEED_TRIES) or only in the allocation order (ALLOC_TRIES)
ATTRIBUTED, SEED_TRIES, ALLOC_TRIES = 12, 2, 4
RowId = tuple[str, int, int, str, str]  # (db, run_id, seq, level, input_key): one stored row
CODE_MODULES = ("tinysched", "replay.levels", "replay.store", "replay.check.replayer")  # the code a replay runs

class DeterminismError(HintedError):
  """The check could not run (a worker failed): the message and what to do next (exit 2)."""

def parse_seeds(s: str, allow_equal: bool = False) -> tuple[int, int]:
  """'A,B' -> (A, B): two PYTHONHASHSEED values (0..4294967295), different unless `allow_equal` (the allocation order is
  perturbed as well, so two equal seeds still compare two processes); raises ValueError saying what is wrong."""
  parts = [p.strip() for p in s.split(",")]
  try: seeds = [int(p) for p in parts]
  except ValueError: raise ValueError(f"{s!r}: expected two integers A,B, e.g. 1,2") from None
  if len(seeds) != 2: raise ValueError(f"{s!r}: expected exactly two seeds A,B, e.g. 1,2")
  if seeds[0] == seeds[1] and not allow_equal: raise ValueError(f"{s!r}: the two seeds must differ")
  if not all(0 <= x <= 4294967295 for x in seeds): raise ValueError(f"{s!r}: PYTHONHASHSEED takes 0..4294967295")
  return seeds[0], seeds[1]

@dataclass(frozen=True)
class Proc:
  """One replaying process: its PYTHONHASHSEED (None: the check's own process, whatever its environment set) and the
  seed of its allocation perturbation (None: none)."""
  seed: int | None
  perturb: int | None = None
  own: bool = False
  def name(self) -> str:
    if self.own: return f"the check's process (PYTHONHASHSEED={os.environ.get('PYTHONHASHSEED') or 'random'})"
    return f"PYTHONHASHSEED={self.seed}" + (f", allocation perturbed (#{self.perturb})" if self.perturb is not None else "")

# *** the worker: what the current code makes of the given rows, in this process ***

class Heap:
  """Another allocation order: objects of random sizes (every small-object size class) allocated and kept, and a random
  part of everything kept freed again, so that the objects a replay makes land in other holes, at other addresses, than
  in an unperturbed process. `shake` again before every row: each one starts from another heap."""
  def __init__(self, seed: int):
    self.rng, self.kept = random.Random(seed), list[bytes]()
    self.shake(self.rng.randrange(20_000, 40_000))
  def shake(self, n: int | None = None) -> None:
    r, kept = self.rng, self.kept
    n = r.randrange(50, 600) if n is None else n
    kept.extend(bytes(r.randrange(2, 480)) for _ in range(n))  # (bytes of 0 and 1 are shared objects, never allocated)
    for _ in range(r.randrange(n // 3, 2 * n // 3 + 1)):  # freed in random order: holes all over the heap
      i = r.randrange(len(kept))
      kept[i] = kept[-1]
      kept.pop()

def _replay(store: Store, rows: list[dict], out: Path, heap: Heap | None, reoptimize: bool, kernels: Any) -> list[dict]:
  """Each row's output key (or the exception it raised) with the current code; every output's bytes into out/outputs."""
  got: list[dict] = []
  memo: dict[tuple, dict] = {}
  for row in rows:
    lv = levels.get(row["level"])
    k = (row["level"], row["input_key"], *lv.replay_key(row, reoptimize))
    if k not in memo:
      if heap is not None: heap.shake()
      res: dict[str, Any] = {"new_key": None, "error": None}
      try:
        inputs = lv.decode_input(store.blob(row["input_key"]))
        _, data, _ = lv.run_row(inputs, row, reoptimize, None, kernels)  # as replay_row runs it
        res["new_key"] = key_of(data)
        if not (f := out / "outputs" / res["new_key"]).exists(): f.write_bytes(data)
      except Exception as e:  # noqa: BLE001 (compared by exception type between the processes)
        res["error"] = type(e).__name__
      memo[k] = res
    got.append({"db": str(store.path), "run_id": row["run_id"], "seq": row["seq"], "level": row["level"], "input_key": row["input_key"], **memo[k]})
  return got

def _variant(wanted: dict[str, list], out: Path, perturb: int | None, reoptimize: bool) -> None:
  """One replay of the wanted rows ({db: [[run_id, seq, level, input_key], ...]}) in this process into the folder `out`."""
  (out / "outputs").mkdir(parents=True, exist_ok=True)
  heap = Heap(perturb) if perturb is not None else None
  kernels = KernelMemo.kept(None, max_schedules=0)  # as a check's chunk replays (replay.check.pool)
  rows: list[dict] = []
  for db, ids in wanted.items():
    want = {tuple(i) for i in ids}
    store = Store(db, readonly=True)
    try:
      sel = sorted((r for r in store.captures() if (r["run_id"], r["seq"], r["level"], r["input_key"]) in want),
                   key=lambda r: (r["level"], r["input_key"], r["run_id"], r["seq"]))
      with cycle_gc_paused(): rows += _replay(store, sel, out, heap, reoptimize, kernels)
    finally: store.close()
  (out / "keys.json").write_text(json.dumps({"rows": rows, "code": code_digests()}, sort_keys=True))

def worker_main(argv: list[str]) -> None:
  """`python -c 'from replay.check.determinism import worker_main; ...' ROWS OUT [--variant none|N ...] [--reoptimize]`:
  replay the rows named in the JSON file ROWS once per variant (N: the allocation perturbed with seed N) into OUT/v<i>.
  Several variants are forked from this process once it has loaded everything: they start from one heap and differ only
  in their perturbation (and one interpreter start serves them all)."""
  ap = argparse.ArgumentParser(prog="replay determinism worker")
  ap.add_argument("rows")
  ap.add_argument("out")
  ap.add_argument("--variant", action="append", default=[])
  ap.add_argument("--reoptimize", action="store_true")
  ns = ap.parse_args(argv)
  capture_hook.HOOK = None  # replaying must not capture itself
  wanted: dict[str, list] = json.loads(Path(ns.rows).read_text())
  variants = [None if v == "none" else int(v) for v in ns.variant or ["none"]]
  if len(variants) == 1: return _variant(wanted, Path(ns.out) / "v0", variants[0], ns.reoptimize)
  pids, arm = [], parent_death_signal()
  for i, v in enumerate(variants):
    if (pid := os.fork()) == 0:
      code = 1
      try:
        if arm: arm()  # (a fork does not inherit it): killed with this process
        _variant(wanted, Path(ns.out) / f"v{i}", v, ns.reoptimize)
        code = 0
      except BaseException: traceback.print_exc()  # noqa: BLE001 (the parent reads it from the worker's stderr)
      finally: os._exit(code)  # never back into the parent's code (its atexit handlers, its return)
    pids.append(pid)
  if any(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) != 0 for pid in list(pids)): sys.exit(1)

# *** the code a process runs, to compare two processes' ***

ASSERTS = dis.opmap["LOAD_ASSERTION_ERROR"]

def _code(co: types.CodeType, h: Any) -> None:
  h.update(f"{co.co_filename}:{co.co_firstlineno}:{co.co_qualname}".encode())
  # code with an assert is compared by where it was defined: pytest rewrites the asserts of our modules (our distribution
  # registers a pytest plugin), so its bytecode differs from a fresh process's (wordcode: opcodes at even offsets)
  rewritable = ASSERTS in co.co_code[::2] or any(n.startswith("@py") for n in co.co_names)
  if not rewritable: h.update(co.co_code + repr(co.co_names).encode())
  for c in co.co_consts:
    if isinstance(c, types.CodeType): _code(c, h)
    elif rewritable: continue
    elif isinstance(c, frozenset): h.update(repr(sorted(map(repr, c))).encode())  # a set's repr follows the hash seed
    else: h.update(repr(c).encode())

def _digest(v: Any, depth: int = 0) -> str | None:
  """A function's (or a method's, or a matcher's rules') code, closed-over functions included; None for anything else."""
  if depth > 3: return None
  try:
    for _ in range(8):  # lru_cache and the like: the function they wrap
      if isinstance(v, type) or not hasattr(v, "__wrapped__"): break
      v = v.__wrapped__
  except Exception: return None  # noqa: BLE001 (an object whose attribute lookup fails: no code of ours)
  if isinstance(v, (staticmethod, classmethod)): v = v.__func__
  if isinstance(v, property): v = v.fget
  h = hashlib.sha256()
  if isinstance(v, PatternMatcher):
    for rule in v.rules: h.update(str(_digest(rule[1], depth + 1)).encode())
  elif isinstance(v, types.FunctionType):
    _code(v.__code__, h)
    for c in v.__closure__ or ():
      try: h.update(str(_digest(c.cell_contents, depth + 1)).encode())
      except ValueError: pass  # an empty cell
  else: return None
  return h.hexdigest()[:16]

def code_digests(prefixes: Iterable[str] = CODE_MODULES) -> dict[str, str]:
  """'module.name' -> digest, for the functions, matchers and classes' methods of every loaded module under `prefixes`.
  Two processes that load the same files agree wherever both have a name (each may have loaded other modules); a
  function replaced in memory (a monkeypatch) differs."""
  out: dict[str, str] = {}
  for m in sorted(n for n in list(sys.modules) if any(n == p or n.startswith(p + ".") for p in prefixes)):
    for name, v in list(vars(sys.modules[m]).items()):
      if isinstance(v, type):
        if v.__module__ != m: continue
        for an, av in list(vars(v).items()):
          if (d := _digest(av)) is not None: out[f"{m}.{name}.{an}"] = d
      elif (d := _digest(v)) is not None: out[f"{m}.{name}"] = d
  return out

def patched(own: dict[str, str], other: dict[str, str]) -> list[str]:
  """The names whose code differs between two processes' code_digests."""
  return sorted(n for n in own.keys() & other.keys() if own[n] != other[n])

# *** the check ***

def sample_rank(level: str, input_key: str) -> int:
  """The identical-row sample's order: a hash no other choice uses (--shard hashes the key alone)."""
  return int.from_bytes(hashlib.sha256(f"determinism\0{level}\0{input_key}".encode()).digest()[:8], "big")

def chosen(rep: Report, every_row: bool) -> list[Result]:
  """The results the check replays again: every one that replayed (incompatible rows never ran) with `every_row`, else
  the changed ones and the errors, and the identical ones of the sample (one input in SAMPLE; at least one row per store
  and level)."""
  ran = [r for r in rep.results if r.outcome in ("identical", "changed", "error")]
  if every_row: return ran
  picked = [r for r in ran if r.outcome != "identical" or sample_rank(r.level, r.input_key) % SAMPLE == 0]
  have = {(r.db, r.level) for r in picked}
  first: dict[tuple[str, str], Result] = {}
  for r in ran:
    g = (r.db, r.level)
    if g not in have and (g not in first or sample_rank(r.level, r.input_key) < sample_rank(first[g].level, first[g].input_key)): first[g] = r
  pick = set(map(id, picked))
  extra = {(r.db, r.level, r.input_key) for r in first.values()}
  # every row of a picked input: they replay once in the worker, and each gets its verdict
  return [r for r in ran if id(r) in pick or (r.db, r.level, r.input_key) in extra]

def _said(x: tuple[str, str | None] | None) -> str:
  if x is None: return "nothing (the row was not replayed)"
  return f"output {x[1][:16]}" if x[0] == "output" and x[1] else f"an exception ({x[1]})"

def _rid(r: Result) -> RowId: return (r.db, r.run_id, r.seq, r.level, r.input_key)

def _own(r: Result) -> tuple[str, str | None]:
  return ("raises", (r.reason or "").split(":", 1)[0]) if r.outcome == "error" else ("output", r.new_key)

class Recheck:
  """The determinism step of a check: `run(rep)` replays `chosen` rows in fresh processes (another hash seed, a perturbed
  allocation order), marks the results whose outputs differ `unstable`, finds which perturbation exposes them, and
  returns the record the report keeps (`Report.determinism`). `jobs`: processes that share the sample's rows."""
  def __init__(self, seeds: tuple[int, int] = DEFAULT_SEEDS, every_row: bool = False, reoptimize: bool = False, jobs: int | None = None,
               timeout: float | None = None, perturb_seed: int | None = None):
    self.seeds, self.every_row, self.reoptimize, self.timeout = seeds, every_row, reoptimize, timeout
    self.jobs = max(1, jobs or os.cpu_count() or 1)
    self.rng = random.Random(perturb_seed if perturb_seed is not None else int.from_bytes(os.urandom(8), "big"))
    self.used: set[int] = set()

  def plan(self, rows: list[Result]) -> list[tuple[Proc, list[Result]]]:
    """Which process replays which rows: --twice, every row in two (the first seed; the second, perturbed); else one
    seed other than this process's (where its environment tells it), the rows cut by input among up to `jobs` processes
    (each its own perturbation), about PER_PROCESS inputs or more each (a process costs its start-up, ~0.3 s)."""
    a, b = self.seeds
    if self.every_row: return [(Proc(a), rows), (Proc(b, self._perturbation()), rows)]
    seed = a if os.environ.get("PYTHONHASHSEED") == str(b) else b
    inputs = sorted({(r.db, r.level, r.input_key) for r in rows})
    n = max(1, min(self.jobs, len(inputs) // PER_PROCESS))
    part = {k: i * n // len(inputs) for i, k in enumerate(inputs)}
    return [(Proc(seed, self._perturbation()), [r for r in rows if part[(r.db, r.level, r.input_key)] == j]) for j in range(n)]

  def _perturbation(self) -> int:
    """A perturbation seed this check has not used yet (each process gets its own allocation order)."""
    while (n := self.rng.randrange(1, 1_000_000)) in self.used: pass
    self.used.add(n)
    return n

  def run(self, rep: Report) -> dict[str, Any]:
    rows = chosen(rep, self.every_row)
    plan = self.plan(rows) if rows else []
    record: dict[str, Any] = {"mode": "every row" if self.every_row else f"changed, errors and 1 in {SAMPLE} identical",
                              "this_process": Proc(None, own=True).name(), "processes": [p.name() for p, _ in plan], "rows": len(rows),
                              "inputs": len({(r.db, r.level, r.input_key) for r in rows}),
                              "by_outcome": {o: sum(r.outcome == o for r in rows) for o in ("changed", "error", "identical")},
                              "unstable": 0, "exposed_by": {}, "skipped": None}
    if not rows: return record
    tmp = Path(tempfile.mkdtemp(prefix="replay-determinism-"))
    try:
      got = run_workers(plan, tmp, self.reoptimize, self.timeout)
      mine = code_digests()
      if differ := sorted({n for p, _ in plan for n in patched(mine, got[p][1])}):
        record["skipped"] = (f"this process runs other code than a fresh one loads ({', '.join(differ[:3])}"
                             f"{f' and {len(differ) - 3} more' if len(differ) > 3 else ''} patched in memory): outputs not compared")
        return record
      seen: dict[RowId, list[tuple[Proc, Any]]] = {_rid(r): [(Proc(None, own=True), _own(r))] for r in rows}
      for p, rs in plan:
        for r in rs: seen[_rid(r)].append((p, got[p][0].get(_rid(r))))
      unstable = [r for r in rows if len({x for _, x in seen[_rid(r)]}) > 1]
      if not unstable: return record
      blame, more = self.attribute(unstable, tmp)
      for r in unstable: _mark(r, seen[_rid(r)], more.get(_rid(r), []), blame.get((r.db, r.level, r.input_key)), tmp)
      record["unstable"] = len(unstable)
      for r in unstable:
        e = (r.unstable or {}).get("exposed_by") or "not attributed"
        record["exposed_by"][e] = record["exposed_by"].get(e, 0) + 1
      return record
    finally: shutil.rmtree(tmp, ignore_errors=True)

  def attribute(self, unstable: list[Result], tmp: Path) -> tuple[dict[tuple[str, str, str], str], dict[RowId, list[tuple[Proc, Any]]]]:
    """(db, level, input) -> which perturbation alone changes its output, and each row's outputs in these processes:
    one reference process (the first seed, no perturbation), SEED_TRIES that differ from it only in the seed (none when
    the two seeds are equal), ALLOC_TRIES that differ only in the allocation order, all replaying the same rows in the
    same order. At most ATTRIBUTED inputs (the rest say so)."""
    first: dict[tuple[str, str, str], Result] = {}
    for r in unstable: first.setdefault((r.db, r.level, r.input_key), r)
    rows = list(first.values())[:ATTRIBUTED]
    a, b = self.seeds
    ref = Proc(a)
    seed = [Proc(s) for s in dict.fromkeys((b + i) % 2**32 for i in range(SEED_TRIES)) if s != a] if b != a else []
    alloc = [Proc(a, self._perturbation()) for _ in range(ALLOC_TRIES)]
    got = run_workers([(p, rows) for p in (ref, *seed, *alloc)], tmp / "attribution", self.reoptimize, self.timeout)
    labels: dict[tuple[str, str, str], str] = {}
    for r in rows:
      base = got[ref][0].get(_rid(r))
      by_seed = any(got[p][0].get(_rid(r)) != base for p in seed)
      by_alloc = any(got[p][0].get(_rid(r)) != base for p in alloc)
      # (an allocation-only difference proves the id() order, whatever another seed does: that changes the allocations too)
      labels[(r.db, r.level, r.input_key)] = "allocation order" if by_alloc else "hash seed" if by_seed else "neither alone" if seed else UNVARIED
    tried = {(r.db, r.level, r.input_key) for r in rows}
    more = {_rid(r): [(p, got[p][0].get(_rid(r))) for p in got] for r in unstable if (r.db, r.level, r.input_key) in tried}
    return labels, more

UNVARIED = "not the allocation order alone"
EXPOSED = {"hash seed": "another hash seed alone changes it, and no process that differs only in its allocation order does: something "
                        "iterates a set or dict of strings, or of tuples or enums hashed by name, into the output",
           "allocation order": "a process that differs only in its allocation order changes it: something iterates objects in id() "
                               "order into the output, a set of UOps (they hash by identity) or a dict keyed by them and filled from "
                               "one; another hash seed may change it too, since a seed changes what a process allocates",
           "neither alone": "neither another seed nor another allocation order alone changes it in fresh processes: it depends on other "
                            "state of the process, such as what it replayed before or a cache",
           UNVARIED: "another allocation order alone does not change it in fresh processes, and the hash seed was not varied "
                     "(--hash-seeds A,A): it depends on other state of the process, such as its own hash seed, what it replayed "
                     "before or a cache"}

def _mark(r: Result, seen: list[tuple[Proc, Any]], more: list[tuple[Proc, Any]], exposed_by: str | None, tmp: Path) -> None:
  """Result `r` becomes `unstable`: its reason names the output of each process that compared it (`seen`), its diff is
  between two outputs that differ, of those or of the attribution's processes (`more`)."""
  r.outcome = "unstable"
  r.unstable = {"outputs": {p.name(): (None if x is None else x[1]) for p, x in seen}, "exposed_by": exposed_by}
  why = EXPOSED.get(exposed_by or "", "not attributed (only the first unstable inputs are)")
  r.reason = ("the output differs between processes: " + "; ".join(f"{p.name()} gives {_said(x)}" for p, x in seen)
              + f"\nexposed by: {exposed_by or 'not attributed'}: {why}\nstored output {r.stored_key[:16]}")
  r.changes, r.change_count, r.text_diff, r.kernel_list, r.rules, r.traceback = [], 0, None, None, [], None
  lv = levels.get(r.level)
  files = {f.name: f for f in tmp.rglob("outputs/*")}
  avail = [(p.name(), x[1]) for p, x in seen + more if x is not None and x[0] == "output" and x[1] and (x[1] in files or x[1] == r.stored_key)]
  pair = next(((a, b) for i, a in enumerate(avail) for b in avail[i + 1:] if a[1] != b[1]), None)
  if pair is None:
    raised = any(x is not None and x[0] == "raises" for _, x in seen)
    r.signature = f"unstable {r.level}: " + ("raises in some processes only" if raised else "outputs differ (no two at hand to diff)")
    return
  def load(key: str) -> Any:
    if key in files: return lv.decode_output(files[key].read_bytes())
    store = Store(r.db, readonly=True)
    try: return lv.decode_output(store.blob(key))
    finally: store.close()
  describe_diff(r, lv, load(pair[0][1]), load(pair[1][1]), (pair[0][0], pair[1][0]), prefix="unstable ")  # first -> second

def run_workers(plan: list[tuple[Proc, list[Result]]], tmp: Path, reoptimize: bool,
                timeout: float | None) -> dict[Proc, tuple[dict[RowId, tuple[str, str | None]], dict[str, str]]]:
  """Replay each process's rows in a fresh process, all at once: per process, each row's ("output", key) or ("raises",
  exception type), and the process's code digests. Processes of one seed and the same rows are forked from one interpreter
  (worker_main). Raises DeterminismError when a worker fails."""
  env = {k: v for k, v in os.environ.items() if not k.startswith("TINYSCHED_CAPTURE")}  # replaying must not capture
  groups: dict[tuple, list[Proc]] = {}
  for p, rows in plan: groups.setdefault((p.seed, id(rows)) if hasattr(os, "fork") else (p,), []).append(p)
  rows_of = {p: rows for p, rows in plan}
  running = []
  try:
    for n, procs in enumerate(groups.values()):
      d = tmp / f"w{n}"
      d.mkdir(parents=True)
      ids: dict[str, list] = {}
      for r in rows_of[procs[0]]: ids.setdefault(r.db, []).append([r.run_id, r.seq, r.level, r.input_key])
      (d / "rows.json").write_text(json.dumps(ids))
      cmd = [sys.executable, "-c", "import sys; from replay.check.determinism import worker_main; worker_main(sys.argv[1:])",
             str(d / "rows.json"), str(d), *[a for p in procs for a in ("--variant", "none" if p.perturb is None else str(p.perturb))],
             *(["--reoptimize"] if reoptimize else [])]
      with open(d / "stderr.txt", "w") as err:  # a file, not a pipe: a worker that writes much cannot block on it
        # (process.spawn: ended at once when the user stops the run, and with this process)
        running.append((procs, d, process.spawn(cmd, env={**env, "PYTHONHASHSEED": str(procs[0].seed)}, stdout=subprocess.DEVNULL, stderr=err)))
    out: dict[Proc, tuple[dict[RowId, tuple[str, str | None]], dict[str, str]]] = {}
    for procs, d, proc in running:
      names = " and ".join(p.name() for p in procs)
      try: proc.wait(timeout=timeout)
      except subprocess.TimeoutExpired:
        raise DeterminismError(f"the replay in another process ({names}) took over {timeout}s", "raise --timeout, or check fewer captures") from None
      if proc.returncode != 0 or not all((d / f"v{i}" / "keys.json").exists() for i in range(len(procs))):
        last = ((d / "stderr.txt").read_text(errors="replace").strip().splitlines() or ["(no output)"])[-1]
        raise DeterminismError(f"the replay in another process ({names}) failed (exit {proc.returncode}): {last}",
                               "run `replay check --no-determinism` to see whether the stores replay at all")
      for i, p in enumerate(procs):
        doc = json.loads((d / f"v{i}" / "keys.json").read_text())
        keys = {(x["db"], x["run_id"], x["seq"], x["level"], x["input_key"]):
                (("raises", x["error"]) if x["error"] else ("output", x["new_key"])) for x in doc["rows"]}
        out[p] = (keys, doc["code"])
    return out
  finally:
    for _, _, proc in running:
      if proc.poll() is None:
        proc.kill()
        proc.wait()
      process.release(proc)
