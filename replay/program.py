"""Program-level replay: (kernel AST, optimization choices, target) -> rendered source, with the current codegen."""
from __future__ import annotations
import re
from typing import Any
from replay.encode import IncompatibleCapture

def opts_to_json(opts) -> list[list]: return [list(o.to_tuple()) for o in opts]
# what identifies a machine rather than what code generation depends on: kept out of program-level inputs (and so
# out of their keys), so a capture made on another CPU model or driver build replays identically. The heuristic's
# compute_units only picks optimizations, which program captures store themselves.
HOST_FIELDS = ("name", "vendor", "driver_version", "compute_units", "max_alloc")

def target_to_json(target) -> dict[str, Any]:
  """The codegen-relevant description of a target: limits, vector and precision support, GPU or not."""
  d = target.to_dict()
  return {k: v for k, v in d.items() if k not in HOST_FIELDS}

def launch_json(prg) -> dict:
  """What launching a rendered Program again needs without the code generator: its name, launch sizes (symbolic
  sizes as encoded graphs), Variables in argument order, buffer dtypes. Stored with program-level captures."""
  from replay.encode import encode_graph
  def dim(g): return g if isinstance(g, int) else {"uop": encode_graph([g]).decode()}
  return {"name": prg.name, "global": [dim(g) for g in prg.global_size], "local": list(prg.local_size) if prg.local_size else None,
          "vars": [v.arg[0] for v in prg.vars],
          "var_bits": [8 * v.dtype.itemsize for v in prg.vars], "dtypes": [d.name for d in prg.buf_dtypes]}

def replay_program_full(doc):
  """`doc`: a parsed program-input document (replay.encode.parse): one AST root plus "opts" and "target"."""
  from tinysched.codegen.kernel import Opt
  from tinysched.codegen.target import Target
  from tinysched.codegen.program import to_program
  roots = doc.roots()
  if len(roots) != 1: raise IncompatibleCapture("a program input must have one AST root")
  try:
    opts = tuple(Opt.from_tuple(t) for t in doc.doc.get("opts", []))
    target = Target.from_dict(doc.doc.get("target") or {})
  except (ValueError, TypeError) as e: raise IncompatibleCapture(f"optimization choices or target unreadable: {e}") from None
  return to_program(roots[0], opts, target)

# generated names (counters) shift when a node is added or removed: compared without their numbers
_COUNTED_NAME = re.compile(r"\b(acc|alu|val|temp|cast|ridx|sidx)\d+\b")
def _unnumbered(text: str) -> str: return _COUNTED_NAME.sub(r"\1#", text)

def program_rules_behind(data: bytes, old_src: str) -> list[str]:
  """Lower the stored program input once more with provenance (tinysched/codegen/provenance.py): the rules or passes
  that made the nodes whose rendered text the stored source does not have, and whose inlined operands' texts it does
  have (the first nodes to differ, not every user above them), most frequent first. [] when it cannot say."""
  from replay.encode import parse
  from tinysched.codegen.provenance import trace_program
  try:
    doc = parse(data)
    (ast,) = doc.roots()
    from tinysched.codegen.kernel import Opt
    from tinysched.codegen.target import Target
    opts = tuple(Opt.from_tuple(t) for t in doc.doc.get("opts", []))
    _, nodes = trace_program(ast, opts, Target.from_dict(doc.doc.get("target") or {}))
  except Exception: return []  # noqa: BLE001 (an attribution that fails leaves the report without rule names, nothing more)
  old = _unnumbered(old_src)
  changed = {u for u, txt, _, _ in nodes if _unnumbered(txt) not in old}
  inlined = {u for u, _, inl, _ in nodes if inl}
  counts: dict[str, int] = {}
  for u, _, _, lbl in nodes:
    if u in changed and not any(s in changed and s in inlined for s in u.src): counts[lbl] = counts.get(lbl, 0) + 1
  return [n for n, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))][:5]
