"""Drawings of kernel ASTs for the HTML report: the stored and the current graph of a changed capture, side by side,
with the changed nodes marked, laid out and rendered to SVG by graphviz's `dot` (the optional `graphs` extra: the
`graphviz` Python package plus the `dot` program, Debian's `graphviz` package).

Marks: a node at a path where deepdiff found the change (its arg or dtype changed, a source was replaced, added or
removed) is `changed`; any other node that only one side has (a user above a change) is `affected`.

Nothing here raises for a missing or broken graphviz: `Unavailable` says why, and the report prints that instead of
the drawings. The same input gives the same SVG text (node names follow the graph's toposort; no ids, no times).
"""
from __future__ import annotations
import re
from dataclasses import dataclass, field
from typing import Any, Sequence
from tinysched import capture_hook
from tinysched.ops import Ops
from tinysched.uop import UOp, stable_repr
from replay import levels
from replay.levels import astdiff as D
from replay.store.encode import key_of
from replay.store.sqlite import Store

DRAW_NODE_LIMIT = 400   # a graph with more nodes is not drawn (dot's layout and the SVG grow fast): the report says so
LABEL_ARG = 44          # characters of an arg in a node's label (the whole arg is its tooltip)
KERNELS_PER_SCHEDULE = 4  # changed kernel pairs drawn per schedule-level capture
COLORS = {"changed": ("#f6b4ae", "#b3261e"), "affected": ("#fdf0c8", "#a07a00"), None: ("#ffffff", "#5f6368")}
INSTALL_HINT = "install graphviz: `apt-get install graphviz` (the dot program) and `pip install tinysched[graphs]`"

class Unavailable(Exception):
  """graphviz cannot draw here (the package or `dot` is missing, or dot failed): the message says which."""

def dot_status() -> str | None:
  """None when graphviz can draw; else why not, with what to install."""
  try: render_svgs(["digraph probe { a }"])
  except Unavailable as e: return str(e)
  return None

def render_svgs(sources: Sequence[str]) -> list[str]:
  """DOT sources -> SVG texts (one `dot` run for all of them), each without its XML prologue, ready to inline in HTML."""
  if not sources: return []
  try: import graphviz  # optional: only the HTML report's drawings need it (Unavailable says what to install)
  except ImportError: raise Unavailable(f"the graphviz Python package is not installed; {INSTALL_HINT}") from None
  try: out = graphviz.pipe("dot", "svg", "\n".join(sources).encode(), quiet=True).decode()
  except graphviz.ExecutableNotFound: raise Unavailable(f"graphviz's `dot` program is not on PATH; {INSTALL_HINT}") from None
  except Exception as e: raise Unavailable(f"dot failed: {type(e).__name__}: {str(e).strip()[:300]}") from None  # noqa: BLE001
  svgs = [s[s.index("<svg"):].strip() for s in out.split("<?xml")[1:] if "<svg" in s]
  if len(svgs) != len(sources): raise Unavailable(f"dot returned {len(svgs)} drawings for {len(sources)} graphs")
  return svgs

def _walk(root: UOp, path: str) -> UOp | None:
  """The node a deepdiff path (`SINK.src[0].STORE.src[2].ADD.arg`) ends at, or the deepest one it reaches on this side."""
  steps = path.split(".")
  if not steps or steps[0] != root.op.name: return None
  node = root
  for step in steps[1:]:
    m = re.fullmatch(r"src\[(\d+)\]", step)
    if m is None: continue  # an op name (checked by the next index) or arg/dtype: the change is at `node`
    i = int(m[1])
    if i >= len(node.src): return node  # a source added or removed: its parent is what changed on this side
    node = node.src[i]
  return node

def marks(old: UOp, new: UOp) -> tuple[dict[UOp, str], dict[UOp, str]]:
  """(marks of the stored graph's nodes, marks of the current graph's nodes): `changed` or `affected`, see the module."""
  changes = D.structural_diff(old, new, limit=1000)
  m_old: dict[UOp, str] = {}
  m_new: dict[UOp, str] = {}
  for c in changes:
    if c["kind"] == "too_large": break
    if (u := _walk(old, c["path"])) is not None: m_old[u] = "changed"
    if (u := _walk(new, c["path"])) is not None: m_new[u] = "changed"
  old_keys, new_keys = {u.key for u in old.toposort()}, {u.key for u in new.toposort()}
  for u in old.toposort():
    if u.key not in new_keys: m_old.setdefault(u, "affected")
  for u in new.toposort():
    if u.key not in old_keys: m_new.setdefault(u, "affected")
  return m_old, m_new

