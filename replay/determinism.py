"""Nondeterminism: the same input must give the same output in every process.

`replay check --twice` replays every selected capture in two fresh processes that differ in PYTHONHASHSEED (by default 1
and 2; `--hash-seeds A,B`), each computing the current code's output key for every stored input. A capture whose two
outputs differ (or that raises in one process only) gets the outcome `unstable`: its output depends on the hash seed,
so something iterates a set (or a dict built from one) into it. Its result then describes the two processes' outputs,
not the stored one: `reason` names both seeds and keys, `changes`/`text_diff` are the diff from the first process's
output to the second's, and `signature` groups unstable captures by that diff. `unstable` fails the check with exit 1
(a finding about the code, as `mismatch` is) and fails `replay gate` whatever `[replay:accept]` says.

What it catches: order that depends on str/bytes hashes (sets or dict keys of strings, tuples of them, Enum members
hashed by name...), which a fixed seed makes reproducible and two seeds make differ. Order by id() (a set of UOps:
UOp hashes by identity) depends on memory addresses, which vary from process to process anyway (address-space
randomization, allocation history), so two processes usually show it too, though not for certain and not
reproducibly. It cannot see nondeterminism that both processes share (the same seed-independent bug twice).

`replay suite --twice` captures each model twice, in processes with the two seeds, and reports the models whose sets
of (level, input key, output key) differ: an input only one run captured (the front end built a different graph), or
one input with two outputs.

The worker (`python -m replay.determinism keys ...`) writes one JSON file of keys and every output's bytes (named by
key) into a temporary folder that the parent removes.
"""
from __future__ import annotations
import json, os, shutil, subprocess, sys, tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from replay.errors import HintedError

DEFAULT_SEEDS = (1, 2)
RowId = tuple[str, int, int, str, str]  # (db, run_id, seq, level, input_key): one stored row

class DeterminismError(HintedError):
  """The check could not run (a worker failed): the message and what to do next (exit 2)."""

def parse_seeds(s: str) -> tuple[int, int]:
  """'A,B' -> (A, B): two different PYTHONHASHSEED values (0..4294967295); raises ValueError saying what is wrong."""
  parts = [p.strip() for p in s.split(",")]
  try: seeds = [int(p) for p in parts]
  except ValueError: raise ValueError(f"{s!r}: expected two integers A,B, e.g. 1,2") from None
  if len(seeds) != 2: raise ValueError(f"{s!r}: expected exactly two seeds A,B, e.g. 1,2")
  if seeds[0] == seeds[1]: raise ValueError(f"{s!r}: the two seeds must differ")
  if not all(0 <= x <= 4294967295 for x in seeds): raise ValueError(f"{s!r}: PYTHONHASHSEED takes 0..4294967295")
  return seeds[0], seeds[1]

# *** the worker: output keys of every selected row, in this process ***

def _worker(paths: list[str], out: Path, level: str | None, label: str | None, key: str | None, shard: tuple[int, int] | None) -> None:
  from tinysched import capture_hook
  from replay.check import _select
  from replay.encode import key_of
  from replay.runner import decode_input, run_input
  from replay.store import Store
  capture_hook.HOOK = None  # replaying must not capture itself
  (out / "outputs").mkdir(parents=True, exist_ok=True)
  rows: list[dict] = []
  for p in paths:
    store = Store(p, readonly=True)
    try:
      memo: dict[tuple[str, str], dict] = {}
      for row in _select(store, level, label, key, shard):
        k = (row["level"], row["input_key"])
        if k not in memo:
          got: dict[str, Any] = {"new_key": None, "error": None}
          try:
            _, data = run_input(row["level"], decode_input(row["level"], store.blob(row["input_key"])))
            got["new_key"] = key_of(data)
            f = out / "outputs" / got["new_key"]
            if not f.exists(): f.write_bytes(data)
          except Exception as e:  # noqa: BLE001 (an input that cannot be read or run: compared as text between the processes)
            got["error"] = f"{type(e).__name__}: {e}".splitlines()[0][:300]
          memo[k] = got
        rows.append({"db": str(store.path), "run_id": row["run_id"], "seq": row["seq"], "level": row["level"], "input_key": row["input_key"], **memo[k]})
    finally: store.close()
  (out / "keys.json").write_text(json.dumps(rows, sort_keys=True))

