"""Replaying one stored capture through the current code.

Outcomes: `identical` (same output key), `changed` (a different output: diffs attached), `error` (the
current code raised: the traceback is kept), `incompatible` (the stored input cannot be decoded by this
code: the reason is kept), `unstable` (only with `replay check --twice`, set by replay/determinism.py: the same
input gave different outputs in processes with different PYTHONHASHSEED). Replaying never writes to the store.

Blame: only an exception raised while running the current code on a decoded input is an `error` (a regression
to fix). A stored input or output that cannot be read or decoded, for whatever reason, is `incompatible`: a bad
capture must never read as the user's bug, nor as a reviewable change that `[replay:accept]` could wave through.
"""
from __future__ import annotations
import json, traceback
from dataclasses import dataclass, field, asdict
from typing import Any
from tinysched import capture_hook
from tinysched.uop import UOp
from replay.encode import IncompatibleCapture, decode_kernel_input, decode_schedule_input, decode_graph, encode_graph, key_of, parse
from replay.store import Store
from replay import diff as D

OUTCOMES = ("identical", "changed", "error", "incompatible", "unstable")
# past these sizes a changed output gets no structural/text diff (printing a deep chain is quadratic, deepdiff and
# the rule trace grow with it): the report says so. Real kernel outputs are far below (the committed baseline's
# largest: 881 nodes, depth 36).
DETAIL_NODE_LIMIT = 20_000
DETAIL_DEPTH_LIMIT = 500

@dataclass
class Result:
  db: str
  run_id: int
  seq: int
  level: str
  label: str
  input_key: str
  stored_key: str
  new_key: str | None = None
  outcome: str = "identical"
  reason: str | None = None            # incompatible: why; error: the exception line
  traceback: str | None = None
  changes: list[dict] = field(default_factory=list)
  change_count: int = 0
  text_diff: str | None = None
  kernel_list: dict | None = None
  signature: str | None = None
  rules: list[str] = field(default_factory=list)
  metadata: str | None = None
  exec: dict | None = None             # filled by the execution check
  pair: dict | None = None             # replay diff: {"old_db", "old": [run_id, seq], "new": [run_id, seq]} of the two stored rows
  note: str | None = None              # replay check --reoptimize: why a program row was replayed with its stored opts
  def to_dict(self) -> dict[str, Any]: return asdict(self)

def decode_input(level: str, data: bytes) -> Any:
  """The stored input, decoded (raises IncompatibleCapture): what `run_input` runs."""
  if level == "kernel": return decode_kernel_input(data)
  if level == "schedule": return decode_schedule_input(data)
  if level == "program":
    d = parse(data)
    if len(d.roots()) != 1: raise IncompatibleCapture("a program input must have one AST root")
    return d
  raise IncompatibleCapture(f"unknown capture level {level!r}")

def run_input(level: str, inputs: Any, full: dict | None = None, memo: Any = None, reoptimize: bool = False,
              host: dict | None = None) -> tuple[Any, bytes]:
  """Run the current code on a decoded input: (new output object, its canonical bytes). `full` (a dict) receives what
  the output alone does not hold and the execution check needs: the buffer maps of kernels, the Variables the
  scheduler bound, the rendered Program. `memo`: a scheduler KernelMemo shared by the rows one worker replays (kernel
  rewrites are pure: a model's captures share most kernels, and each distinct one is rewritten once). `reoptimize`
  (program level; other levels ignore it): choose the opts with the current heuristic for the stored AST and the target
  completed with `host` (the row's extra["host"]) instead of rendering the stored opts (replay/program.py)."""
  if level == "kernel":
    from tinysched.schedule import full_ast_rewrite
    pre, var_vals, assigns = inputs
    ast, ctx = full_ast_rewrite(pre, var_vals, assigns, memo)
    if full is not None: full["bufs"] = [b.arg[0] for b in ctx.bufs]
    return ast, encode_graph([ast])
  if level == "schedule":
    from tinysched.schedule import schedule_graph
    big_graph, var_vals, flags = inputs
    kernels, vv = schedule_graph(big_graph, var_vals, flags, memo)
    if full is not None: full.update(kernels=kernels, var_vals=vv)
    asts = [k.ast for k in kernels]
    return asts, _encode_list(asts)
  from replay.program import replay_program_full
  prg = replay_program_full(inputs, reoptimize, host)
  if full is not None: full["program"] = prg
  return prg.src, prg.src.encode()

def replay_output(level: str, data: bytes) -> tuple[Any, bytes]:
  """Run the current code on a stored input: (new output object, its canonical bytes)."""
  return run_input(level, decode_input(level, data))

def _encode_list(asts: list[UOp]) -> bytes:
  if asts: return encode_graph(asts)
  from replay.encode import canonical_bytes
  return canonical_bytes({"format": "tinysched-uop", "version": 1, "nodes": [], "roots": []})

