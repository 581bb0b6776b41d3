"""What a capture level is: one capture point of tinysched, and everything replay does with a row of it.

A level records what tinysched hands its hook (identity and encoding), decodes a stored input, runs the current code
on it, decodes a stored output, describes a change between two outputs and names the rules behind it, builds the
execution check's job, and says how to draw and shrink its graphs. Each level is a subclass in a module of its own
beside this one, registered by name in `replay.levels` (`get`, `LEVELS`); no code outside this package asks which
level a row is. Adding a level is adding one class.
"""
from __future__ import annotations
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, MutableMapping
from tinysched.ops import Ops
from tinysched.uop import UOp
from replay.store.encode import IncompatibleCapture
from replay.store.sqlite import graph_row

# past these sizes a changed output gets no structural/text diff (printing a deep chain is quadratic, deepdiff and
# the rule trace grow with it): the report says so. Real kernel outputs are far below (the committed baseline's
# largest: 881 nodes, depth 36).
DETAIL_NODE_LIMIT = 20_000
DETAIL_DEPTH_LIMIT = 500

@dataclass
class Change:
  """How an output changed, as a level describes it: what the report's result carries (replay.check.replayer.Result)."""
  signature: str | None = None
  text_diff: str | None = None
  changes: list[dict] = field(default_factory=list)
  change_count: int = 0
  kernel_list: dict | None = None

@dataclass
class RowWriter:
  """What a level's `write` gets from the recorder's flush: `graph(data, kind, stats)` stores a payload and returns its
  key; `add(level, input_key, output_key, **summary)` adds a row (None when this run already has that input);
  `written(level, input_key)` says whether it has; `kernel_rows` maps a kernel AST to its row of this flush (the
  schedule call that follows names the Tensor methods of its kernels)."""
  graph: Callable[..., str]
  add: Callable[..., dict | None]
  written: Callable[[str, str], bool]
  kernel_rows: MutableMapping[UOp, dict]

