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

The worker (`python -m replay.check.determinism keys ...`) writes one JSON file of keys and every output's bytes (named by
key) into a temporary folder that the parent removes.
"""
from __future__ import annotations
import json, os, shutil, subprocess, sys, tempfile
from pathlib import Path
from typing import Any
from tinysched import capture_hook
from replay import levels
from replay.errors import HintedError
from replay.process import parent_death_signal
from replay.store.encode import key_of
from replay.store.sqlite import Store
from replay.check.pool import _select
from replay.check.replayer import describe_diff

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
            _, data = levels.get(row["level"]).replay_output(store.blob(row["input_key"]))
            got["new_key"] = key_of(data)
            f = out / "outputs" / got["new_key"]
            if not f.exists(): f.write_bytes(data)
          except Exception as e:  # noqa: BLE001 (an input that cannot be read or run: compared as text between the processes)
            got["error"] = f"{type(e).__name__}: {e}".splitlines()[0][:300]
          memo[k] = got
        rows.append({"db": str(store.path), "run_id": row["run_id"], "seq": row["seq"], "level": row["level"], "input_key": row["input_key"],
                     **memo[k]})
    finally: store.close()
  (out / "keys.json").write_text(json.dumps(rows, sort_keys=True))

def _worker_env(seed: int) -> dict[str, str]:
  env = {k: v for k, v in os.environ.items() if not k.startswith("TINYSCHED_CAPTURE")}  # replaying must not capture
  env["PYTHONHASHSEED"] = str(seed)
  return env

def _run_workers(paths: list[str], tmp: Path, seeds: tuple[int, int], filters: list[str], timeout: float | None) -> dict[int, dict[RowId, dict]]:
  procs = []
  try:
    for s in seeds:
      cmd = [sys.executable, "-m", "replay.check.determinism", "keys", "--out", str(tmp / f"seed-{s}"), *filters, "--", *paths]
      procs.append((s, subprocess.Popen(cmd, env=_worker_env(s), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                        preexec_fn=parent_death_signal())))
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
        lv = levels.get(r.level)
        out_a = lv.decode_output((tmp / f"seed-{a_seed}" / "outputs" / a["new_key"]).read_bytes())
        out_b = lv.decode_output((tmp / f"seed-{b_seed}" / "outputs" / b["new_key"]).read_bytes())
        describe_diff(r, lv, out_a, out_b, (f"PYTHONHASHSEED={a_seed}", f"PYTHONHASHSEED={b_seed}"), prefix="unstable ")  # A's output -> B's
      else: r.signature = f"unstable {r.level}: raises under one hash seed only"
    return n
  finally: shutil.rmtree(tmp, ignore_errors=True)

if __name__ == "__main__":
  import argparse  # the worker's own command line
  ap = argparse.ArgumentParser(prog="python -m replay.check.determinism", description="worker of `replay check --twice`")
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