def _label_arg(u: UOp) -> str:
  if u.arg is None: return ""
  if u.op is Ops.VIEW and hasattr(u.arg, "views"):
    v = u.arg.views[-1]
    off = "" if isinstance(v.offset, int) and v.offset == 0 else f" +{stable_repr(v.offset)}"  # (an offset may be symbolic)
    s = f"shape {stable_repr(v.shape)} strides {stable_repr(v.strides)}{off}" + (" mask" if v.mask is not None else "")
    s += f" ({len(u.arg.views)} views)" if len(u.arg.views) > 1 else ""
  else: s = stable_repr(u.arg)
  return s if len(s) <= LABEL_ARG else s[:LABEL_ARG - 1] + "…"

def ast_dot(root: UOp, node_marks: dict[UOp, str], name: str) -> str:
  """The DOT source of one AST (sources below their users), nodes filled by their mark."""
  import graphviz  # optional: only the HTML report's drawings need it
  g = graphviz.Digraph(name, graph_attr={"rankdir": "BT", "fontname": "Helvetica", "nodesep": "0.2", "ranksep": "0.3"},
                       node_attr={"shape": "box", "style": "rounded,filled", "fontname": "Helvetica", "fontsize": "10"},
                       edge_attr={"fontname": "Helvetica", "fontsize": "8", "color": "#80868b", "arrowsize": "0.6"})
  order = root.toposort()
  ids = {u: f"n{i}" for i, u in enumerate(order)}
  for u in order:
    mark = node_marks.get(u)
    fill, line = COLORS[mark]
    label = "\n".join(graphviz.escape(x) for x in (u.op.name, repr(u.dtype).replace("dtypes.", ""), _label_arg(u)) if x)
    tip = f"{u.op.name} {u.dtype!r}" + (f" {stable_repr(u.arg)}" if u.arg is not None else "") + (f" [{mark}]" if mark else "")
    g.node(ids[u], label=label, fillcolor=fill, color=line, penwidth="2.2" if mark == "changed" else "1",
           tooltip=graphviz.escape(tip[:600]), **{"class": f"astnode {mark}" if mark else "astnode"})
    for i, s in enumerate(u.src): g.edge(ids[s], ids[u], label=str(i) if len(u.src) > 1 else "")
  return g.source

@dataclass
class Drawing:
  """The drawings of one changed capture: pairs of (title, stored SVG or None, current SVG or None), or why none."""
  pairs: list[tuple[str, str | None, str | None]] = field(default_factory=list)
  note: str | None = None

def draw_outputs(level: str, old: Any, new: Any, prefix: str) -> tuple[list[tuple[str, str | None, str | None]], list[str]]:
  """(pairs of (title, stored DOT or None, current DOT or None), notes on graphs too large to draw)."""
  pairs, notes = [], []
  for i, (title, a, b) in enumerate(levels.get(level).drawing_pairs(old, new)):
    sizes = [len(x.toposort()) for x in (a, b) if x is not None]
    if max(sizes, default=0) > DRAW_NODE_LIMIT:
      notes.append(f"{title}: {max(sizes)} nodes, more than {DRAW_NODE_LIMIT}: not drawn")
      continue
    m_old, m_new = marks(a, b) if a is not None and b is not None else ({}, {})
    pairs.append((title, ast_dot(a, m_old, f"{prefix}_{i}_stored") if a is not None else None,
                  ast_dot(b, m_new, f"{prefix}_{i}_current") if b is not None else None))
  return pairs, notes

def _unique_ids(svg: str, prefix: str) -> str:
  """dot names its elements graph0, node1, ...: prefixed, so that many drawings in one page keep ids unique."""
  return re.sub(r'\bid="([^"]+)"', lambda m: f'id="{prefix}-{m[1]}"', svg)