def decode_output(level: str, data: bytes) -> Any:
  """A stored output (raises IncompatibleCapture)."""
  if level == "kernel":
    roots = decode_graph(data)
    if len(roots) != 1: raise IncompatibleCapture(f"a kernel output must have one root, has {len(roots)}")
    return roots[0]
  if level == "schedule": return _decode_list(data)
  try: return data.decode()
  except UnicodeDecodeError as e: raise IncompatibleCapture(f"stored source is not UTF-8 ({e})") from None

def _decode_list(data: bytes) -> list[UOp]:
  d = parse(data)
  if not d.doc.get("roots"): return []
  return d.roots()

def row_host(row: dict) -> dict | None:
  """The host facts a program row recorded at capture (extra["host"]), or None (rows captured before they were)."""
  try: host = json.loads(row.get("extra") or "{}").get("host")
  except (ValueError, AttributeError): return None
  return host if isinstance(host, dict) else None

def opts_given(row: dict) -> bool:
  """Whether a program row's opts were given by the caller (a test, a search), not chosen by the heuristic."""
  try: return bool(json.loads(row.get("extra") or "{}").get("opts_given"))
  except (ValueError, AttributeError): return False

def replay_row(store: Store, row: dict, detail: bool = True, full: dict | None = None, memo: Any = None, reoptimize: bool = False) -> Result:
  """Replay one stored row with the current code. `full`, `memo`: see run_input (`full` is filled when the current
  code ran). `reoptimize`: program rows choose their opts again with the current heuristic; a row without host facts
  (captured before extra["host"] was recorded) is replayed with its stored opts and says so in `note`; a changed row
  names the stored and the chosen opts first in its diff and signature ("opts changed: A -> B")."""
  res = Result(str(store.path), row["run_id"], row["seq"], row["level"], row["label"] or "", row["input_key"], row["output_key"],
               metadata=row.get("metadata"))
  def incompatible(why: str) -> Result:
    res.outcome, res.reason = "incompatible", why
    return res
  if row.get("_invalid"): return incompatible(row["_invalid"])
  with capture_hook.paused():  # replaying must not capture itself
    try: inputs = decode_input(row["level"], data := store.blob(row["input_key"]))
    except IncompatibleCapture as e: return incompatible(str(e))
    except Exception as e:  # noqa: BLE001 (the decoder raises only IncompatibleCapture; anything else is still the input's fault)
      return incompatible(f"stored input cannot be decoded ({type(e).__name__}: {e})")
    if full is not None: full["inputs"] = inputs  # the execution check's job builder needs them too (replay.execcheck)
    reopt, host = reoptimize and row["level"] == "program" and not opts_given(row), None
    if reopt and (host := row_host(row)) is None:
      from replay.program import NO_HOST_NOTE
      reopt, res.note = False, NO_HOST_NOTE
    if reopt and full is None: full = {}  # the chosen opts are in the Program
    try: new, new_bytes = run_input(row["level"], inputs, full, memo, reopt, host)
    except IncompatibleCapture as e: return incompatible(str(e))
    except Exception as e:  # the code under test raised: that is the finding, keep going
      res.outcome, res.reason, res.traceback = "error", f"{type(e).__name__}: {e}", traceback.format_exc()
      return res
    if full is not None: full["output"] = new
    res.new_key = key_of(new_bytes)
    if res.new_key == row["output_key"]: return res
    # a different output is only a reviewable change if the stored one can be read: otherwise nobody can say what changed
    try: old = decode_output(res.level, store.blob(res.stored_key))
    except Exception as e:  # noqa: BLE001 (as for inputs)
      why = str(e) if isinstance(e, IncompatibleCapture) else f"{type(e).__name__}: {e}"
      res.signature = f"{res.level}: stored output unreadable"
      return incompatible(f"stored output unreadable: {why}")
    res.outcome = "changed"
    if detail: describe_change(store, res, new, data, old, reopt, full)
    return res

def _too_big(graphs: list[UOp]) -> str | None:
  """Why the graphs are too big for a detailed diff, or None; stops counting at the limits (bounded work)."""
  seen: set[UOp] = set()
  stack = list(graphs)
  while stack:
    u = stack.pop()
    if u in seen: continue
    seen.add(u)
    if len(seen) > DETAIL_NODE_LIMIT: return f"more than {DETAIL_NODE_LIMIT} nodes"
    stack.extend(u.src)
  depth: dict[UOp, int] = {}
  for g in graphs:
    for u in g.toposort():
      if u not in depth: depth[u] = 1 + max((depth[s] for s in u.src), default=0)
  if depth and max(depth.values()) > DETAIL_DEPTH_LIMIT: return f"deeper than {DETAIL_DEPTH_LIMIT} levels"
  return None

