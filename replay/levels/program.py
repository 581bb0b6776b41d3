"""The program level: (kernel AST, optimization choices, target) -> rendered source, with the current code generator.

Besides the level class: what a program row records about the target and the launch, and how a changed source is
grouped (its token edits, names and constants normalized)."""
from __future__ import annotations
import difflib, json, re
from typing import Any, Callable
from tinysched.codegen.kernel import Opt
# looked up at each call (tests and users patch them): cached_program is to_program, or this code's earlier render of it (opt-in)
from tinysched.codegen import program_cache, provenance
from tinysched.codegen.target import Target
from tinysched.ops import Ops
from tinysched.uop import UOp
from replay.store.encode import IncompatibleCapture, encode_graph, parse
from replay.store.sqlite import dumps, graph_row
from replay.execute.jobs import ast_text, program_specs
from replay.execute.inputs import domains
from replay.levels import astdiff as D
from replay.levels.base import Change, Level, RowWriter, register, store_shapes

def opts_to_json(opts) -> list[list]: return [list(o.to_tuple()) for o in opts]
# what identifies a machine rather than what code generation depends on: kept out of program-level inputs (and so
# out of their keys), so a capture made on another CPU model or driver build replays identically. The heuristic reads
# compute_units: captures record these fields in the row's extra["host"] (host_json), which `replay check --reoptimize` uses.
HOST_FIELDS = ("name", "vendor", "driver_version", "compute_units", "max_alloc")

def target_to_json(target) -> dict[str, Any]:
  """The codegen-relevant description of a target: limits, vector and precision support, GPU or not."""
  d = target.to_dict()
  return {k: v for k, v in d.items() if k not in HOST_FIELDS}

def program_input(ast: UOp, opts, target, stats: dict | None = None) -> bytes:
  """A program-level input, encoded as a capture stores it: the kernel AST with its opts and the target's codegen facts."""
  return encode_graph([ast], {"opts": opts_to_json(opts), "target": target_to_json(target)}, stats=stats)

def _dim(g): return g if isinstance(g, int) else {"uop": encode_graph([g]).decode()}

def cost_json(prg) -> dict | None:
  """A rendered Program's executed cost (tinysched/cost.py), symbolic counts as encoded graphs: what the execution check
  measures the new side's throughput in (replay/execute/timing.py)."""
  if prg.cost is None: return None
  return {"flops": _dim(prg.cost.flops), "accesses": [_dim(a) for a in prg.cost.accesses]}

def launch_json(prg) -> dict:
  """What launching a rendered Program again needs without the code generator: its name, launch sizes (symbolic
  sizes as encoded graphs), Variables in argument order, buffer dtypes. Stored with program-level captures."""
  return {"name": prg.name, "global": [_dim(g) for g in prg.global_size], "local": list(prg.local_size) if prg.local_size else None,
          "vars": [v.arg[0] for v in prg.vars],
          "var_bits": [8 * v.dtype.itemsize for v in prg.vars], "dtypes": [d.name for d in prg.buf_dtypes]}

def host_json(target) -> dict[str, Any]:
  """The host facts of a target (HOST_FIELDS): stored in a program row's `extra["host"]`, never in its keyed input, so
  `replay check --reoptimize` can run the heuristic (which reads compute_units) for the target the capture saw."""
  d = target.to_dict()
  return {k: d[k] for k in HOST_FIELDS if k in d}

# why a program row is replayed with its stored opts under --reoptimize (rows captured before host facts were recorded)
NO_HOST_NOTE = ("not reoptimized: captured without host facts (extra.host: compute_units, which the heuristic reads), "
                "so replayed with its stored opts; re-capture (replay suite) to replay the heuristic")

