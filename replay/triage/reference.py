"""Triage against the reference: blame and minimize where old and new code agree on a capture and both are wrong.

A bug older than the capture is in both versions of the code: `replay blame` finds no application where they part,
and yet the execution check says `wrong`. Then the question is not "where do old and new part" but "after which rule
application does the output stop meaning what the input means", asked of the current code alone, with the execution
check's own judge (replay/execute/judge.run_job, the same seeded inputs): a program on the device against the
interpreter running its kernel AST (code generation), a schedule's kernels against its input graph (scheduling; on any
device, the interpreter included).

- `judge(data, device, off, cap, level=...)`: the input replayed with rules `off` refused (tinysched.rewrite.rules_off),
  or with only the first k applications of one rule (`cap`, tinysched.rewrite.rule_capped), and judged: right, wrong,
  error (the replay needs a rule it was refused) or skipped (the device cannot run it).
- `blame_reference`: first a proof: every application of a symbolic-simplifier rule in the replay must be an equality,
  and z3 (replay/prove/smt.py, the device's integer semantics) names the first that is not, with a counterexample: an
  index rule wrong on an edge value is found for all values, not only those the inputs reach. Else the smallest set of
  the rules that fired (replay/check/rule_search.py: singles, pairs, ddmin) without which the output is right again;
  rules proven sound stay on (turning one off can hide the culprit, whose pattern it builds); for one rule, bisecting
  how many of its applications are admitted pins the one that makes it wrong. No such set: the wrong number is made
  outside the rules (pass code, the renderer, the runtime), and the rules the replay cannot do without are listed.
- `minimize_reference`: the input shrunk (replay/triage/shrink.py) while it stays wrong at the same output buffer and
  the blamed rules, turned off, still make it right: the same failure, not another one.

Every judge runs in a forked child (replay.process.forked): a rewrite with rules refused leaves derived results in memo
tables, and the device (OpenCL) is opened there, never in this process. replay/triage/blame.py says which inputs of a
capture are judged (reference_inputs).
"""
from __future__ import annotations
import time
from typing import Any, Callable
from tinysched import rewrite as RW
from tinysched import symbolic as SYM
from tinysched.codegen.program import to_program
from tinysched.device import Device
from tinysched.dtype import dtypes
from tinysched.uop import UOp
from replay import levels
from replay.process import forked
from replay.store.encode import decode_graph
from replay.execute.jobs import Sides
from replay.execute.judge import run_job
from replay.execute.pool import check_device
from replay.levels.program import program_input
from replay.prove import smt
from replay.triage.shrink import greedy
from replay.check.rule_search import smallest_set

MAX_RUNS = 64            # judges per blame (the set search, then the bisection over one rule's applications)

class ReferenceError(Exception):
  """The reference triage cannot run (no compiled device, nothing of the capture to lower)."""

def _show(x: Any) -> str: return x.pretty()[:600] if hasattr(x, "pretty") else repr(x)[:600]

def judge_here(data: bytes, device: str, off: tuple[str, ...] | list[str] = (), cap: tuple[str, int] | None = None,
               seed: int = 0, level: str = "program") -> dict[str, Any]:
  """One question, in this process: input `data` of `level` replayed by the current code (rules `off` refused, or only
  the first k applications of rule cap[0]) and its output judged on `device` against the reference (module docstring):
  a program against the interpreter running its AST, a schedule's kernels against its input graph."""
  lv = levels.get(level)
  inputs = lv.decode_input(data)
  full: dict[str, Any] = {}
  prev, RW.FIRED = RW.FIRED, []
  L = None
  try:
    with (RW.rule_capped(*cap) if cap else RW.rules_off(off)) as L:
      obj, out_bytes = lv.run(inputs, full)
  except Exception as e:  # noqa: BLE001 (a lowering that needs a refused rule fails: that is an answer)
    return {"verdict": "error", "why": f"{type(e).__name__}: {str(e)[:300]}"}
  finally:
    fired, RW.FIRED = RW.FIRED, prev
  counts: dict[str, int] = {}
  for name, _ in fired or []: counts[name] = counts.get(name, 0) + 1
  # both sides of the job are this output: the judge's findings are against the reference alone
  sides = Sides.given(data, out_bytes, lv.extra_of(full), {"output": obj, "inputs": inputs, **full, "identical": True})
  names: dict[str, int] = {}
  job = lv.build_job(sides, names)
  if "skip" in job: return {"verdict": "skipped", "why": job["skip"], "fired": list(counts), "counts": counts}
  res = run_job({**job, "level": level, "names": names, "seed": seed}, device, timing_runs=0)
  # both sides run the same output: what counts is a side off the reference (a program reading past an edge also
  # differs from itself between runs, which the judge reports as a mismatch or as unstable first)
  wrong = next((f for f in res.get("findings") or [] if f.get("kind") == "wrong"), None)
  v = "wrong" if wrong is not None else {"equivalent": "right", "skipped": "skipped"}.get(str(res.get("verdict")), "error")
  result: dict[str, Any] = {"verdict": v, "fired": list(counts), "counts": counts}
  if wrong is not None: result.update(buffer=wrong.get("buffer"), max_abs_err=wrong.get("max_abs_err"), n_diff=wrong.get("n_diff"),
                                      first_diff=(wrong.get("first_diff") or [])[:3])
  elif v != "right": result["why"] = res.get("reason") or res.get("error") or f"the judge said {res.get('verdict')}"
  if cap and isinstance(L, RW.RuleCap) and L.at is not None: result["at"] = [_show(L.at[0]), _show(L.at[1])]
  return result

