"""The replay pipeline and the library's entry point: select rows -> replay them on the current code -> diff ->
determinism -> execution verdicts.

    from replay.check import Options, Selection, run
    rep = run(Selection(("captures/mlp_digits.db",), level="kernel"), Options(exec="changed", jobs=2))
    rep.counts()      # {"identical": ..., "changed": ..., "error": ..., "incompatible": ..., "unstable": ...}
    rep.exit_code()   # 0 nothing changed, 1 changes or wrong numbers, 2 errors or incompatible captures

`run` is what the `replay check` and `replay diff` commands, the CI gate, the pytest plugin and per-row accept call:
options travel as one typed object, and a problem the user can act on is a `CheckError` with a hint (the CLI prints it
and exits 2). The steps are modules of this package: `pool` (rows cut into chunks for worker processes), `replayer`
(one row through its level), `pairs` (`replay diff`: rows of two stores paired), `determinism` (rows replayed again
in fresh processes with another hash seed and allocation order: `unstable`), `execution` (kernels run old vs new vs the
reference), `results` (Result, Report).
"""
from __future__ import annotations
from dataclasses import dataclass
from typing import Callable
from replay import process
from replay.errors import HintedError
from replay.store.sqlite import StoreError
from replay.execute.pool import DeviceUnusable, check_device
from replay.check.results import OUTCOMES, Report, Result
from replay.check import causes, determinism, execution, pairs, pool
from replay.check.determinism import DEFAULT_SEEDS
from replay.prove import run as prove_run
from replay.prove.cache import ProofCache

EXEC_MODES = (None, "changed", "all")

@dataclass(frozen=True)
class Selection:
  """Which stored rows a check replays: the stores (`against`: `replay diff` pairs each row of `stores[0]` with the row
  of this older store that has the same input instead of replaying it), and filters on them."""
  stores: tuple[str, ...]
  level: str | None = None
  label: str | None = None
  key: str | None = None             # a prefix of the input or output key
  shard: tuple[int, int] | None = None  # (I, N): shard I of N, split by capture key
  against: str | None = None
  allow_empty: bool = False          # a selection of no row is a result, not an error; with `against`, an empty side compares

@dataclass(frozen=True)
class Options:
  """How a check runs. `exec`: None, "changed" (run changed kernels old vs new vs the reference) or "all" (every kernel);
  `determinism`: replay the changed rows, the errors and a sample of the identical rows again in a fresh process with
  another hash seed and a perturbed allocation order (outputs that differ are `unstable`; `replay check` and `replay gate`
  turn it on unless told not to); `twice`: the same with every row, in two processes (the `hash_seeds`, may be equal);
  `reoptimize`: program rows choose their optimizations with the current heuristic; `timing_runs`: per job (default 5 for
  changed kernels, 1 for a sweep of all); `perf_gate`: fail when new kernels are slower by more than this percentage."""
  jobs: int | None = None
  detail: bool = True
  reoptimize: bool = False
  determinism: bool = False
  twice: bool = False
  hash_seeds: tuple[int, int] = DEFAULT_SEEDS
  exec: str | None = None
  device: str | None = None
  timeout: float | None = None
  slower_threshold: float = 0.10
  timing_runs: int | None = None
  perf_gate: float | None = None
  progress: Callable[[int, int], None] | None = None
  prove: bool = False                # the rule proofs, and the changed captures' indexing proven (replay.prove; needs z3)
  causes: bool = True                # changed rows grouped by the rules without which their stored output comes back (check/causes.py)
  # with `causes`: the groups no rule turned off explains, named by blame with the old code (the triage layer's step,
  # replay/triage/old_causes.py attribute, handed in by the CLI: the check sits below triage)
  old_code_causes: Callable[[Report, float | None], dict] | None = None
  causes_budget: float | None = None  # seconds for each cause step (None: the replay's own time, at least each step's minimum)
  prove_timeout_ms: int = 10_000

class CheckError(HintedError):
  """A check that cannot run as asked (bad options, an unusable device, a failed determinism replay): exit 2."""

def validate(selection: Selection, options: Options) -> str | None:
  """Check what can be checked before any replay runs; returns the canonical execution device (None without exec)."""
  if options.exec not in EXEC_MODES: raise CheckError(f"exec mode {options.exec!r}: choose from changed, all")
  if options.jobs is not None and options.jobs < 1: raise CheckError(f"-j {options.jobs}: needs at least one worker")
  if selection.against is not None and (options.twice or options.determinism or options.reoptimize or selection.shard or selection.key):
    raise CheckError("comparing two stores replays nothing: --twice, --determinism, --reoptimize, --shard and --key do not apply")
  if not options.exec: return None
  try: return check_device(options.device)
  except ValueError as e:
    raise CheckError(str(e), "pick an existing device: OPENCL, OPENCL:<n> or NUMPY (`python -c 'from tinysched.runtime.opencl import "
                             "list_devices as l; print(l())'` lists OpenCL devices)") from None