def replay_program_full(doc, reoptimize: bool = False, host: dict | None = None):
  """`doc`: a parsed program-input document (replay.store.encode.parse): one AST root plus "opts" and "target".
  reoptimize: choose the opts again with the current heuristic (to_program(ast, None, target)) instead of rendering the
  stored ones; `host` (the row's extra["host"]) completes the target with the host facts the keyed input leaves out.
  The caller decides what to do without `host` (replay/check/replayer.py: the stored opts, with a note): here it is required."""
  roots = doc.roots()
  if len(roots) != 1: raise IncompatibleCapture("a program input must have one AST root")
  try:
    opts = stored_opts(doc)
    tdict = doc.doc.get("target") or {}
    if reoptimize:
      if not isinstance(host, dict): raise IncompatibleCapture("--reoptimize needs the row's host facts (extra.host)")
      tdict = {**tdict, **{k: v for k, v in host.items() if k in HOST_FIELDS}}
    target = Target.from_dict(tdict)
  except (ValueError, TypeError) as e: raise IncompatibleCapture(f"optimization choices or target unreadable: {e}") from None
  return program_cache.cached_program(roots[0], None if reoptimize else opts, target)

def stored_opts(doc) -> tuple:
  """The optimization choices a decoded program input holds."""
  return tuple(Opt.from_tuple(t) for t in doc.doc.get("opts", []))

def opts_text(opts) -> str:
  """Opts as the report shows them: OP(axis,amount) in order, `none` for no opts."""
  return ", ".join(f"{o.op.name}({o.axis},{o.amount})" for o in opts) or "none"

# generated names (counters) shift when a node is added or removed: compared without their numbers
_COUNTED_NAME = re.compile(r"\b(acc|alu|val|temp|cast|ridx|sidx)\d+\b")
def _unnumbered(text: str) -> str: return _COUNTED_NAME.sub(r"\1#", text)

def program_rules_behind(data: bytes, old_src: str) -> list[str]:
  """Lower the stored program input once more with provenance (tinysched/codegen/provenance.py): the rules or passes
  that made the nodes whose rendered text the stored source does not have, and whose inlined operands' texts it does
  have (the first nodes to differ, not every user above them), most frequent first. [] when it cannot say."""
  try:
    doc = parse(data)
    (ast,) = doc.roots()
    _, nodes = provenance.trace_program(ast, stored_opts(doc), Target.from_dict(doc.doc.get("target") or {}))
  except Exception: return []  # noqa: BLE001 (an attribution that fails leaves the report without rule names, nothing more)
  old = _unnumbered(old_src)
  changed = {u for u, txt, _, _ in nodes if _unnumbered(txt) not in old}
  inlined = {u for u, _, inl, _ in nodes if inl}
  counts: dict[str, int] = {}
  for u, _, _, lbl in nodes:
    if u in changed and not any(s in changed and s in inlined for s in u.src): counts[lbl] = counts.get(lbl, 0) + 1
  return [n for n, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))][:5]

# *** grouping program-level changes ***
# A changed source is described by its token edits with names and constants normalized (digits -> #), so the same change
# in kernels with different names, sizes and constants has one signature: one rename is one group, not one per kernel.
_TOKEN = re.compile(r"/\*.*?\*/|//[^\n]*|\.[A-Za-z_]\w*|[A-Za-z_]\w*|\d+\.\d*(?:e[-+]?\d+)?f?|\.\d+(?:e[-+]?\d+)?f?|0x[0-9a-fA-F]+u?"
                    r"|\d+(?:e[-+]?\d+)?[uUlLf]*|\S", re.S)
_NUMBER = re.compile(r"(?:\d|\.\d)")
# types and vector widths are what they say, never counters
_TYPE_NAME = re.compile(r"(?:bool|char|uchar|short|ushort|int|uint|long|ulong|half|float|double|size_t)(?:2|3|4|8|16)?")
SIGNATURE_EDITS = 8  # distinct edits named in one signature; more are counted

def _tokens(text: str) -> list[str]: return _TOKEN.findall(text)

def _kind(tok: str) -> str:
  if tok.startswith(("/*", "//")): return "comment"
  if tok[0] == "." and len(tok) > 1 and (tok[1].isalpha() or tok[1] == "_"): return "member"  # a vector component or field
  if _NUMBER.match(tok): return "const"
  if tok[0].isalpha() or tok[0] == "_": return "type" if _TYPE_NAME.fullmatch(tok) else "name"
  return "op"