def describe_change(store: Store, res: Result, new: Any, data: bytes, old: Any, reoptimized: bool = False, full: dict | None = None) -> None:
  """Diffs of a changed capture: `old` is the decoded stored output (the callers have read it: one that cannot be read
  is `incompatible`, never described). `reoptimized`: a program row whose opts were chosen again (`full["program"]`
  holds them): stored vs chosen opts lead the diff and the signature."""
  too_big = (f"(no detailed diff: the stored or the current output has {{why}}; stored output {res.stored_key[:16]}, "
             f"current {(res.new_key or '')[:16]}; look at both with `replay show`)")
  opts_line = None
  if reoptimized and full is not None and "program" in full:
    from replay.program import stored_opts, opts_text
    try: was = stored_opts(parse(data))
    except Exception: was = None  # noqa: BLE001 (decoded once already: only the line is lost)
    now = tuple(full["program"].opts)
    if was is not None and tuple(was) != now: opts_line = f"opts changed: {opts_text(was)} -> {opts_text(now)}"
    elif was is not None: opts_line = f"opts unchanged ({opts_text(now)})"
  if not describe_diff(res, res.level, old, new, too_big=too_big): return  # (too large: kernel and schedule outputs only)
  if opts_line:
    res.text_diff = f"{opts_line}\n{res.text_diff or ''}"
    res.signature = (res.signature or "").replace("program: ", f"program: {opts_line}; ", 1)
    if opts_line.startswith("opts changed"):
      res.rules = ["heuristic (tinysched/codegen/heuristic.py choose_opts)"]  # the source follows from the new opts
      return
  # the rules (scheduler) or passes/rules (codegen) that made the changed nodes
  if res.level == "kernel": res.rules = rules_behind(data, old)
  elif res.level == "program":
    from replay.program import program_rules_behind
    res.rules = program_rules_behind(data, old)

def describe_diff(res: Result, level: str, old: Any, new: Any, names: tuple[str, str] = ("stored", "current"), prefix: str = "",
                  too_big: str = "(no detailed diff: an output has {why})") -> bool:
  """The diff from output `old` to output `new` (decoded, of `level`) into `res`: deepdiff paths, the printed or source
  diff, the group signature (prefixed by `prefix`). False when the outputs are too large for a detailed diff (said so)."""
  if level in ("kernel", "schedule"):
    graphs = ([old, new] if level == "kernel" else [*old, *new])
    if (why := _too_big(graphs)) is not None:
      res.signature = f"{level}: {prefix or 'output '}changed (too large for a detailed diff)"
      res.text_diff = too_big.format(why=why)
      return False
  if level == "kernel":
    res.changes = D.structural_diff(old, new)
    res.change_count = len(res.changes)
    res.text_diff = D.text_diff(old.pretty(), new.pretty(), *names)
    res.signature = prefix + D.signature("kernel", res.changes)
  elif level == "schedule":
    res.kernel_list = D.kernel_list_diff(old, new)
    changes: list[dict] = []
    if len(old) == len(new):
      for i, (a, b) in enumerate(zip(old, new)):
        if a is not b: changes += [{**c, "path": f"kernel[{i}].{c['path']}"} for c in D.structural_diff(a, b)]
    res.changes, res.change_count = changes[:50], len(changes)
    res.text_diff = D.text_diff("\n\n".join(a.pretty() for a in old), "\n\n".join(b.pretty() for b in new), *names)
    res.signature = prefix + D.signature("schedule", [{**c, "path": c["path"].split(".", 1)[-1]} for c in changes], res.kernel_list)
  else:
    # the signature normalizes names and constants (one rename: one group)
    from replay.program import source_signature
    res.text_diff = D.text_diff(old, new, *names)
    res.signature = prefix + "program: " + source_signature(old, new)
  return True

def rules_behind(data: bytes, old: UOp) -> list[str]:
  """Replay the kernel once more with rule tracing on: the rules whose results are nodes of the new AST that
  the stored AST does not have are the ones that made the difference (most frequent first)."""
  from tinysched import rewrite
  from tinysched.schedule import full_ast_rewrite
  from replay.encode import decode_kernel_input
  trace: list = []
  prev, rewrite.TRACE = rewrite.TRACE, trace
  try:
    pre, vv, asg = decode_kernel_input(data)
    new, _ = full_ast_rewrite(pre, vv, asg)
  except Exception: return []
  finally: rewrite.TRACE = prev
  fresh = D.changed_nodes(old, new)
  counts: dict[str, int] = {}
  for name, _, after in trace:
    if after.key in fresh: counts[name] = counts.get(name, 0) + 1
  return [n for n, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))][:5]