def _worker_env(seed: int) -> dict[str, str]:
  env = {k: v for k, v in os.environ.items() if not k.startswith("TINYSCHED_CAPTURE")}  # replaying must not capture
  env["PYTHONHASHSEED"] = str(seed)
  return env

def _run_workers(paths: list[str], tmp: Path, seeds: tuple[int, int], filters: list[str], timeout: float | None) -> dict[int, dict[RowId, dict]]:
  from replay.suite import _parent_death_signal
  procs = []
  try:
    for s in seeds:
      cmd = [sys.executable, "-m", "replay.determinism", "keys", "--out", str(tmp / f"seed-{s}"), *filters, "--", *paths]
      procs.append((s, subprocess.Popen(cmd, env=_worker_env(s), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                        preexec_fn=_parent_death_signal())))
    out: dict[int, dict[RowId, dict]] = {}
    for s, p in procs:
      try: _, err = p.communicate(timeout=timeout)
      except subprocess.TimeoutExpired:
        raise DeterminismError(f"the replay with PYTHONHASHSEED={s} took over {timeout}s", "raise --timeout, or check fewer captures") from None
      keys = tmp / f"seed-{s}" / "keys.json"
      if p.returncode != 0 or not keys.exists():
        last = (err.strip().splitlines() or ["(no output)"])[-1]
        raise DeterminismError(f"the replay with PYTHONHASHSEED={s} failed (exit {p.returncode}): {last}",
                               "run `replay check` without --twice to see whether the stores replay at all")
      out[s] = {(r["db"], r["run_id"], r["seq"], r["level"], r["input_key"]): r for r in json.loads(keys.read_text())}
    return out
  finally:
    for _, p in procs:
      if p.poll() is None:
        p.kill()
        p.wait()

def mark_unstable(rep, paths: list[str], level: str | None = None, label: str | None = None, key: str | None = None,
                  shard: tuple[int, int] | None = None, seeds: tuple[int, int] = DEFAULT_SEEDS, timeout: float | None = None) -> int:
  """Replay the rows of `rep` (a Report of check() over `paths` with the same filters) in two processes with the two
  hash seeds; results whose outputs differ between them become `unstable`. Returns how many did."""
  from replay.runner import decode_output, describe_diff
  filters = [*(["--level", level] if level else []), *(["--label", label] if label else []), *(["--key", key] if key else []),
             *(["--shard", f"{shard[0]}/{shard[1]}"] if shard else [])]
  tmp = Path(tempfile.mkdtemp(prefix="replay-twice-"))
  try:
    got = _run_workers(paths, tmp, seeds, filters, timeout)
    a_seed, b_seed = seeds
    n = 0
    for r in rep.results:
      rid = (r.db, r.run_id, r.seq, r.level, r.input_key)
      a, b = got[a_seed].get(rid), got[b_seed].get(rid)
      if a is None or b is None or (a["new_key"], a["error"]) == (b["new_key"], b["error"]): continue
      n += 1
      said = lambda x: x["new_key"][:16] if x["new_key"] else f"raised {x['error']}"
      r.outcome = "unstable"
      r.reason = (f"the output depends on the hash seed: PYTHONHASHSEED={a_seed} gives {said(a)}, PYTHONHASHSEED={b_seed} gives {said(b)}"
                  f"\nstored output {r.stored_key[:16]}")
      r.changes, r.change_count, r.text_diff, r.kernel_list, r.rules, r.traceback = [], 0, None, None, [], None
      if a["new_key"] and b["new_key"]:
        out_a = decode_output(r.level, (tmp / f"seed-{a_seed}" / "outputs" / a["new_key"]).read_bytes())
        out_b = decode_output(r.level, (tmp / f"seed-{b_seed}" / "outputs" / b["new_key"]).read_bytes())
        describe_diff(r, r.level, out_a, out_b, (f"PYTHONHASHSEED={a_seed}", f"PYTHONHASHSEED={b_seed}"), prefix="unstable ")  # A's output -> B's
      else: r.signature = f"unstable {r.level}: raises under one hash seed only"
    return n
  finally: shutil.rmtree(tmp, ignore_errors=True)