def _norm(tok: str) -> str:
  """A token without its particulars: counters and sizes in names, values of constants, numbers in comments."""
  kind = _kind(tok)
  if kind in ("type", "member"): return tok
  if kind == "const":  # (the suffix pattern always matches, if only the empty string)
    return "#" + (re.search(r"[uUlLf]*$", tok).group()  # type: ignore[union-attr]
                  if not tok.startswith("0x") else ("u" if tok.endswith("u") else ""))
  return re.sub(r"\d+", "#", tok)

def _norm_seq(toks: list[str], width: int = 60) -> str:
  s = " ".join(_norm(t) for t in toks)
  return s if len(s) <= width else s[:width - 1] + "…"

def _aligned(old: str, new: str) -> tuple[list[tuple[str, str]], list[tuple[str, list[str], list[str]]]]:
  """Token alignment of two sources: (pairs of aligned tokens, equal ones included; blocks that do not pair one to one:
  (tag, old tokens, new tokens)). Lines are matched first, tokens inside changed runs of lines."""
  a_lines, b_lines = old.splitlines(), new.splitlines()
  pairs: list[tuple[str, str]] = []
  blocks: list[tuple[str, list[str], list[str]]] = []
  lm = difflib.SequenceMatcher(None, a_lines, b_lines, autojunk=False)
  for tag, i1, i2, j1, j2 in lm.get_opcodes():
    a, b = _tokens("\n".join(a_lines[i1:i2])), _tokens("\n".join(b_lines[j1:j2]))
    if tag == "equal":
      pairs += list(zip(a, b))
      continue
    tm = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for ttag, k1, k2, m1, m2 in tm.get_opcodes():
      if ttag == "equal" or (ttag == "replace" and k2 - k1 == m2 - m1): pairs += list(zip(a[k1:k2], b[m1:m2]))
      else: blocks.append((ttag, a[k1:k2], b[m1:m2]))
  return pairs, blocks

def source_signature(old: str, new: str) -> str:
  """The shape of a change from source `old` to `new`, for grouping: the distinct normalized token edits, sorted.
  A name that is renamed consistently (every occurrence, one to one) is a rename: `rename val#->v#`, or nothing when
  only its number moved (a node added or removed renumbers the names after it: the added node is the change)."""
  pairs, blocks = _aligned(old, new)
  seen: dict[str, set[str]] = {}
  for a, b in pairs:
    if _kind(a) == "name": seen.setdefault(a, set()).add(b)
  onto: dict[str, int] = {}
  for a, bs in seen.items():
    for b in bs: onto[b] = onto.get(b, 0) + 1
  renamed = {a for a, bs in seen.items() if len(bs) == 1 and onto[next(iter(bs))] == 1}
  edits: set[str] = set()
  for a, b in pairs:
    if a == b: continue
    ka, kb = _kind(a), _kind(b)
    if ka == kb == "name" and a in renamed:
      if _norm(a) != _norm(b): edits.add(f"rename {_norm(a)}->{_norm(b)}")
    elif ka == kb and ka in ("name", "const", "comment", "member"): edits.add(f"{ka} {_norm(a)}->{_norm(b)}")
    else: edits.add(f"{_norm(a)}->{_norm(b)}")
  for tag, a_toks, b_toks in blocks:
    if tag == "insert": edits.add(f"+ {_norm_seq(b_toks)}")
    elif tag == "delete": edits.add(f"- {_norm_seq(a_toks)}")
    else: edits.add(f"{_norm_seq(a_toks)} => {_norm_seq(b_toks)}")
  if not edits: return "names renumbered only" if any(a != b for a, b in pairs) else "layout only (the same tokens)"
  out = sorted(edits)
  return "; ".join(out[:SIGNATURE_EDITS]) + (f"; +{len(out) - SIGNATURE_EDITS} more edits" if len(out) > SIGNATURE_EDITS else "")

# *** the level ***

