"""The model level: one call of a model (tinysched/models/calls.py) -> the big graphs it builds and the numbers it returns.

This is the front end in the loop: the Tensor API, autograd, `nn`, the optimizers and the reduce rules build the graphs
every other level starts from, so no stored kernel or schedule reaches a change there.

- Input: the call's spec, what the call is without the compiler (name, dtype, seed, scheduler flags;
  replay/execute/calls.py). Its weights and data come from the seed, and their digests are part of the output.
- Output (the key): the big graphs of every schedule the call made, in order, with their bound Variables and flags, and
  the digests of the host data it copied in. A capture runs the call on its default device, the replay on NUMPY; its
  buffers' device is written as DEVICE_NAME, so the key is the same on every machine (a call builds the same graphs on
  NUMPY and OpenCL).
  A front-end change shows as a structural diff of those graphs, with the front-end functions whose source changed.
- Beside it (the row's `extra`): the call's numbers, each output compactly with its tolerance (replay/execute/numbers.py),
  the device that computed them, the reference's numbers (the float64 twin) and the front-end functions the call ran
  (module:function -> source digest; `replay coverage` lists them).
- Execution check: the call's numbers on the check's device (the replay's own run when it ran there) against its float64
  twin on NUMPY: `wrong` when the current numbers leave the reference, `mismatch` when they leave the stored ones, else
  `equivalent`. A row that replayed identically (same graphs, same host data) is judged against the twin stored at
  capture, which the same front end makes again. `replay diff` judges two
  stored runs of one call (old vs new numbers, each against its own stored reference): that is how numbers compare
  across a front-end change, where the other levels' inputs differ.
"""
from __future__ import annotations
import json
from dataclasses import dataclass
from typing import Any, Callable
from tinysched.ops import Ops
from tinysched.uop import UOp
from replay.store.encode import IncompatibleCapture, canonical_bytes, encode_graph, parse, MODEL_FIELD
from replay.store.sqlite import dumps, graph_row
from replay.execute import calls as C
from replay.execute.jobs import ast_text
from replay.execute import numbers as N
from replay.levels import astdiff as D
from replay.levels.base import Change, Level, RowWriter, register

INPUT_FORMAT = "tinysched-model-call"
DEVICE_NAME = "DEVICE"  # the device of every BUFFER in a stored model output: whichever ran the call
GRAPHS_DRAWN = 4

@dataclass(frozen=True)
class ModelOutput:
  graphs: tuple[UOp, ...]        # the big graphs, in schedule order
  calls: tuple[dict, ...]        # per graph: {"vars": {name: value}, "flags": {...}}
  host: tuple[tuple, ...]        # (dtype, shape, digest) per host array, in order

def encode_input(spec: dict) -> bytes:
  return canonical_bytes({"format": INPUT_FORMAT, **spec})

def device_free(graphs: list[UOp]) -> list[UOp]:
  """The graphs with every BUFFER's device written as DEVICE_NAME (one substitution over all of them)."""
  subs: dict[UOp, UOp] = {}
  for g in graphs:
    for u in g.toposort():
      if u.op is Ops.BUFFER and u not in subs and u.arg[1][0] != DEVICE_NAME:
        subs[u] = u.replace(arg=(u.arg[0], (DEVICE_NAME, *u.arg[1][1:])))
  return [g.substitute(subs) for g in graphs] if subs else list(graphs)

def encode_output(run: C.CallRun, stats: dict | None = None) -> bytes:
  calls = [{"vars": dict(sorted(vv.items())), "flags": dict(sorted(fl.items()))} for _, vv, fl in run.graphs]
  return encode_graph(device_free([g for g, _, _ in run.graphs]), {MODEL_FIELD: {"calls": calls, "host": run.host}}, stats=stats)

def _check_model_field(m: Any, n_roots: int) -> tuple[tuple[dict, ...], tuple[tuple, ...]]:
  if type(m) is not dict or set(m) != {"calls", "host"}: raise IncompatibleCapture("a model output has no calls/host record")
  calls, host = m["calls"], m["host"]
  if type(calls) is not list or len(calls) != n_roots: raise IncompatibleCapture("a model output's calls do not match its graphs")
  for c in calls:
    if type(c) is not dict or set(c) != {"vars", "flags"} or type(c["vars"]) is not dict or type(c["flags"]) is not dict:
      raise IncompatibleCapture("a model output's call record is malformed")
    if any(type(k) is not str or type(v) is not int for d in (c["vars"], c["flags"]) for k, v in d.items()):
      raise IncompatibleCapture("a model output's call record holds something else than named ints")
  if type(host) is not list or len(host) > 1_000_000: raise IncompatibleCapture("a model output's host record is malformed")
  for h in host:
    if type(h) is not list or len(h) != 3 or type(h[0]) is not str or type(h[1]) is not list or type(h[2]) is not str:
      raise IncompatibleCapture("a model output's host entry is malformed")
  return tuple(calls), tuple(tuple([h[0], tuple(h[1]), h[2]]) for h in host)