# *** replay suite --twice: compare the key sets of two captures of one model ***

@dataclass
class KeySetDiff:
  model: str
  seeds: tuple[int, int]
  only: dict[int, list[tuple[str, str, str]]] = field(default_factory=dict)   # seed -> (level, input, output) only that run has
  def __bool__(self) -> bool: return any(self.only.values())
  def lines(self, limit: int = 5) -> list[str]:
    a, b = self.seeds
    out = [f"  {self.model}: UNSTABLE: the captures under PYTHONHASHSEED={a} and ={b} differ "
           f"({len(self.only[a])} capture(s) only in the first run, {len(self.only[b])} only in the second)"]
    outs = {s: {(lv, ik): ok for lv, ik, ok in self.only[s]} for s in self.seeds}
    for (lv, ik), ok in sorted(outs[a].items())[:limit]:
      other = outs[b].get((lv, ik))
      out.append(f"    {lv} input {ik[:16]}: " + (f"output {ok[:16]} under seed {a}, {other[:16]} under seed {b}" if other else
                                                    f"captured only under seed {a}"))
    for (lv, ik), ok in sorted(outs[b].items())[:limit]:
      if (lv, ik) not in outs[a]: out.append(f"    {lv} input {ik[:16]}: captured only under seed {b}")
    return out

def key_set(db: Path, label: str, after_run: int = 0) -> set[tuple[str, str, str]]:
  """(level, input key, output key) of the rows `label`'s runs after run id `after_run` wrote into `db`."""
  from replay.store import Store
  s = Store(db, readonly=True, allow_empty=True)
  try: return {(r["level"], r["input_key"], r["output_key"]) for r in s.captures(label=label) if r["run_id"] > after_run}
  finally: s.close()

def last_run(db: Path) -> int:
  """The highest run id in `db` (0 when there is no store yet)."""
  from replay.store import Store, StoreError
  if not Path(db).exists(): return 0
  try: s = Store(db, readonly=True, allow_empty=True)
  except StoreError: return 0
  try: return max((r["id"] for r in s.runs()), default=0)
  finally: s.close()

def compare_key_sets(model: str, first: set, second: set, seeds: tuple[int, int]) -> KeySetDiff:
  return KeySetDiff(model, seeds, {seeds[0]: sorted(first - second), seeds[1]: sorted(second - first)})

def capture_again(name: str, target: Path, before: int, quick: bool, levels: tuple[str, ...], seeds: tuple[int, int]) -> KeySetDiff:
  """`replay suite --twice`: capture model `name` again under the second seed into a temporary store and compare its key
  set with what the first run (under the first seed) wrote into `target` (runs after `before`); false when they agree."""
  from replay.suite import run_model
  with tempfile.TemporaryDirectory(prefix="replay-twice-") as tmp:
    second = Path(tmp) / f"{name}.db"
    r = run_model(name, second, quick=quick, levels=levels, env={"PYTHONHASHSEED": str(seeds[1])})
    if not r.get("ok") or r.get("skipped"):
      raise DeterminismError(f"{name}: the second capture (PYTHONHASHSEED={seeds[1]}) failed: {r.get('error') or r.get('skipped')}",
                             f"the model itself may depend on the hash seed: run it with PYTHONHASHSEED={seeds[1]} to see")
    first = key_set(target, name, before)
    return compare_key_sets(name, first, key_set(second, name) if second.exists() else set(), seeds)

if __name__ == "__main__":
  import argparse
  ap = argparse.ArgumentParser(prog="python -m replay.determinism", description="worker of `replay check --twice`")
  sub = ap.add_subparsers(dest="cmd", required=True)
  k = sub.add_parser("keys", help="the current code's output key of every selected row (run it with PYTHONHASHSEED set)")
  k.add_argument("--out", required=True)
  k.add_argument("--level")
  k.add_argument("--label")
  k.add_argument("--key")
  k.add_argument("--shard")
  k.add_argument("dbs", nargs="+")
  ns = ap.parse_args()
  sh = tuple(int(x) for x in ns.shard.split("/")) if ns.shard else None
  _worker(ns.dbs, Path(ns.out), ns.level, ns.label, ns.key, sh)  # type: ignore[arg-type]