def row_host(row: dict) -> dict | None:
  """The host facts a program row recorded at capture (extra["host"]), or None (rows captured before they were)."""
  try: host = json.loads(row.get("extra") or "{}").get("host")
  except (ValueError, AttributeError): return None
  return host if isinstance(host, dict) else None

def opts_given(row: dict) -> bool:
  """Whether a program row's opts were given by the caller (a test, a search), not chosen by the heuristic."""
  try: return bool(json.loads(row.get("extra") or "{}").get("opts_given"))
  except (ValueError, AttributeError): return False

@register
class ProgramLevel(Level):
  """(kernel AST, optimization choices, target) -> rendered OpenCL source, with the current code generator.

  Its execution job: old = the stored source exactly as captured, launched with its captured launch dimensions; new =
  today's codegen for the stored AST and optimization choices; both against the interpreter running the AST."""
  name = "program"
  rank = 2
  lowers = True
  graph_output = False
  output_words = "program source"
  runs_stored_source = True

  def identity(self, inputs: Any, output: Any) -> tuple[Any, Any]:
    ast, opts, target = inputs
    return ("program", ast, tuple(opts), target), inputs

  def write(self, w: RowWriter, inputs: Any, output: Any, info: dict | None, label: str) -> None:
    ast, opts, target = inputs
    extra = {"opts": opts_to_json(opts), "target": target_to_json(target)}
    si: dict = {}
    # the launch sizes go with the row (not the keyed input): the execution check launches the stored source with them
    # host facts (compute_units...) go with the row too: replay check --reoptimize runs the heuristic, which reads them
    # opts a caller gave (a test, a search) are not the heuristic's: --reoptimize replays those rows with them
    row_extra = {**extra, "host": host_json(target), **({"launch": launch_json(info["program"])} if info and "program" in info else {}),
                 **({"opts_given": True} if info and info.get("opts_given") else {})}
    w.add(self.name, w.graph(program_input(ast, opts, target, si), "program_input", si), w.graph(str(output).encode(), "source"), label,
          node_count=si["node_count"], kernel_count=1, op_names=" ".join(si["ops"]), output_shapes=dumps(store_shapes(ast)),
          extra=dumps(row_extra))

  def decode_input(self, data: bytes) -> Any:
    d = parse(data)
    if len(d.roots()) != 1: raise IncompatibleCapture("a program input must have one AST root")
    return d

  def run(self, inputs: Any, full: dict | None = None, memo: Any = None, reoptimize: bool = False,
          host: dict | None = None) -> tuple[Any, bytes]:
    prg = replay_program_full(inputs, reoptimize, host)
    if full is not None: full["program"] = prg
    return prg.src, prg.src.encode()

  def shrinkable(self, data: bytes) -> tuple[UOp, Callable[[UOp], bytes | None]]:
    """The kernel AST, and the input with a smaller AST in its place (the same opts and target: a candidate the opts no
    longer fit fails on both sides, and is no candidate)."""
    d = self.decode_input(data)
    extra = {k: d.doc[k] for k in ("opts", "target") if k in d.doc}
    def encode(ast: UOp) -> bytes | None:
      try: return encode_graph([ast], extra)
      except Exception: return None  # noqa: BLE001 (a candidate that cannot be stored is not a candidate)
    return d.roots()[0], encode

  def decode_output(self, data: bytes) -> Any:
    try: return data.decode()
    except UnicodeDecodeError as e: raise IncompatibleCapture(f"stored source is not UTF-8 ({e})") from None

  def reoptimizes(self, row: dict, reoptimize: bool) -> tuple[bool, dict | None, str | None]:
    """--reoptimize: choose the opts again with the current heuristic, unless a caller gave them; a row without host facts
    (captured before extra["host"] was recorded) is replayed with its stored opts and says so."""
    if not reoptimize or opts_given(row): return False, None, None
    if (host := row_host(row)) is None: return False, None, NO_HOST_NOTE
    return True, host, None

  def replay_key(self, row: dict, reoptimize: bool) -> tuple:
    # with --reoptimize a row's outcome also depends on the host facts it recorded (two hosts, one input)
    return (json.dumps(row_host(row), sort_keys=True), opts_given(row)) if reoptimize else ()

  def output_summary(self, out: Any, data: bytes, key: str) -> dict: return {"graph": graph_row(key, data, "source")}
  def extra_of(self, full: dict) -> dict: return {"launch": launch_json(full["program"])} if "program" in full else {}
  def accepted_extra(self, row: dict, full: dict) -> str | None:
    # the launch sizes belong to the source: an accepted source launched with the old sizes would run wrong (exec check)
    if "program" not in full: return None
    try: extra = json.loads(row.get("extra") or "{}")
    except ValueError: extra = {}
    return json.dumps({**(extra if isinstance(extra, dict) else {}), **self.extra_of(full)}, sort_keys=True)

  def diff(self, old: Any, new: Any, names: tuple[str, str] = ("stored", "current"), prefix: str = "") -> Change:
    # the signature normalizes names and constants (one rename: one group)
    return Change(prefix + "program: " + source_signature(old, new), D.text_diff(old, new, *names))

  def describe(self, data: bytes, old: Any, new: Any, full: dict | None, reoptimized: bool, names: tuple[str, str],
               too_big: str) -> tuple[Change, list[str]]:
    """Reoptimized rows (`full["program"]` holds the chosen opts) lead their diff and signature with stored vs chosen opts."""
    ch = self.diff(old, new, names)
    opts_line = None
    if reoptimized and full is not None and "program" in full:
      try: was: tuple | None = stored_opts(parse(data))
      except Exception: was = None  # noqa: BLE001 (decoded once already: only the line is lost)
      now = tuple(full["program"].opts)
      if was is not None and tuple(was) != now: opts_line = f"opts changed: {opts_text(was)} -> {opts_text(now)}"
      elif was is not None: opts_line = f"opts unchanged ({opts_text(now)})"
    if opts_line:
      ch.text_diff = f"{opts_line}\n{ch.text_diff or ''}"
      ch.signature = (ch.signature or "").replace("program: ", f"program: {opts_line}; ", 1)
      if opts_line.startswith("opts changed"): return ch, ["heuristic (tinysched/codegen/heuristic.py choose_opts)"]  # the source follows
    return ch, self.rules_behind(data, old)

  def rules_behind(self, data: bytes, old: Any) -> list[str]: return program_rules_behind(data, old)

  def input_text(self, inputs: Any, graph_text: Any) -> str:
    return "\n".join(["opts: " + json.dumps(inputs.doc.get("opts")), "target: " + json.dumps(inputs.doc.get("target")), "",
                      "== input (AST) ==", graph_text(inputs.roots()[0])])

  def output_text(self, output: Any, graph_text: Any) -> str: return output

  def build_job(self, sides: Any, names: dict) -> dict:
    launch = sides.ex.get("launch")
    if not launch: return {"skip": "the capture has no launch dimensions for its stored source (captured before they were recorded; re-capture it)"}
    doc = sides.decoded_input(parse)
    ast = doc.roots()[0]
    new_cost = None  # (a stored new source's cost is not known: no throughput for it)
    if sides.paired:
      new_src, new_launch = sides.new_output().decode(), (sides.new_ex or {}).get("launch")
      if not new_launch: return {"skip": "the new capture has no launch dimensions for its source (re-capture it)"}
    else:
      prg = sides.current["program"] if sides.current is not None else replay_program_full(doc)
      new_src, new_launch, new_cost = prg.src, launch_json(prg), cost_json(prg)
    size = sum(n for n, _ in program_specs(ast, names)[0].values())  # for the time limit and the run order
    return {"specs": None, "size": size, "ast": ast_text(ast), "old": [["src", launch["name"], sides.old_output().decode(), launch]],
            "new": [["src", new_launch["name"], new_src, new_launch]], "reference": {"kind": "kernels", "side": "ast"},
            "domains": domains([ast], lambda u: u.arg if u.op is Ops.DEFINE_GLOBAL else None), "new_cost": new_cost}