def _emptied_by(s: Selection) -> str:
  """The filters of a selection that left no row, as the command line names them."""
  given = [f"--{k} {v}" for k, v in (("level", s.level), ("label", s.label), ("key", s.key)) if v is not None]
  if s.shard is not None: given.append(f"--shard {s.shard[0]}/{s.shard[1]}")
  return (" ".join(given) + " selects no capture") if given else "the stores hold no capture to compare"

def run(selection: Selection, options: Options = Options()) -> Report:
  """Replay the selected rows with the current code (or pair two stores), then check determinism and run the execution
  check as `options` ask; the Report holds every result, grouped changes and the exit code. Raises CheckError.

  SIGINT or SIGTERM (in the main thread) stop the run within a second or two (replay.process.stoppable): every helper
  process is ended and the Report returned holds what finished, `stopped` names the signal (exit code 130/143); the
  steps after the one that was stopped do not run."""
  device = validate(selection, options)
  with process.stoppable():  # (a stop before any row was replayed raises process.Stopped: there is no partial report)
    rep = _run(selection, options, device)
    rep.allow_empty = selection.allow_empty
    if (s := process.stopped()) is not None and not rep.stopped: rep.stopped = s.name
  return rep

def _run(selection: Selection, options: Options, device: str | None) -> Report:
  paths = [str(p) for p in selection.stores]
  if selection.against is not None:
    try: rep = pairs.compare(selection.against, paths[0], level=selection.level, label=selection.label, allow_empty=selection.allow_empty)
    except StoreError as e:
      raise CheckError(str(e), "pass two .db files written by `replay capture` or `replay suite`") from None
  else:
    rep = pool.check(paths, level=selection.level, label=selection.label, key=selection.key, jobs=options.jobs, shard=selection.shard,
                     detail=options.detail, progress=options.progress, exec_mode=options.exec, reoptimize=options.reoptimize)
    if rep.stopped: return rep
    if (options.twice or options.determinism) and not rep.fatal:
      # before the execution check: an unstable row is not executed (its "new" side is not one output)
      recheck = determinism.Recheck(options.hash_seeds, every_row=options.twice, reoptimize=options.reoptimize, jobs=options.jobs)
      try: rep.determinism = recheck.run(rep)
      except determinism.DeterminismError as e:
        if process.stopped() is None: raise CheckError(str(e), e.hint) from None
        rep.stopped = process.stopped().name  # type: ignore[union-attr]  # (its worker was ended by the stop)
      except process.Stopped as e: rep.stopped = e.name
      if rep.stopped: return rep
  if options.causes and options.detail and not rep.paired and any(r.outcome == "changed" for r in rep.results):
    rep.causes = causes.attribute(rep, reoptimize=options.reoptimize, budget_s=options.causes_budget)
    if options.old_code_causes is not None and not options.reoptimize and process.stopped() is None:
      if (more := options.old_code_causes(rep, options.causes_budget)): rep.causes = {**(rep.causes or {}), "old_code": more}
  if not rep.results and not rep.fatal and not selection.allow_empty and not rep.stopped:
    # a run that checked nothing must never read as "nothing changed"
    raise CheckError(f"nothing to replay: {_emptied_by(selection)} in {', '.join(paths + ([selection.against] if selection.against else []))}",
                     "check the filter (`replay stats DB` lists levels and labels), or pass --allow-empty where an empty run is expected")
  rep.perf_gate = options.perf_gate
  if options.exec:
    # every kernel of the store (exec "all") is a correctness sweep: fewer timing runs than for the changed ones, unless a
    # perf gate is to judge them (its rank test needs rounds: replay/execute/timing.py)
    runs = options.timing_runs if options.timing_runs is not None else (5 if options.exec == "changed" or options.perf_gate is not None else 1)
    # (with a perf gate, the workers judge slower at the gate's percentage: their rank test and confirmation then decide it)
    threshold = options.perf_gate / 100 if options.perf_gate is not None else options.slower_threshold
    try: execution.exec_report(rep, mode=options.exec, device=device, slower_threshold=threshold, progress=options.progress,
                     timing_runs=runs, timeout_s=options.timeout)
    except DeviceUnusable as e:
      raise CheckError(str(e), "check the device with `replay check --exec --device NUMPY`, or run without --exec") from None
    except process.Stopped as e: rep.stopped = e.name  # stopped while it set up (opening stores, building jobs)
    if (s := process.stopped()) is not None: rep.stopped = s.name
    if rep.stopped: return rep
  if options.prove:
    # every integer rule (cached while the code is unchanged) and the changed captures' indexing: a counterexample fails
    changed = {(r.db, r.level, r.input_key) for r in rep.results if r.outcome == "changed"}
    try: proofs = prove_run.run(paths, do_captures=bool(changed), rows=changed, timeout_ms=options.prove_timeout_ms, cache=ProofCache())
    except process.Stopped as e:
      rep.stopped = e.name
      return rep
    rep.proofs = proofs.to_json()
  return rep

__all__ = ["CheckError", "OUTCOMES", "Options", "Report", "Result", "Selection", "run", "validate"]
