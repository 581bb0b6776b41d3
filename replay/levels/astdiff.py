"""What changed between a stored output and the current one.

- `structural_diff`: deepdiff over a canonical tree of the AST, reported with readable paths such as
  `SINK.src[0].STORE.src[2].ADD.src[1]`;
- `text_diff`: a unified diff of the printed ASTs (or of the sources, at program level);
- `kernel_list_diff`: at schedule level, how the kernel list changed (counts, kernels that appeared or
  disappeared, matched by their AST keys);
- `signature`: the shape of a diff (kinds of change and where, without the values) so that a
  thousand kernels changed the same way form one group.
"""
from __future__ import annotations
import difflib, re
from typing import Any
from tinysched.ops import Ops
from tinysched.uop import UOp, stable_repr

MAX_TREE_NODES = 4000  # expanded trees bigger than this (heavy sharing) get only the text diff

def ast_tree(u: UOp, budget: list[int] | None = None) -> Any:
  """{op: {"dtype", "arg", "src": [...]}} with shared nodes expanded, so paths read like the AST."""
  budget = budget if budget is not None else [MAX_TREE_NODES]
  budget[0] -= 1
  if budget[0] < 0: raise OverflowError("tree too large")
  node: dict[str, Any] = {"dtype": repr(u.dtype)}
  if u.arg is not None: node["arg"] = stable_repr(u.arg)
  if u.src: node["src"] = [ast_tree(s, budget) for s in u.src]
  return {u.op.name: node}

_PATH_TOKEN = re.compile(r"\['([^']*)'\]|\[(\d+)\]")

def pretty_path(path: str) -> str:
  """root['SINK']['src'][0]['STORE']['src'][2] -> SINK.src[0].STORE.src[2]"""
  out = ""
  for name, idx in _PATH_TOKEN.findall(path):
    if idx: out += f"[{idx}]"
    else: out += ("." if out else "") + name
  return out

def _join(path: str, rel: str) -> str: return rel if not path else path if not rel else path + (rel if rel.startswith("[") else "." + rel)

def _deep(a: UOp, b: UOp, path: str, budget: list[int], out: list[dict[str, Any]]) -> None:
  """deepdiff over the two subtrees (where an op or a list length changes, deepdiff's pairing is the reference)."""
  from deepdiff import DeepDiff  # (here: importing deepdiff takes ~0.1 s, and only a changed output is diffed)
  dd = DeepDiff(ast_tree(a, budget), ast_tree(b, budget), verbose_level=2, cache_size=0)
  for kind in _KINDS:
    for p, change in (dd.get(kind) or {}).items():
      if isinstance(change, dict) and "old_value" in change:
        o, n = change.get("old_value"), change.get("new_value")
      elif kind.endswith("added"): o, n = None, change
      else: o, n = change, None
      out.append({"kind": kind, "path": _join(path, pretty_path(p)), "old": _brief(o), "new": _brief(n)})

def _walk(a: UOp, b: UOp, path: str, budget: list[int], out: list[dict[str, Any]]) -> None:
  """The changes between two nodes at `path`, as deepdiff reports them on their ast_trees, without walking what is the
  same: nodes are interned, so an unchanged subtree is the same object (most of a changed kernel is unchanged)."""
  if a is b: return
  budget[0] -= 1
  if budget[0] < 0: raise OverflowError("tree too large")
  if a.op is not b.op or len(a.src) != len(b.src): return _deep(a, b, path, budget, out)
  here = _join(path, a.op.name)
  da, db = repr(a.dtype), repr(b.dtype)
  if da != db: out.append({"kind": "values_changed", "path": here + ".dtype", "old": da, "new": db})
  ra, rb = (None if a.arg is None else stable_repr(a.arg)), (None if b.arg is None else stable_repr(b.arg))
  if ra != rb:
    if ra is None: out.append({"kind": "dictionary_item_added", "path": here + ".arg", "old": None, "new": rb})
    elif rb is None: out.append({"kind": "dictionary_item_removed", "path": here + ".arg", "old": ra, "new": None})
    else: out.append({"kind": "values_changed", "path": here + ".arg", "old": ra, "new": rb})
  for i, (x, y) in enumerate(zip(a.src, b.src)): _walk(x, y, f"{here}.src[{i}]", budget, out)

_KINDS = ("values_changed", "type_changes", "dictionary_item_added", "dictionary_item_removed", "iterable_item_added", "iterable_item_removed")

