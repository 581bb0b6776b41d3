"""The schedule level: the big graph of one `create_schedule` call -> its list of kernel ASTs (fusion and grouping).

Its execution job: old = the stored kernel list, new = today's `schedule_graph` of the stored big graph; when the lists
differ (kernels merged or split) every buffer both write is compared, and both lists are also checked against the
scheduler's input graph evaluated op by op (replay.execute.reference)."""
from __future__ import annotations
import json
from typing import Any, Callable
from tinysched.ops import Ops
from tinysched import schedule as S  # looked up at each call: tests and users patch the scheduler's functions
from tinysched.uop import UOp
from replay.store.encode import EMPTY_GRAPH, bound_values, decode_schedule_input, encode_graph, encode_schedule_input, parse
from replay.store.sqlite import dumps, graph_row
from replay.execute.jobs import ast_text, buffer_specs
from replay.execute.inputs import domains
from replay.levels import astdiff as D
from replay.levels.base import Change, Level, RowWriter, register, store_shapes

KERNELS_DRAWN = 4  # changed kernel pairs drawn per schedule-level capture

@register
class ScheduleLevel(Level):
  name = "schedule"
  rank = 1
  output_words = "printed kernel ASTs"
  lists_kernels = True
  paired_by_call = True
  capture_always = True

  def identity(self, inputs: Any, output: Any) -> tuple[Any, Any]:
    big_graph, var_vals, flags = inputs
    ident = ("schedule", big_graph, tuple(sorted((v.arg[0], x) for v, x in var_vals.items())), tuple(sorted(flags.items())))
    return ident, (big_graph, dict(var_vals), dict(flags))

  def write(self, w: RowWriter, inputs: Any, output: Any, info: dict | None, label: str) -> None:
    big_graph, var_vals, flags = inputs
    si: dict = {}
    so: dict = {}
    in_key = w.graph(encode_schedule_input(big_graph, var_vals, si, flags), "schedule_input", si)
    out_doc = encode_graph(list(output), stats=so) if output else EMPTY_GRAPH
    metadata = (info or {}).get("metadata", [[] for _ in output])
    for ast, md in zip(output, metadata):
      if (krow := w.kernel_rows.get(ast)) is not None and md and krow["metadata"] is None: krow["metadata"] = dumps(md)
    nums = si["buf_nums"]
    extra = {"bufs": [[nums[b.arg[0]] for b in kb] for kb in (info or {}).get("bufs", [])]}
    w.add(self.name, in_key, w.graph(out_doc, "ast_list", so), label, node_count=si["node_count"], kernel_count=len(output),
          extra=dumps(extra), op_names=" ".join(so.get("ops", [])), var_vals=dumps({v.arg[0]: val for v, val in var_vals.items()}),
          metadata=dumps(metadata), output_shapes=dumps([store_shapes(a) for a in output]))

  def decode_input(self, data: bytes) -> Any: return decode_schedule_input(data)

  def run(self, inputs: Any, full: dict | None = None, memo: Any = None, reoptimize: bool = False,
          host: dict | None = None) -> tuple[Any, bytes]:
    big_graph, var_vals, flags = inputs
    kernels, vv = S.schedule_graph(big_graph, var_vals, flags, memo)
    if full is not None: full.update(kernels=kernels, var_vals=vv)
    asts = [k.ast for k in kernels]
    return asts, (encode_graph(asts) if asts else EMPTY_GRAPH)

  def extra_of(self, full: dict) -> dict:
    return {"bufs": [[b.arg[0] for b in k.bufs] for k in full["kernels"]]} if "kernels" in full else {}

  def decode_output(self, data: bytes) -> Any:
    d = parse(data)
    if not d.doc.get("roots"): return []
    return d.roots()

  def output_summary(self, out: Any, data: bytes, key: str) -> dict:
    asts = list(out)
    so: dict = {}
    if asts: assert encode_graph(asts, stats=so) == data  # the same bytes the stats describe
    return {"graph": graph_row(key, data, "ast_list", so.get("node_count"), so.get("ops", ())), "op_names": " ".join(so.get("ops", ())),
            "output_shapes": dumps([store_shapes(a) for a in asts]), "kernel_count": len(asts)}

  def graphs(self, output: Any) -> list[UOp]: return list(output)

  def diff(self, old: Any, new: Any, names: tuple[str, str] = ("stored", "current"), prefix: str = "") -> Change:
    kernel_list = D.kernel_list_diff(old, new)
    changes: list[dict] = []
    if len(old) == len(new):
      for i, (a, b) in enumerate(zip(old, new)):
        if a is not b: changes += [{**c, "path": f"kernel[{i}].{c['path']}"} for c in D.structural_diff(a, b)]
    text = D.text_diff("\n\n".join(a.pretty() for a in old), "\n\n".join(b.pretty() for b in new), *names)
    sig = prefix + D.signature("schedule", [{**c, "path": c["path"].split(".", 1)[-1]} for c in changes], kernel_list)
    return Change(sig, text, changes[:50], len(changes), kernel_list)

  def build_job(self, sides: Any, names: dict) -> dict:
    graph, vv, flags = sides.decoded_input(self.decode_input)
    names.update(bound_values(graph, vv))
    if sides.paired:
      new_asts, new_maps = self.decode_output(sides.new_output()), (sides.new_ex or {}).get("bufs")
      if not new_maps or len(new_maps) != len(new_asts): return {"skip": "the new capture has no buffer map for its kernels (re-capture it)"}
      new = [["ast", ast_text(a), list(m)] for a, m in zip(new_asts, new_maps)]
    else:
      kernels, vv2 = (sides.current["kernels"], sides.current["var_vals"]) if sides.current is not None else S.schedule_graph(graph, vv, flags)
      names.update({v.arg[0]: x for v, x in {**vv, **vv2}.items()})
      new = [["ast", ast_text(k.ast), [b.arg[0] for b in k.bufs]] for k in kernels]
    # identical: the stored kernels are the current ones, already encoded in `new` (only a check's job has `current`)
    old_encs = [e[1] for e in new] if sides.identical else [ast_text(a) for a in self.decode_output(sides.old_output())]
    maps = sides.ex.get("bufs")
    if not maps or len(maps) != len(old_encs): return {"skip": "the capture has no buffer map for its kernels (re-capture it)"}
    old = [["ast", e, list(m)] for e, m in zip(old_encs, maps)]
    outputs = sorted({s.src[0].arg[0] for s in graph.src if s.op is Ops.VIEW and s.src and s.src[0].op is Ops.BUFFER})
    # kernel lists may differ in length (fusion): the report maps old kernels to new ones, and bfloat16 intermediates may
    # be rounded at other places (regroups)
    return {"specs": buffer_specs(graph), "old": old, "new": new, "outputs": outputs, "domains": domains([graph]), "regroups": True,
            "reference": {"kind": "graph", "graph": encode_graph([graph]).decode()}}

  def input_text(self, inputs: Any, graph_text: Callable[[UOp], str]) -> str:
    g, vv, flags = inputs
    return "\n".join(["var_vals: " + json.dumps({v.arg[0]: x for v, x in vv.items()})] + ([f"flags: {json.dumps(flags)}"] if flags else []) +
                     ["", "== input (big graph) ==", graph_text(g)])

  def output_text(self, output: Any, graph_text: Callable[[UOp], str]) -> str:
    return "\n".join(f"-- kernel {i} --\n{graph_text(a)}" for i, a in enumerate(output))

  def drawing_pairs(self, old: Any, new: Any) -> list[tuple[str, UOp | None, UOp | None]]:
    if len(old) == len(new):
      return [(f"kernel {i}", a, b) for i, (a, b) in enumerate(zip(old, new)) if a is not b][:KERNELS_DRAWN]
    kl = D.kernel_list_diff(old, new)
    out: list[tuple[str, UOp | None, UOp | None]] = [(f"kernel {k['index']} (only stored)", old[k["index"]], None) for k in kl["removed"]]
    out += [(f"kernel {k['index']} (only current)", None, new[k["index"]]) for k in kl["added"]]
    return out[:2 * KERNELS_DRAWN]

  def shrinkable(self, data: bytes) -> tuple[UOp, Callable[[UOp], bytes | None]]:
    graph, svv, flags = decode_schedule_input(data)
    def encode(g: UOp) -> bytes | None:
      try: return encode_schedule_input(g, {v: x for v, x in svv.items() if v in g.toposort()}, flags=flags)
      except Exception: return None  # noqa: BLE001 (a candidate that cannot be stored is not a candidate)
    return graph, encode