class Level:
  name: ClassVar[str]
  rank: ClassVar[int]                  # the order levels are listed and replayed in
  graph_output: ClassVar[bool] = True  # outputs are UOp graphs (drawn, printed); False: text (a program's source)
  output_words: ClassVar[str] = "printed output"  # what a text diff of two outputs shows, for reports
  lists_kernels: ClassVar[bool] = False  # the output is a kernel list (its length is a store's "kernels scheduled")
  paired_by_call: ClassVar[bool] = False  # `replay diff`: rows whose inputs differ pair up in call order within a label
  runs_stored_source: ClassVar[bool] = False  # its execution job launches stored OpenCL source (needs an OpenCL device)
  capture_always: ClassVar[bool] = False  # every call is queued, repeats included (each call's outputs carry new metadata)
  output_is_kernel: ClassVar[bool] = False  # the output is one kernel AST (`replay stats` counts them, `show --html` draws it)
  hooked: ClassVar[bool] = True  # a tinysched capture point reports it (captured by default); False: recorded by its own runner
  lowers: ClassVar[bool] = False  # its replay runs the code generator's lowering (`replay blame` can name a lowering pass)
  wants_row: ClassVar[bool] = False  # `describe` reads the stored row's `extra` (replay_row puts it in `full` as "row_extra")

  # *** capture ***
  def identity(self, inputs: Any, output: Any) -> tuple[Any, Any]:
    """(a hashable identity of one hook call, for dropping exact repeats; the inputs as they are now, copied
    where the caller keeps changing them)."""
    raise NotImplementedError
  def write(self, w: RowWriter, inputs: Any, output: Any, info: dict | None, label: str) -> None:
    """Encode one queued hook call and add its row (`w`)."""
    raise NotImplementedError

  # *** replay ***
  def decode_input(self, data: bytes) -> Any:
    """The stored input, decoded (raises IncompatibleCapture): what `run` runs."""
    raise NotImplementedError
  def run(self, inputs: Any, full: dict | None = None, memo: Any = None, reoptimize: bool = False,
          host: dict | None = None) -> tuple[Any, bytes]:
    """The current code on a decoded input: (new output object, its canonical bytes). `full` (a dict) receives what the
    output alone does not hold and the execution check needs; `memo`: a scheduler KernelMemo shared by the rows one
    worker replays; `reoptimize`, `host`: see `reoptimizes`."""
    raise NotImplementedError
  def decode_output(self, data: bytes) -> Any:
    """A stored output (raises IncompatibleCapture)."""
    raise NotImplementedError
  def replay_output(self, data: bytes) -> tuple[Any, bytes]:
    """The current code on a stored input: (new output object, its canonical bytes)."""
    return self.run(self.decode_input(data))
  def reoptimizes(self, row: dict, reoptimize: bool) -> tuple[bool, dict | None, str | None]:
    """(whether this row is replayed choosing its optimizations again, the host facts that needs, a note why not)."""
    return False, None, None
  def run_row(self, inputs: Any, row: dict, reoptimize: bool = False, full: dict | None = None, memo: Any = None) -> tuple[Any, bytes, str | None]:
    """`run` on a stored row's decoded input as `replay check` replays it (the check, per-row accept, the determinism
    check): choosing its optimizations again where `reoptimize` asks and the row allows (`reoptimizes`; the choices
    then go in `full`, a new dict when none is given). (new output, its bytes, the note why it was not reoptimized)."""
    reopt, host, note = self.reoptimizes(row, reoptimize)
    out, data = self.run(inputs, {} if reopt and full is None else full, memo, reopt, host)
    return out, data, note
  def replay_cost(self, row: dict) -> int:
    """A row's replay cost in arbitrary units, to balance the replay's chunks: its node count (what decoding and
    scheduling grow with, within about 2x on the committed captures) plus a fixed part per row."""
    n = row.get("node_count")
    return 20 + (n if type(n) is int and n > 0 else 100)
  def replay_key(self, row: dict, reoptimize: bool) -> tuple:
    """What besides (level, input key) decides a row's replay outcome (rows with equal keys are replayed once)."""
    return ()
  def output_summary(self, out: Any, data: bytes, key: str) -> dict:
    """What `replay accept` writes for a row's new output: its payload ("graph", a store graph row) and any summary
    columns that change with it (op_names, output_shapes, kernel_count; the others keep their values)."""
    return {"graph": graph_row(key, data, "output")}
  def extra_of(self, full: dict) -> dict:
    """What a row of the current code's output would record beside it that its execution job reads (`full`: what
    `run` filled in): launch sizes, buffer maps. The triage's own jobs use it (replay/triage/reference.py)."""
    return {}
  def accepted_extra(self, row: dict, full: dict) -> str | None:
    """A row's new `extra` (JSON) when its output is accepted, or None to keep it: what the row records beside its
    output that the output decides (`full`: what `run` filled in)."""
    return None

  # *** describing a change ***
  def graphs(self, output: Any) -> list[UOp]:
    """The UOp graphs an output holds (for size limits and drawings); none for a text output."""
    return []
  def too_big(self, old: Any, new: Any) -> str | None:
    """Why two outputs are too large for a detailed diff, or None."""
    return graphs_too_big(self.graphs(old) + self.graphs(new))
  def diff(self, old: Any, new: Any, names: tuple[str, str] = ("stored", "current"), prefix: str = "") -> Change:
    """The change from output `old` to output `new` (both decoded): diffs and the group signature (prefixed)."""
    raise NotImplementedError
  def rules_behind(self, data: bytes, old: Any) -> list[str]:
    """The rules (or passes) whose results make the current output differ from `old`, most frequent first."""
    return []
  def bounded_diff(self, old: Any, new: Any, names: tuple[str, str] = ("stored", "current"), prefix: str = "",
                   too_big: str = "(no detailed diff: an output has {why})") -> tuple[Change, bool]:
    """(`diff`, True), or, when the outputs are too large for a detailed diff, (a Change saying so with `too_big`
    formatted with why, False)."""
    if (why := self.too_big(old, new)) is None: return self.diff(old, new, names, prefix), True
    return Change(f"{self.name}: {prefix or 'output '}changed (too large for a detailed diff)", too_big.format(why=why)), False
  def describe(self, data: bytes, old: Any, new: Any, full: dict | None, reoptimized: bool, names: tuple[str, str],
               too_big: str) -> tuple[Change, list[str]]:
    """A changed row's diff and the rules behind it (`data`: its stored input; `full`: what `run` filled); no rules for
    outputs too large for a detailed diff (tracing them grows with the output)."""
    ch, detailed = self.bounded_diff(old, new, names, too_big=too_big)
    return ch, (self.rules_behind(data, old) if detailed else [])

  # *** the execution check ***
  def build_job(self, sides: Any, names: dict) -> dict:
    """The job's sides, buffers and reference (replay.execute's job format) for one row; {"skip": why} when none."""
    return {"skip": f"no execution check at {self.name} level"}

  # *** reports and triage ***
  def input_text(self, inputs: Any, graph_text: Callable[[UOp], str]) -> str:
    """A decoded input printed for `replay show` (`graph_text` prints one graph, bounded)."""
    raise NotImplementedError
  def output_text(self, output: Any, graph_text: Callable[[UOp], str]) -> str:
    """A decoded output printed for `replay show`."""
    return "\n\n".join(graph_text(g) for g in self.graphs(output))
  def drawing_pairs(self, old: Any, new: Any) -> list[tuple[str, UOp | None, UOp | None]]:
    """The graphs to draw for a changed output: (title, stored graph or None, current graph or None)."""
    return []
  def shrinkable(self, data: bytes) -> tuple[UOp, Callable[[UOp], bytes | None]]:
    """(the input's root graph, encode(smaller root) -> this level's input bytes, or None when it cannot be encoded),
    for `replay minimize`; raises IncompatibleCapture when this level's inputs cannot be shrunk."""
    raise IncompatibleCapture(f"{self.name}-level inputs cannot be minimized")

REGISTRY: dict[str, Level] = {}

def register(cls: type[Level]) -> type[Level]:
  """Class decorator: one instance of each level, found by its name."""
  if cls.name in REGISTRY: raise ValueError(f"capture level {cls.name!r} registered twice")
  REGISTRY[cls.name] = cls()
  return cls

def get(name: str) -> Level:
  """The level of a stored row (raises IncompatibleCapture for a name no level has: a capture from other code)."""
  try: return REGISTRY[name]
  except (KeyError, TypeError): raise IncompatibleCapture(f"level is {name!r}, not a capture level of this code ({', '.join(names())})") from None

def names() -> tuple[str, ...]:
  return tuple(n for n, _ in sorted(REGISTRY.items(), key=lambda kv: (kv[1].rank, kv[0])))

def graphs_too_big(graphs: list[UOp]) -> str | None:
  """Why graphs are too large for a detailed diff or a printout, or None; stops counting at the limits (bounded work)."""
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

def store_shapes(ast: UOp) -> list:
  """The shapes a kernel AST stores (its STOREs' views), symbolic sizes rendered: a row's `output_shapes`."""
  out = []
  for s in (ast.src if ast.op is Ops.SINK else ()):
    if s.op is Ops.STORE and s.src[1].op is Ops.VIEW: out.append([x if isinstance(x, int) else x.render_sym() for x in s.src[1].arg.shape])
  return out