def structural_diff(old: UOp, new: UOp, limit: int = 50) -> list[dict[str, Any]]:
  """Changes from old to new as [{"kind", "path", "old", "new"}], at most `limit` (the count is kept by the caller):
  what deepdiff reports on the two ast_trees, found by walking only where the nodes differ."""
  out: list[dict[str, Any]] = []
  try: _walk(old, new, "", [2 * MAX_TREE_NODES], out)  # (both trees: each at most MAX_TREE_NODES, as ast_tree's budget)
  except OverflowError: return [{"kind": "too_large", "path": "", "old": None, "new": None}]
  out.sort(key=lambda c: (c["path"], c["kind"]))
  return out[:limit]

def _brief(x: Any) -> Any:
  if isinstance(x, dict) and len(x) == 1:  # a whole subtree: name its op
    (op, body), = x.items()
    return f"<{op} {body.get('dtype', '')}>"
  return x

def text_diff(old_text: str, new_text: str, old_name: str = "stored", new_name: str = "current", context: int = 3) -> str:
  """A unified diff, each line ending in a newline: a text whose last line has none (a graph's printout) would otherwise
  glue that line's `-` to the next `+` (`CONST dtypes.float 0.0+      CONST ...`), in every report."""
  def lines(t: str) -> list[str]: return [ln if ln.endswith("\n") else ln + "\n" for ln in t.splitlines(True)]
  return "".join(difflib.unified_diff(lines(old_text), lines(new_text), old_name, new_name, n=context))

def kernel_list_diff(old: list[UOp], new: list[UOp]) -> dict[str, Any]:
  """How a schedule's kernel list changed; kernels are matched by AST key, and the ones only on one side are
  described by their output shapes (what buffers they write)."""
  ok, nk = [a.key for a in old], [a.key for a in new]
  common = set(ok) & set(nk)
  removed = [i for i, k in enumerate(ok) if k not in common]
  added = [i for i, k in enumerate(nk) if k not in common]
  return {"old_count": len(old), "new_count": len(new), "unchanged": len([k for k in nk if k in common]),
          "removed": [{"index": i, "outputs": _outputs(old[i]), "ops": _op_summary(old[i])} for i in removed],
          "added": [{"index": i, "outputs": _outputs(new[i]), "ops": _op_summary(new[i])} for i in added],
          "reordered": [k for k in ok if k in common] != [k for k in nk if k in common]}

def _outputs(ast: UOp) -> list[str]:
  out = []
  for s in ast.src if ast.op is Ops.SINK else ():
    if s.op is Ops.STORE and s.src[1].op is Ops.VIEW:
      out.append(f"{s.src[0].dtype.base.name}{tuple(x if isinstance(x, int) else x.render_sym() for x in s.src[1].arg.shape)}")
  return out

def _op_summary(ast: UOp) -> str:
  ops = [x.op.name for x in ast.toposort() if x.op not in (Ops.VIEW, Ops.DEFINE_GLOBAL, Ops.SINK, Ops.STORE, Ops.LOAD, Ops.CONST)]
  return " ".join(sorted(set(ops)))

_NUM = re.compile(r"-?\d+(\.\d+)?(e[-+]?\d+)?")

def _local(path: str) -> str:
  """The last two named steps of a path, without indices' values in args: where the change happened."""
  parts = path.split(".")
  return ".".join(parts[-2:])

def signature(level: str, changes: list[dict[str, Any]], kl: dict[str, Any] | None = None) -> str:
  """The shape of a diff: kinds of change and their local place, values (shapes, constants) removed."""
  if kl is not None and (kl["removed"] or kl["added"]):
    return f"{level}: kernels {kl['old_count']}->{kl['new_count']} (" + ", ".join(sorted({r['ops'] for r in kl["removed"]})) + \
      " -> " + ", ".join(sorted({a['ops'] for a in kl["added"]})) + ")"
  items = set()
  for c in changes:
    where = _NUM.sub("#", _local(c["path"]))
    what = ""
    if c["path"].endswith(".arg") or c["path"].endswith(".dtype"): what = ""
    elif isinstance(c["old"], str) and isinstance(c["new"], str) and c["old"].startswith("<"): what = f" {c['old']}->{c['new']}"
    items.add(f"{c['kind']}@{where}{_NUM.sub('#', what)}")
  return f"{level}: " + "; ".join(sorted(items)) if items else f"{level}: output changed"

def changed_nodes(old: UOp, new: UOp) -> set[str]:
  """Keys of nodes in `new` that do not exist in `old`."""
  old_keys = {x.key for x in old.toposort()}
  return {x.key for x in new.toposort() if x.key not in old_keys}