def _extra(row_extra: Any) -> dict:
  try: ex = json.loads(row_extra) if isinstance(row_extra, str) else (row_extra or {})
  except ValueError: return {}
  return ex if isinstance(ex, dict) else {}

@register
class ModelLevel(Level):
  name = "model"
  rank = 3
  output_words = "printed big graphs"
  hooked = False    # captured by replay/record/calls.py, which runs each call, not by a capture point
  wants_row = True  # describe() reads the stored row's extra (the functions the call ran)

  # *** capture ***
  def identity(self, inputs: Any, output: Any) -> tuple[Any, Any]:
    return ("model", encode_input(inputs)), inputs

  def write(self, w: RowWriter, inputs: Any, output: Any, info: dict | None, label: str) -> None:
    """`output`: the CallRun of the call (graphs, host data, traced functions, numbers); `info`: {"reference": its float64
    twin's CallRun}."""
    run: C.CallRun = output
    info = info or {}
    so: dict = {}
    data = encode_output(run, so)
    parse(data)  # what cannot be read back is not stored
    out_key = w.graph(data, "model_output", so)
    in_key = w.graph(encode_input(inputs), "model_input")
    extra = numbers_extra(inputs, run, info.get("reference"), run.functions)
    w.add(self.name, in_key, out_key, label, node_count=so.get("node_count"), extra=dumps(extra), op_names=" ".join(so.get("ops", [])),
          var_vals=dumps({}), output_shapes=dumps({k: s["shape"] for k, s in extra["outputs"].items()}))

  # *** replay ***
  def replay_cost(self, row: dict) -> int:
    # a call runs its whole schedule on the interpreter: about as long as scheduling 20x its graphs' nodes (measured on
    # the committed baseline), so the replay's chunks spread the calls over its workers
    return 20 * super().replay_cost(row)

  def decode_input(self, data: bytes) -> Any:
    try: doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e: raise IncompatibleCapture(f"model call input is not JSON: {str(e)[:80]}") from None
    if type(doc) is not dict or doc.pop("format", None) != INPUT_FORMAT: raise IncompatibleCapture("not a model call input")
    try: C.check_spec(doc)
    except C.CallError as e: raise IncompatibleCapture(str(e)) from None
    return doc

  def run(self, inputs: Any, full: dict | None = None, memo: Any = None, reoptimize: bool = False,
          host: dict | None = None) -> tuple[Any, bytes]:
    run = C.run_call(inputs, C.GRAPH_DEVICE)  # (not the default device: the replay's workers are forked, OpenCL is not fork-safe)
    if full is not None: full.update(run=run, spec=inputs)
    data = encode_output(run)
    return self.decode_output(data), data

  def decode_output(self, data: bytes) -> Any:
    d = parse(data)
    roots = d.roots()
    calls, host = _check_model_field(d.doc.get(MODEL_FIELD), len(roots))
    return ModelOutput(tuple(roots), calls, host)

  def output_summary(self, out: Any, data: bytes, key: str) -> dict:
    so: dict = {}
    encode_graph(list(out.graphs), stats=so)
    return {"graph": graph_row(key, data, "model_output", so.get("node_count"), so.get("ops", ())), "op_names": " ".join(so.get("ops", []))}

  def accepted_extra(self, row: dict, full: dict) -> str | None:
    """An accepted change re-records the call's numbers (on this machine's default device, as a capture does), its
    float64 twin's and the functions it runs, with the current code."""
    spec = full.get("spec")
    if spec is None: return None
    return record_extra(spec, full.get("run"))

  # *** describing a change ***
  def graphs(self, output: Any) -> list[UOp]: return list(output.graphs)

  def diff(self, old: Any, new: Any, names: tuple[str, str] = ("stored", "current"), prefix: str = "") -> Change:
    changes: list[dict] = []
    if len(old.graphs) == len(new.graphs):
      for i, (a, b) in enumerate(zip(old.graphs, new.graphs)):
        # (a big graph too large for the tree diff says so in `too_big`: only real differences are listed)
        if a is not b: changes += [{**c, "path": f"graph[{i}].{c['path']}"} for c in D.structural_diff(a, b) if c["kind"] != "too_large"]
    host_changed = old.host != new.host
    calls_changed = old.calls != new.calls
    def text(o: ModelOutput) -> str:
      parts = [f"-- schedule {i}: vars {json.dumps(c['vars'])} flags {json.dumps(c['flags'])} --\n{g.pretty()}"
               for i, (g, c) in enumerate(zip(o.graphs, o.calls))]
      parts.append("-- host data --\n" + "\n".join(f"{h[0]} {list(h[1])} {h[2][:16]}" for h in o.host))
      return "\n\n".join(parts)
    sig = prefix + D.signature("model", [{**c, "path": c["path"].split(".", 1)[-1]} for c in changes])
    if len(old.graphs) != len(new.graphs): sig = prefix + f"model: {len(new.graphs)} schedule(s) now, {len(old.graphs)} stored"
    elif not changes:
      sig = prefix + "model: " + ("host data changed" if host_changed else "schedule calls' variables or flags changed" if calls_changed
                                  else "graphs changed")
    elif host_changed: sig += " + host data"
    return Change(sig, D.text_diff(text(old), text(new), *names), changes[:50], len(changes) + int(host_changed))

  def describe(self, data: bytes, old: Any, new: Any, full: dict | None, reoptimized: bool, names: tuple[str, str],
               too_big: str) -> tuple[Change, list[str]]:
    ch, _ = self.bounded_diff(old, new, names, too_big=too_big)
    stored = _extra((full or {}).get("row_extra")).get("functions")
    rules = C.changed_functions(stored) if isinstance(stored, dict) else []
    # grouped by cause: the front-end functions whose source changed (one refactor, one group over every call it reaches)
    if rules: ch.signature = f"model: graphs built by changed front-end code: {', '.join(r.split(':', 1)[1] for r in rules[:4])}" + \
                             (f" (+{len(rules) - 4} more)" if len(rules) > 4 else "")
    return ch, rules

  # *** the execution check ***
  def build_job(self, sides: Any, names: dict) -> dict:
    spec = sides.decoded_input(self.decode_input)
    stored = sides.ex.get("outputs")
    if not isinstance(stored, dict) or not stored: return {"skip": "the capture holds no numbers for this call (re-capture it)"}
    # each call a group of its own: the pool spreads them over its workers (a call shares few kernels with another)
    # (its fields are its own: `old`/`new`/`reference` mean kernel items and their reference in replay/execute/jobs.py)
    job: dict[str, Any] = {"kind": "model", "spec": spec, "stored": stored, "size": 1 << 22, "group": f"model call {spec['call']}"}
    if sides.current is not None and isinstance(run := sides.current.get("run"), C.CallRun):
      # the replay ran the call: its numbers are the current code's on that device (judge_job runs it again elsewhere)
      job.update(numbers=N.summaries(run.outputs, run.dtypes), numbers_device=run.device, kernels=[ast_text(a) for a in run.kernels])
    # a replay that found the graphs and host data unchanged: the float64 twin stored at capture is today's too (only
    # a changed front end needs its twin run again)
    if sides.identical and isinstance(sides.ex.get("reference"), dict) and sides.ex["reference"]: job["twin"] = sides.ex["reference"]
    if sides.paired:
      new = (sides.new_ex or {}).get("outputs")
      if not isinstance(new, dict) or not new: return {"skip": "the new capture holds no numbers for this call"}
      job.update(paired=True, numbers=new, twin=(sides.new_ex or {}).get("reference") or None, numbers_device=(sides.new_ex or {}).get("device"))
    return job

  # *** reports and triage ***
  def input_text(self, inputs: Any, graph_text: Callable[[UOp], str]) -> str:
    call = C.check_spec(inputs)[0]
    return f"model call {inputs['call']}: {call.what}\n" + json.dumps(inputs, indent=1, sort_keys=True)

  def output_text(self, output: Any, graph_text: Callable[[UOp], str]) -> str:
    parts = [f"-- schedule {i} (vars {json.dumps(c['vars'])}, flags {json.dumps(c['flags'])}) --\n{graph_text(g)}"
             for i, (g, c) in enumerate(zip(output.graphs, output.calls))]
    return "\n".join(parts + [f"-- {len(output.host)} host arrays --"] + [f"{h[0]} {list(h[1])} sha256 {h[2][:16]}" for h in output.host])

  def drawing_pairs(self, old: Any, new: Any) -> list[tuple[str, UOp | None, UOp | None]]:
    if len(old.graphs) == len(new.graphs):
      return [(f"schedule {i}", a, b) for i, (a, b) in enumerate(zip(old.graphs, new.graphs)) if a is not b][:GRAPHS_DRAWN]
    return []

def numbers_extra(spec: dict, numbers: C.CallRun, ref: C.CallRun | None, functions: dict | None) -> dict:
  """A model row's `extra`: the call's outputs on the device it ran on (each with its tolerance policy), its float64
  reference's, and the front-end functions it ran."""
  outs = N.summaries(numbers.outputs, numbers.dtypes)
  refs = N.summaries(ref.outputs, ref.dtypes) if ref is not None else {}
  for k, s in outs.items():
    if s["kind"] == "float": s["policy"] = N.policy(spec["dtype"], s, N.rel_err(N.values(s), N.values(refs[k])) if k in refs else float("inf"))
  return {"device": numbers.device, "outputs": outs, "reference": refs, "functions": functions or {}}

def record_extra(spec: dict, run: C.CallRun | None = None) -> str:
  """A model row's `extra` (JSON) made with the current code, as a capture makes it (replay/record/calls.py): the call
  traced on the default device (`run`, when it was traced already) and its float64 twin."""
  if run is None or run.functions is None: run = C.run_call(spec, trace=True)
  return dumps(numbers_extra(spec, run, C.run_call(spec, C.REFERENCE_DEVICE, dtype="float64", collect=False), run.functions))
