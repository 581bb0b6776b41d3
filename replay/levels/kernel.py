"""The kernel level: `full_ast_rewrite(pre-sink, var_vals, assigns) -> kernel AST`, step 5 of the scheduler.

Its execution job: old = the stored AST, new = today's rewrite of the stored pre-sink, both rendered by today's code
generator and each kernel checked against the interpreter (replay.execute)."""
from __future__ import annotations
import json
from typing import Any, Callable
from tinysched import rewrite
from tinysched import schedule as S  # looked up at each call: tests and users patch the scheduler's functions
from tinysched.uop import UOp
from replay.store.encode import IncompatibleCapture, bound_values, decode_graph, decode_kernel_input, encode_graph, encode_kernel_input
from replay.store.sqlite import dumps, graph_row
from replay.execute.jobs import ast_text, buffer_specs
from replay.execute.inputs import domains
from replay.levels import astdiff as D
from replay.levels.base import Change, Level, RowWriter, register, store_shapes

@register
class KernelLevel(Level):
  name = "kernel"
  rank = 0
  output_words = "printed AST"
  output_is_kernel = True

  def identity(self, inputs: Any, output: Any) -> tuple[Any, Any]:
    pre, var_vals, assigns = inputs
    ident = ("kernel", pre, output, tuple(sorted((v.arg[0], x) for v, x in var_vals.items())), tuple(assigns))
    return ident, (pre, dict(var_vals), dict(assigns))  # the caller's dicts keep changing

  def write(self, w: RowWriter, inputs: Any, output: Any, info: dict | None, label: str) -> None:
    pre, var_vals, assigns = inputs
    si: dict = {}
    so: dict = {}
    in_key = w.graph(encode_kernel_input(pre, var_vals, assigns, si), "kernel_input", si)
    out_key = w.graph(encode_graph([output], stats=so), "ast", so)
    if w.written(self.name, in_key): return  # the same kernel again (another layer)
    nums = si["buf_nums"]  # original BUFFER number -> canonical number in the stored input
    row = w.add(self.name, in_key, out_key, label, node_count=si["node_count"], kernel_count=1, op_names=" ".join(so["ops"]),
                output_shapes=dumps(store_shapes(output)), var_vals=dumps(bound_values(pre, var_vals)),
                assigns=dumps(sorted(nums[b.arg[0]] for b in assigns if b.arg[0] in nums)),
                extra=dumps({"bufs": [nums[b.arg[0]] for b in (info or {}).get("bufs", [])]}))
    if row is not None: w.kernel_rows[output] = row

  def decode_input(self, data: bytes) -> Any: return decode_kernel_input(data)

  def run(self, inputs: Any, full: dict | None = None, memo: Any = None, reoptimize: bool = False,
          host: dict | None = None) -> tuple[Any, bytes]:
    pre, var_vals, assigns = inputs
    ast, ctx = S.full_ast_rewrite(pre, var_vals, assigns, memo)
    if full is not None: full["bufs"] = [b.arg[0] for b in ctx.bufs]
    return ast, encode_graph([ast])

  def extra_of(self, full: dict) -> dict: return {"bufs": list(full["bufs"])} if "bufs" in full else {}

  def decode_output(self, data: bytes) -> Any:
    roots = decode_graph(data)
    if len(roots) != 1: raise IncompatibleCapture(f"a kernel output must have one root, has {len(roots)}")
    return roots[0]

  def output_summary(self, out: Any, data: bytes, key: str) -> dict:
    so: dict = {}
    assert encode_graph([out], stats=so) == data  # the same bytes the stats describe
    return {"graph": graph_row(key, data, "ast", so.get("node_count"), so.get("ops", ())), "op_names": " ".join(so.get("ops", ())),
            "output_shapes": dumps(store_shapes(out)), "kernel_count": 1}

  def graphs(self, output: Any) -> list[UOp]: return [output]

  def diff(self, old: Any, new: Any, names: tuple[str, str] = ("stored", "current"), prefix: str = "") -> Change:
    changes = D.structural_diff(old, new)
    return Change(prefix + D.signature("kernel", changes), D.text_diff(old.pretty(), new.pretty(), *names), changes, len(changes))

  def rules_behind(self, data: bytes, old: Any) -> list[str]:
    """Replay the kernel once more with rule tracing on: the rules whose results are nodes of the new AST that the
    stored AST does not have are the ones that made the difference (most frequent first)."""
    trace: list = []
    prev, rewrite.TRACE = rewrite.TRACE, trace
    try:
      pre, vv, asg = decode_kernel_input(data)
      new, _ = S.full_ast_rewrite(pre, vv, asg)
    except Exception: return []  # noqa: BLE001 (the replay itself reports the failure; only the names are lost)
    finally: rewrite.TRACE = prev
    fresh = D.changed_nodes(old, new)
    counts: dict[str, int] = {}
    for name, _, after in trace:
      if after.key in fresh: counts[name] = counts.get(name, 0) + 1
    return [n for n, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))][:5]

  def build_job(self, sides: Any, names: dict) -> dict:
    pre, vv, asg = sides.decoded_input(self.decode_input)
    names.update(bound_values(pre, vv))
    if sides.paired: new_ast, new_map = self.decode_output(sides.new_output()), list((sides.new_ex or {}).get("bufs") or [])
    elif sides.current is not None: new_ast, new_map = sides.current["output"], list(sides.current["bufs"])
    else:
      new_ast, ctx = S.full_ast_rewrite(pre, vv, asg)
      new_map = [b.arg[0] for b in ctx.bufs]
    old_ast = new_ast if sides.identical else self.decode_output(sides.old_output())
    old_map = list(sides.ex.get("bufs") or new_map)  # older rows have no map: the same signature as today's
    if not new_map: new_map = old_map
    old_enc = ast_text(old_ast)
    new_enc = old_enc if new_ast is old_ast else ast_text(new_ast)
    return {"specs": buffer_specs(pre), "old": [["ast", old_enc, old_map]], "new": [["ast", new_enc, new_map]],
            "reference": {"kind": "kernels", "side": "old"}, "domains": domains([pre])}

  def input_text(self, inputs: Any, graph_text: Callable[[UOp], str]) -> str:
    pre, vv, asg = inputs
    return "\n".join(["var_vals: " + json.dumps({v.arg[0]: x for v, x in vv.items()}), "assigns: " + json.dumps([b.arg[0] for b in asg]),
                      "", "== input (pre-sink) ==", graph_text(pre)])

  def drawing_pairs(self, old: Any, new: Any) -> list[tuple[str, UOp | None, UOp | None]]: return [("kernel AST", old, new)]

  def shrinkable(self, data: bytes) -> tuple[UOp, Callable[[UOp], bytes | None]]:
    pre, vv, asg = decode_kernel_input(data)
    def encode(p: UOp) -> bytes | None:
      try: return encode_kernel_input(p, {v: x for v, x in vv.items() if v in p.toposort()}, {b: None for b in asg if b in p.toposort()})
      except Exception: return None  # noqa: BLE001 (a candidate that cannot be stored is not a candidate)
    return pre, encode