def judge(data: bytes, device: str, off: tuple[str, ...] | list[str] = (), cap: tuple[str, int] | None = None,
          seed: int = 0, level: str = "program") -> dict[str, Any]:
  """judge_here in a forked child (module docstring); a child that died is an `error`."""
  got = forked(lambda: judge_here(data, device, off, cap, seed, level), quiet=True)
  return got if isinstance(got, dict) else {"verdict": "error", "why": "the judging process died"}

def judging_device(device: str | None, level: str = "program") -> str:
  """The device to judge on, canonical, opened in a child. A program needs a compiled device: the interpreter (NUMPY)
  judges nothing against itself there; a schedule's kernels are judged against its graph on any."""
  def probe() -> dict:
    try: return {"device": check_device(device)}
    except ValueError as e: return {"error": str(e)}
  got = forked(probe) or {"error": "the process opening the device died"}
  if "error" in got: raise ReferenceError(got["error"])
  if got["device"] == "NUMPY" and levels.get(level).lowers:
    raise ReferenceError("the reference triage runs the program on a compiled device and NUMPY is the interpreter itself: "
                         "pass --device OPENCL (or set TINYSCHED_DEVICE)")
  return str(got["device"])

def kernel_program_input(ast_data: bytes, device: str) -> bytes | None:
  """The program-level input the heuristic makes of an encoded kernel AST for `device`'s target (a kernel row without
  program-level captures), encoded as a capture stores it; None when it cannot be lowered."""
  def make() -> str | None:
    ast = decode_graph(ast_data)[0]
    target = getattr(Device[device], "target", None)
    if target is None: return None
    return program_input(ast, to_program(ast, None, target).opts, target).decode()
  got = forked(make)
  return got.encode() if isinstance(got, str) else None

PROOF_BUDGET_S = 20.0     # z3 time for the applications of one lowering (each at most 2 s)

def first_unsound_here(data: bytes, budget_s: float = PROOF_BUDGET_S, level: str = "program") -> dict[str, Any]:
  """In this process: the first application of a symbolic-simplifier rule in the replay of input `data` (of `level`) whose
  result is not equal to the node it replaced for some values in range (z3: replay/prove/smt.py, with the device's
  integer semantics), with the counterexample. Those rules see no context: each application must be an equality, so a
  refuted one is where the program starts to compute something else, proven for all values rather than run on some."""
  if not smt.available(): return {"skipped": "z3 is not installed (pip install z3-solver): no proof of the rule applications"}
  class Log(RW.RewriteLimit):
    def __init__(self) -> None:
      super().__init__(1 << 62)
      self.apps: list[tuple[str, UOp, Any]] = []
    def admit(self, name: str, u: UOp, ret: Any) -> bool:
      ok = super().admit(name, u, ret)
      if ok: self.apps.append((name, u, ret))
      return ok
  lv = levels.get(level)
  with RW.limited(Log()) as log: lv.run(lv.decode_input(data), {})
  rules, t0 = set(SYM.symbolic.rule_names()), time.perf_counter()
  done: dict[tuple, str] = {}
  sound: dict[str, bool] = {}  # rule -> every application of it in this lowering proven an equality
  proven = unknown = 0
  for i, (name, u, ret) in enumerate(log.apps):
    ok = (name in rules and isinstance(ret, UOp) and ret.dtype == u.dtype and (dtypes.is_int(u.dtype) or u.dtype == dtypes.bool)
          and time.perf_counter() - t0 <= budget_s)
    if not ok:
      sound[name] = False
      continue
    if (u.key, ret.key) not in done:
      v = smt.prove_equal(u, ret, 2000, "auto")
      done[(u.key, ret.key)] = v.status
      if v.status == "proven": proven += 1
      elif v.status == "unknown": unknown += 1
      else:
        return {"rule": name, "application": i + 1, "applications": len(log.apps), "node": _show(u), "result": _show(ret),
                "counterexample": {"values": v.values, "before": v.lhs, "after": v.rhs, "reason": v.reason}, "proven": proven}
    sound[name] = sound.get(name, True) and done[(u.key, ret.key)] == "proven"
  return {"applications": len(log.apps), "proven": proven, "unknown": unknown, "partial": time.perf_counter() - t0 > budget_s,
          "sound_rules": sorted(n for n, ok in sound.items() if ok)}

