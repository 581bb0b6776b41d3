"""`replay suite --twice`: capture a model a second time under another PYTHONHASHSEED and compare the two key sets:
an input only one run captured (the front end built a different graph), or one input with two outputs."""
from __future__ import annotations
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from replay.store.sqlite import Store, StoreError
from replay.check.determinism import DeterminismError
from replay.baseline.suite import run_model

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
  s = Store(db, readonly=True, allow_empty=True)
  try: return {(r["level"], r["input_key"], r["output_key"]) for r in s.captures(label=label) if r["run_id"] > after_run}
  finally: s.close()

def last_run(db: Path) -> int:
  """The highest run id in `db` (0 when there is no store yet)."""
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
  with tempfile.TemporaryDirectory(prefix="replay-twice-") as tmp:
    second = Path(tmp) / f"{name}.db"
    r = run_model(name, second, quick=quick, levels=levels, env={"PYTHONHASHSEED": str(seeds[1])})
    if not r.get("ok") or r.get("skipped"):
      raise DeterminismError(f"{name}: the second capture (PYTHONHASHSEED={seeds[1]}) failed: {r.get('error') or r.get('skipped')}",
                             f"the model itself may depend on the hash seed: run it with PYTHONHASHSEED={seeds[1]} to see")
    first = key_set(target, name, before)
    return compare_key_sets(name, first, key_set(second, name) if second.exists() else set(), seeds)

