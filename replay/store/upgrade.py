"""Versions of the stored graph format and the steps that carry an older document to today's.

Why: a refactor of the IR (an op renamed or split, an argument restructured) changes what the encoder writes. Without
a way to read the documents written before it, the whole committed baseline would turn `incompatible` exactly when
replay matters most, and the refactor could never be checked against the behaviour before it.

The rule: `VERSION` (replay/store/encode.py) moves by one with every change to what the stored form sees: an op added,
removed or renamed, a change of which sources or argument an op takes (tinysched/opspec.py), a dtype added or renamed,
or a change of how the encoder writes a node or an argument. `schema_fingerprint()` summarizes all of that; `SCHEMAS`
records it per version, and tests/replay/test_upgrade.py fails when the code's fingerprint is not the one recorded for
VERSION, with the skeleton of the step to write (the hint names what changed).

A step is a small, registered, pure function from a version-N document (JSON, as stored) to version N+1, written here
beside the others when the IR change that needs it is made: rename ops (`rename_ops`), restructure an op's argument
(`map_args`), split an op into several or insert one (`replace_nodes`, which renumbers every reference). Decoding an
older document applies the chain (replay/store/encode.py `parse`), so inputs replay through today's code, and a stored
output is compared in today's form (`in_todays_form`). A missing step makes the document `incompatible`, and the
message names the step to write. `replay upgrade DB...` rewrites stores to the current version (replay/store/migrate.py).
"""
from __future__ import annotations
import copy, dataclasses, hashlib, json
from dataclasses import dataclass
from typing import Any, Callable

class UpgradeError(ValueError):
  """A document that no registered chain of steps carries to today's version (replay/store/encode.py makes it an
  IncompatibleCapture)."""

@dataclass(frozen=True)
class Step:
  version: int                          # it reads documents of this version and writes version + 1
  what: str                             # the IR change it follows, in a line
  fn: Callable[[dict], dict]            # pure: a new document from the old one (never edits its argument)

STEPS: dict[int, Step] = {}

def step(version: int, what: str) -> Callable[[Callable[[dict], dict]], Callable[[dict], dict]]:
  """Register `fn` as the step from `version` to `version + 1` (one per version: a second is a bug)."""
  def register(fn: Callable[[dict], dict]) -> Callable[[dict], dict]:
    if version in STEPS: raise ValueError(f"two upgrade steps from version {version}: {STEPS[version].what!r} and {what!r}")
    STEPS[version] = Step(version, what, fn)
    return fn
  return register

def skeleton(version: int, what: str = "what the IR change was") -> str:
  """The code of a step to write, for a hint."""
  return (f"@step({version}, {what!r})\ndef _v{version}_to_v{version + 1}(doc: dict) -> dict:\n"
          f"  return rename_ops(doc, {{'OLD_NAME': 'NEW_NAME'}})  # or map_args(doc, 'OP', fn), replace_nodes(doc, fn) to split an op")

def upgrade(doc: dict, to: int) -> dict:
  """`doc` carried to version `to` through the registered steps (the same object when it is there already); raises
  UpgradeError naming the missing step, or a step that failed or did not move the version."""
  v = doc.get("version")
  if type(v) is not int or v > to: return doc  # not ours to judge: the decoder says what is wrong with the version
  while v < to:
    if (s := STEPS.get(v)) is None:
      raise UpgradeError(f"format version {v} is older than this code's ({to}) and no upgrade step from {v} to {v + 1} is registered; "
                         f"add it in replay/store/upgrade.py, e.g.\n{skeleton(v)}")
    try: out = s.fn(copy.deepcopy(doc))
    except Exception as e:  # noqa: BLE001 (a step meets a document it was not written for: the document is incompatible)
      raise UpgradeError(f"upgrade step {v} -> {v + 1} ({s.what}) failed on this document: {type(e).__name__}: {e}") from None
    if type(out) is not dict: raise UpgradeError(f"upgrade step {v} -> {v + 1} ({s.what}) returned a {type(out).__name__}, not a document")
    doc, v = {**out, "version": v + 1}, v + 1
  return doc

# *** what steps are made of ***

def rename_ops(doc: dict, names: dict[str, str]) -> dict:
  """Every node whose op is a key of `names` renamed (inside views' symbolic integers too: they are nodes of the list)."""
  return {**doc, "nodes": [[names.get(n[0], n[0]), *n[1:]] if isinstance(n, list) and n else n for n in doc.get("nodes", [])]}

def map_args(doc: dict, op: str, fn: Callable[[Any], Any]) -> dict:
  """The argument of every `op` node replaced by fn(argument) (arguments are the stored, typed JSON: {"t": [...]} a tuple)."""
  return {**doc, "nodes": [[n[0], n[1], n[2], fn(n[3])] if isinstance(n, list) and len(n) == 4 and n[0] == op else n
                           for n in doc.get("nodes", [])]}