def blame_reference(data: bytes, device: str, seed: int = 0, base: dict | None = None,
                    progress: Callable[[str], None] | None = None, level: str = "program") -> dict[str, Any]:
  """Which rules make the output of input `data` compute something else than the input means (module docstring)."""
  t0, runs = time.perf_counter(), [0]
  def ask(off=(), cap=None) -> dict:
    runs[0] += 1
    return judge(data, device, off, cap, seed, level)
  base = base or ask()
  head = {"against": "reference", "device": device}
  if base["verdict"] != "wrong":
    return {**head, "verdict": "not wrong", "judged": base["verdict"], "why": base.get("why"), "runs": runs[0]}
  finding = {k: base.get(k) for k in ("buffer", "max_abs_err", "n_diff", "first_diff")}
  done = lambda **kw: {**head, **kw, "finding": finding, "runs": runs[0], "seconds": round(time.perf_counter() - t0, 2)}  # noqa: E731
  # first, a proof: the first index rewrite that is not an equality (found for every value, not only those run)
  if progress: progress("  proving the index simplifier's rewrites in this replay (z3)")
  proof = forked(lambda: first_unsound_here(data, PROOF_BUDGET_S, level)) or {"skipped": "the proving process died"}
  if proof.get("rule"):
    right = ask(off=[proof["rule"]])["verdict"] == "right"
    return done(verdict="blamed", rule=proof["rule"], rules=[proof["rule"]], application=proof["application"],
                applications=proof["applications"], node=proof["node"], result=proof["result"], counterexample=proof["counterexample"],
                how="proven: this application's result differs from the node it replaced for the values shown (z3)"
                    + ("; without the rule the output is right again" if right else ""), proven=proof.get("proven"))
  # a rule whose every application here is proven an equality changes no number itself (turned off, it may still hide
  # the culprit, whose pattern it builds): it stays on, and is no suspect
  sound = set(proof.get("sound_rules") or [])
  order = [n for n in base["fired"] if n not in sound]
  spent = lambda: runs[0] >= MAX_RUNS  # noqa: E731
  needed: list[str] = []
  def restores(off: list[str]) -> bool:
    if spent(): return False
    got = ask(off)
    if got["verdict"] == "error" and len(off) == 1: needed.append(off[0])
    return got["verdict"] == "right"
  found = smallest_set(order, restores, spent)
  if found is None:
    why = ("no rule that fired, nor a pair or a small set of them, turned off makes the output right: the wrong number is "
           "made outside the rules (pass code, the renderer or the runtime)")
    if needed: why += f"; the replay cannot run without {', '.join(needed)}, so a bug inside one of those is not told apart this way"
    if sound: why += f"; {len(sound)} rule(s) are proven sound here and were not suspected ({', '.join(sorted(sound))})"
    return done(verdict="outside rules", why=why, rules_fired=len(base["fired"]), cannot_do_without=needed,
                partial=spent(), proof=proof)
  if len(found) > 1:
    return done(verdict="blamed", rules=found, how="without them together the output is right again (no one of them alone is)",
                proof=proof)
  rule, n = found[0], int(base["counts"].get(found[0], 0))
  if progress: progress(f"  without rule {rule!r} it is right: finding which of its {n} application(s) makes it wrong")
  lo, hi, at = 0, n, None  # admitting lo applications: right (lo = 0 is the rule off); hi: wrong (all of them)
  while hi - lo > 1 and not spent():
    mid = (lo + hi) // 2
    got = ask(cap=(rule, mid))
    if got["verdict"] == "wrong": hi, at = mid, got.get("at")
    elif got["verdict"] == "right": lo = mid
    else: break  # (a half-applied rule the lowering cannot finish: the rule is still named, its application not)
  if hi - lo == 1 and at is None and hi == n: at = ask(cap=(rule, n)).get("at")
  return done(verdict="blamed", rule=rule, rules=[rule], how="without it the output is right again", proof=proof,
              application=hi if hi - lo == 1 else None, applications_of_rule=n, node=at[0] if at else None, result=at[1] if at else None)

