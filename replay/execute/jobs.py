"""The execution check's job: one capture's old and new kernels, as plain JSON that a worker process reads from a line,
and where its two sides come from (`Sides`). Built in the parent by the capture's level with the current code.

A job is a dict:
- `old`, `new`: each side's kernel items, in launch order: `["ast", encoded AST, buffer map]` (the kernel's k-th buffer
  is job buffer map[k]) or, at program level, `["src", name, OpenCL source, launch]` (launch: global/local sizes,
  dtypes, scalar vars) whose i-th argument is job buffer i;
- `specs`: {buffer number: [size, dtype name]}, the buffers a job allocates (None at program level: `program_specs`
  measures them from `ast`, the kernel AST the stored source was generated from; `size` then carries their elements);
- `reference`: {"kind": "kernels", "side": ...} (each kernel against the interpreter) or {"kind": "graph", "graph":
  encoded big graph} (schedule level: both kernel lists against the scheduler's input graph too);
- `domains`: {buffer: the values its inputs must take} (an index buffer stays in range); `outputs`: the graph's output
  buffers, compared even when no kernel of a side writes them; `regroups`: the sides' kernel lists may differ (fusion);
- `names`: {variable name: value}; `seed`: the inputs' seed (from the input key); `level`; `id`: the job's number in
  its run; `group`: the store it came from (one worker prefers one group); `skip`: why no job could be built (nothing
  else is set then).
"""
from __future__ import annotations
from typing import Any, Callable
from tinysched.ops import Ops
from tinysched.realize import kernel_vars
from replay.store.encode import encode_graph
from replay.execute.reference import reach

def ast_text(ast) -> str:
  """A kernel AST as a job carries it (its canonical encoding, as text)."""
  return encode_graph([ast]).decode()

def buffer_specs(graph) -> dict[int, list]:
  """{buffer number: [size, dtype name]} of the BUFFERs a graph holds: the buffers a job allocates."""
  return {u.arg[0]: [u.arg[1][1], u.arg[1][2].name] for u in graph.toposort() if u.op is Ops.BUFFER}

class Sides:
  """Where a job's two sides come from. `replay check`: old = the stored output, new = the current code on the stored
  input. `replay diff`/`commits` (paired): old and new are both stored, in two stores, and nothing is recomputed."""
  def __init__(self, store, input_key: str, stored_key: str, ex: dict, old_store=None, new_key: str | None = None, new_ex: dict | None = None):
    self.store, self.input_key, self.stored_key, self.ex = store, input_key, stored_key, ex
    self.old_store, self.new_key, self.new_ex = old_store or store, new_key, new_ex
    self.current: dict | None = None  # the current code's output, when the caller has it (see build_job)
    self.given_input: bytes | None = None  # (Sides.given)
    self.given_old: bytes | None = None
  @property
  def paired(self) -> bool: return self.new_key is not None
  def input(self) -> bytes: return self.given_input if self.given_input is not None else self.store.blob(self.input_key)
  def decoded_input(self, decode: Callable[[bytes], Any]) -> Any:
    """The stored input decoded: as the replay decoded it when it hands it over (current["inputs"]), else from the store."""
    if self.current is not None and "inputs" in self.current: return self.current["inputs"]
    return decode(self.input())
  @property
  def identical(self) -> bool:
    """The current output is byte-identical to the stored one (the replay compared their keys): the stored output then
    decodes to the very objects the current code made (decoding is interning), which need not be decoded again."""
    return bool(self.current is not None and self.current.get("identical"))
  def old_output(self) -> bytes: return self.given_old if self.given_old is not None else self.old_store.blob(self.stored_key)
  @classmethod
  def given(cls, data: bytes, old_output: bytes, ex: dict, current: dict | None = None) -> Sides:
    """Sides of an input and old output held in memory, not stored (the triage's candidates); `current`: the new side
    already computed (else the level's job builder computes it with this process's code)."""
    s = cls(None, "", "", ex)
    s.given_input, s.given_old, s.current = data, old_output, current
    return s
  def new_output(self) -> bytes: return self.store.blob(self.new_key)

def program_specs(ast, names: dict[str, int]) -> tuple[dict[int, tuple[int, Any]], dict[str, int]]:
  """Buffer sizes of a bare kernel AST (program level has no BUFFER nodes): the largest position any of its views
  reaches, evaluated by the reference's view code. Unbound Variables take their largest value."""
  vv = {v: names.get(v.arg[0], v.arg[2]) for v in kernel_vars(ast)}
  specs: dict[int, tuple[int, Any]] = {}
  for u in ast.toposort():
    if u.op in (Ops.LOAD, Ops.STORE):
      g = u.src[0]
      hi = max(reach(u.src[1].arg, vv), 1)
      old = specs.get(g.arg, (0, g.dtype.base))[0]
      specs[g.arg] = (max(old, hi), g.dtype.base)
  return dict(sorted(specs.items())), {v.arg[0]: x for v, x in vv.items()}

def job_size(job: dict) -> int:
  """Elements a job's buffers hold (program level: as its builder measured them)."""
  if "size" in job: return int(job["size"])
  return sum(int(s) for s, _ in (job.get("specs") or {}).values()) if job.get("specs") else 1 << 16