def replace_nodes(doc: dict, fn: Callable[[list], list[list] | None]) -> dict:
  """Each node replaced by the nodes fn(node) returns (None: kept as it is), for a step that splits an op into two or
  inserts one: the last returned node takes the old node's place (whatever referred to it refers to it), and a source
  or {"u": k} reference in a returned node is an index of the *old* document, or {"new": j}, the j-th node returned
  before it. Every reference of the document (sources, {"u": i} inside arguments, roots, var_vals, assigns) is
  renumbered. The result keeps sources before their users."""
  where: list[int] = []   # old index -> new index
  nodes: list[Any] = []
  def moved(i: Any, local: list[int] | None = None) -> Any:
    if isinstance(i, dict) and set(i) == {"new"} and local is not None: return local[i["new"]]
    return where[i] if type(i) is int and 0 <= i < len(where) else i  # (a bad reference stays bad: the decoder says so)
  def args(a: Any, local: list[int] | None) -> Any:
    if isinstance(a, dict) and len(a) == 1 and "u" in a: return {"u": moved(a["u"], local)}
    if isinstance(a, dict): return {k: args(v, local) for k, v in a.items()}
    if isinstance(a, list): return [args(v, local) for v in a]
    return a
  for n in doc.get("nodes", []):
    out = fn(copy.deepcopy(n)) if isinstance(n, list) and len(n) == 4 else None
    local: list[int] = []
    for m in (out if out is not None else [n]):
      nodes.append([m[0], m[1], [moved(x, local) for x in m[2]], args(m[3], local)] if isinstance(m, list) and len(m) == 4 else m)
      local.append(len(nodes) - 1)
    where.append(len(nodes) - 1)
  out_doc = {**doc, "nodes": nodes, "roots": [moved(r) for r in doc.get("roots", [])]}
  if isinstance(doc.get("var_vals"), list): out_doc["var_vals"] = [[moved(p[0]), *p[1:]] if isinstance(p, list) and p else p for p in doc["var_vals"]]
  if isinstance(doc.get("assigns"), list): out_doc["assigns"] = [moved(b) for b in doc["assigns"]]
  return out_doc

# *** the schema the stored form sees, per version ***

def schema(ops: Any = None, specs: Any = None, dtype_names: Any = None) -> dict:
  """What the stored form sees of the IR: op names, for each op with an entry in the op table its source counts and the
  argument it takes, the dtype names, a target's field names and the scheduler flags' names. (The defaults: this code's.)"""
  from tinysched.ops import Ops  # (at use: importing the IR is the caller's business, this module is plain data otherwise)
  from tinysched.opspec import SPECS  # (as above)
  from tinysched.dtype import ALL  # (as above)
  from tinysched.codegen.target import Target  # (as above)
  from tinysched.schedule import SCHEDULE_FLAGS  # (as above)
  ops = ops if ops is not None else Ops
  specs = specs if specs is not None else SPECS
  dts = sorted(dtype_names if dtype_names is not None else {d.name for d in ALL})
  table = {o.name: {"sources": sorted(len(f.src) if f.more is None else f"{len(f.src)}+" for f in specs[o].forms)
                    if o in specs else None, "arg": specs[o].arg.says if o in specs else None} for o in ops}
  # a program input's target (its fields) and a schedule input's flags are stored by name too
  return {"ops": dict(sorted(table.items())), "dtypes": dts, "target": sorted(f.name for f in dataclasses.fields(Target)),
          "flags": sorted(SCHEDULE_FLAGS)}

def schema_fingerprint(s: dict | None = None) -> str:
  return hashlib.sha256(json.dumps(s if s is not None else schema(), sort_keys=True).encode()).hexdigest()[:16]

def schema_changes(old_ops: list[str], s: dict | None = None) -> list[str]:
  """What differs between a recorded version's op names and the code's (for the hint)."""
  now = list((s if s is not None else schema())["ops"])
  added, gone = sorted(set(now) - set(old_ops)), sorted(set(old_ops) - set(now))
  return ([f"ops added: {', '.join(added)}"] if added else []) + ([f"ops gone: {', '.join(gone)}"] if gone else [])

# version -> (fingerprint, op names) of the schema the encoder of that version wrote
# (version 1's fingerprint moved from f846790a90ddb7f1 when Target gained `tensor_cores`, an optional field: written only
# when set, so every document of version 1 reads as before, with the field's default. No step: nothing to rewrite.)
SCHEMAS: dict[int, tuple[str, tuple[str, ...]]] = {
  1: ("7b4efd1e2e8fa1bb", ("ADD", "AND", "ASSIGN", "BARRIER", "BIND", "BITCAST", "BUFFER", "BUFFER_VIEW", "CAST", "CMPLT", "CMPNE", "CONST",
                           "CONTIGUOUS", "COPY", "DEFINE_ACC", "DEFINE_GLOBAL", "DEFINE_LOCAL", "DEFINE_VAR", "EMPTY", "ENDIF", "ENDRANGE",
                           "EXP2", "GEP", "IDIV", "IF", "INDEX", "LOAD", "LOG2", "MAX", "MOD", "MUL", "MULACC", "NEG", "OR", "PRELOAD",
                           "RANGE", "RECIP", "REDUCE_AXIS", "SHL", "SHR", "SIN", "SINK", "SPECIAL", "SQRT", "STORE", "VALID", "VECTORIZE",
                           "VIEW", "WHERE", "XOR")),
}

# *** the steps, oldest first (none yet: version 1 is the first format) ***