def blamed_rules(res: dict) -> list[str] | None:
  """The rules a reference blame names (the failure a minimized candidate must keep), or None."""
  return list(res["rules"]) if res.get("verdict") == "blamed" and res.get("rules") else None

def minimize_reference(data: bytes, device: str, time_limit: float, seed: int = 0,
                       progress: Callable[[str], None] | None = None, level: str = "program") -> dict[str, Any]:
  """The smallest kernel AST (same opts and target) whose program is still wrong the same way (module docstring)."""
  t0 = time.perf_counter()
  lv = levels.get(level)
  pre, encode = lv.shrinkable(data)
  base = judge(data, device, seed=seed, level=level)
  if base["verdict"] != "wrong":
    raise ReferenceError(f"this {level} input's output is {base['verdict']} on {device}, not wrong: nothing to minimize against the reference"
                         + (f" ({base['why']})" if base.get("why") else ""))
  culprit = blame_reference(data, device, seed, base, progress, level)
  rules = blamed_rules(culprit)
  def fails(enc: bytes) -> bool | None:  # (None: right there; False: wrong elsewhere, or without the blamed rules too)
    got = judge(enc, device, seed=seed, level=level)
    if got["verdict"] != "wrong": return None
    if got.get("buffer") != base.get("buffer"): return False
    return rules is None or judge(enc, device, rules, seed=seed, level=level)["verdict"] == "right"
  start = len(pre.toposort())
  cur, cur_enc, tried, rejected = greedy(pre, data, encode, fails, t0 + time_limit, progress)
  final = judge(cur_enc, device, seed=seed, level=level)
  failure = (f"rule(s) {', '.join(rules)} (turned off, the output is right)" if rules
             else f"{culprit['verdict']}: wrong at output buffer {base.get('buffer')}")
  return {"level": level, "against": "reference", "device": device, "nodes_before": start, "nodes": len(cur.toposort()),
          "candidates_tried": tried, "rejected_other_failures": rejected, "seconds": round(time.perf_counter() - t0, 2),
          "timed_out": time.perf_counter() - t0 >= time_limit,
          "input": cur_enc.decode(), "pretty": cur.pretty(), "failure": failure, "blame": culprit, "final": final.get("verdict"),
          "seed": seed}

def repro_test(res: dict[str, Any], db: str, key: str) -> str:
  """A standalone pytest file for a minimized reference failure: what the current code makes of the minimal input must
  compute what it means on the device (a program what its AST means, a schedule's kernels what its graph means); it
  fails while the bug is there and passes once it is fixed."""
  return (f'"""Minimal input of capture {key} in {db} ({res["nodes_before"]} -> {res["nodes"]} nodes), written by `replay minimize`\n'
          f"against the reference: its {res['level']} output is wrong on {res['device']}; the same failure as the capture: {res['failure']}.\n\n"
          + "\n".join("    " + ln for ln in res["pretty"].splitlines()) + '\n"""\n'
          "import os\n"
          f"INPUT = {res['input']!r}\n"
          f"DEVICE = os.environ.get('TINYSCHED_DEVICE') or {res['device']!r}\n\n"
          "def test_it_computes_what_its_input_means():\n"
          "  from replay.triage.reference import judge_here\n"
          f"  got = judge_here(INPUT.encode(), DEVICE, seed={res['seed']}, level={res['level']!r})\n"
          "  assert got['verdict'] == 'right', got\n")

__all__ = ["blame_reference", "minimize_reference", "judge", "judge_here", "judging_device", "kernel_program_input", "ReferenceError"]