def render(jobs: dict[str, tuple[list[tuple[str, str | None, str | None]], list[str]]]) -> dict[str, Drawing]:
  """{name: (DOT pairs, notes)} -> {name: Drawing}, with one dot run; a graphviz that cannot draw gives each a note."""
  sources = [s for pairs, _ in jobs.values() for _, a, b in pairs for s in (a, b) if s is not None]
  try: svgs = iter(render_svgs(sources))
  except Unavailable as e: return {k: Drawing(note=f"graphs not drawn: {e}") for k in jobs}
  out: dict[str, Drawing] = {}
  for name, (pairs, notes) in jobs.items():
    d = Drawing(note="; ".join(notes) or None)
    for j, (title, a, b) in enumerate(pairs):
      d.pairs.append((title, _unique_ids(next(svgs), f"{name}-{j}a") if a is not None else None,
                      _unique_ids(next(svgs), f"{name}-{j}b") if b is not None else None))
    out[name] = d
  return out

# *** what to draw for the results of a report ***
DRAW_LIMIT = 80  # distinct changed captures drawn in one report; the others say how to draw them (`replay show --html`)

def result_key(r) -> tuple:
  """Results with the same key show the same change (the same input replayed in several runs): drawn once."""
  return (r.pair or {}).get("old_db", r.db), r.db, r.level, r.input_key, r.stored_key, r.new_key

def outputs_of(r, stores: dict) -> tuple[Any, Any]:
  """(stored output, current output) of a changed kernel- or schedule-level result, decoded. The stored one is read from
  its store; the current one from the other store of a `replay diff`, else made again by the current code (and checked
  against the report's key: a report of other code is not drawn with this code's output). Raises LookupError (why)."""
  def store(path: str):
    if path not in stores:
      try: stores[path] = Store(path, readonly=True)
      except Exception as e: stores[path] = LookupError(f"store {path} cannot be read ({type(e).__name__}: {e})")  # noqa: BLE001
    if isinstance(stores[path], Exception): raise stores[path]
    return stores[path]
  try:
    old_db = (r.pair or {}).get("old_db", r.db)
    level = levels.get(r.level)
    old = level.decode_output(store(old_db).blob(r.stored_key))
    if r.pair: return old, level.decode_output(store(r.db).blob(r.new_key))
    with capture_hook.paused(): new, data = level.replay_output(store(r.db).blob(r.input_key))  # drawing must not capture
  except LookupError: raise
  except Exception as e: raise LookupError(f"the outputs cannot be read or made again ({type(e).__name__}: {e})") from None  # noqa: BLE001
  if key_of(data) != r.new_key:
    raise LookupError("the current code makes another output than the one this report saw (the code changed since): not drawn")
  return old, new

def _drawable(level: str) -> bool:
  try: return levels.get(level).graph_output
  except Exception: return False  # noqa: BLE001 (an unknown level has nothing to draw)

def draw_results(results: Sequence, limit: int = DRAW_LIMIT) -> dict[tuple, Drawing]:
  """{result_key: Drawing} for the changed kernel- and schedule-level results, in their order, the first `limit`
  distinct ones drawn; the others get a note that says how to draw them."""
  todo: dict[tuple, Any] = {}
  for r in results:
    if r.outcome == "changed" and _drawable(r.level) and r.new_key and r.stored_key: todo.setdefault(result_key(r), r)
  if not todo: return {}
  if (why := dot_status()) is not None: return {k: Drawing(note=f"graphs not drawn: {why}") for k in todo}
  jobs: dict[str, tuple[list, list[str]]] = {}
  names: dict[tuple, str] = {}
  out: dict[tuple, Drawing] = {}
  stores: dict = {}
  try:
    for i, (k, r) in enumerate(todo.items()):
      if i >= limit:
        out[k] = Drawing(note=f"not drawn here (a report draws its first {limit} changed captures): "
                              f"`replay show {r.db} {r.input_key[:16]} --html FILE` draws this one")
        continue
      try: old, new = outputs_of(r, stores)
      except LookupError as e:
        out[k] = Drawing(note=f"graphs not drawn: {e}")
        continue
      try: jobs[f"d{i}"] = draw_outputs(r.level, old, new, f"d{i}")
      except Exception as e:  # noqa: BLE001 (a drawing is an extra: a graph it cannot lay out leaves a note, not a failed report)
        out[k] = Drawing(note=f"graphs not drawn: {type(e).__name__}: {e}")
        continue
      names[k] = f"d{i}"
  finally:
    for s in stores.values():
      if not isinstance(s, Exception): s.close()
  drawn = render(jobs)
  for k, name in names.items(): out[k] = drawn[name]
  return out
