"""The architecture as a test: the import graph a reader sees is the real one.

- No import cycles among our modules, imports inside functions included (only `if TYPE_CHECKING:` blocks, which never
  run, are left out).
- Data flows one way: tinysched never imports replay, and replay's packages import only their own layer or the layers
  below (LAYERS, bottom first).
- An import inside a function is there only for a heavy or optional dependency or a process's own entry point, and says
  why on its line (a trailing comment) or on the comment line right above it.
- Nothing outside replay/levels asks which capture level a row is (`level == "kernel"` and the like): a level is a class.
"""
from __future__ import annotations
import ast, re
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("tinysched", "replay")
# replay's layers, bottom first: a module may import its own layer and the ones below, never one above
LAYERS = (("replay.errors", "replay.git", "replay.process"), ("replay.store",), ("replay.execute",), ("replay.levels",),
          ("replay.prove",), ("replay.record",), ("replay.check",), ("replay.report",), ("replay.baseline",), ("replay.triage",),
          ("replay.cli",), ("replay",))

def _modules() -> dict[str, Path]:
  out = {}
  for pkg in PACKAGES:
    for p in sorted((ROOT / pkg).rglob("*.py")):
      rel = p.relative_to(ROOT).with_suffix("")
      parts = list(rel.parts)
      if parts[-1] == "__init__": parts = parts[:-1]
      out[".".join(parts)] = p
  return out

MODULES = _modules()

class _Imports(ast.NodeVisitor):
  """(line, module imported, inside a function, its statement) for every import statement, TYPE_CHECKING blocks left out."""
  def __init__(self, name: str, is_pkg: bool):
    self.name, self.is_pkg, self.depth, self.found = name, is_pkg, 0, []
  def visit_If(self, node: ast.If) -> None:
    test = node.test
    if (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"):
      for n in node.orelse: self.visit(n)
      return
    self.generic_visit(node)
  def _func(self, node) -> None:
    self.depth += 1
    self.generic_visit(node)
    self.depth -= 1
  visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _func
  def visit_Import(self, node: ast.Import) -> None:
    for a in node.names: self.found.append((node.lineno, a.name, self.depth > 0, node))
  def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
    base = node.module or ""
    if node.level:
      pkg = self.name.split(".") if self.is_pkg else self.name.split(".")[:-1]
      pkg = pkg[:len(pkg) - node.level + 1]
      base = ".".join(pkg + ([base] if base else []))
    for a in node.names:
      sub = f"{base}.{a.name}"
      self.found.append((node.lineno, sub if sub in MODULES else base, self.depth > 0, node))

def _imports(name: str) -> list[tuple[int, str, bool, ast.AST]]:
  p = MODULES[name]
  v = _Imports(name, p.name == "__init__.py")
  v.visit(ast.parse(p.read_text(), str(p)))
  return v.found

def _ours(mod: str) -> str | None:
  """The module of ours an import names (the longest known prefix), or None for a third-party one."""
  parts = mod.split(".")
  for n in range(len(parts), 0, -1):
    if ".".join(parts[:n]) in MODULES: return ".".join(parts[:n])
  return None

def _graph() -> dict[str, set[str]]:
  g: dict[str, set[str]] = {m: set() for m in MODULES}
  for m in MODULES:
    for _, target, _, _ in _imports(m):
      t = _ours(target)
      if t is None or t == m: continue
      g[m].add(t)
      # importing a.b.c runs a/__init__ and a/b/__init__ too, unless they are this module's own packages (already running)
      parts = t.split(".")
      for n in range(1, len(parts)):
        parent = ".".join(parts[:n])
        if parent in MODULES and not (m == parent or m.startswith(parent + ".")): g[m].add(parent)
  return g

def _cycles(g: dict[str, set[str]]) -> list[list[str]]:
  """Strongly connected components with more than one module (Tarjan)."""
  index: dict[str, int] = {}
  low: dict[str, int] = {}
  stack: list[str] = []
  on: set[str] = set()
  out: list[list[str]] = []
  counter = [0]
  def visit(v: str) -> None:
    index[v] = low[v] = counter[0]; counter[0] += 1
    stack.append(v); on.add(v)
    for w in sorted(g[v]):
      if w not in index:
        visit(w)
        low[v] = min(low[v], low[w])
      elif w in on: low[v] = min(low[v], index[w])
    if low[v] == index[v]:
      comp = []
      while True:
        w = stack.pop(); on.discard(w); comp.append(w)
        if w == v: break
      if len(comp) > 1: out.append(sorted(comp))
  for v in sorted(g):
    if v not in index: visit(v)
  return out

def test_no_import_cycles():
  cycles = _cycles(_graph())
  assert not cycles, "import cycles (deferred imports included): " + "; ".join(" <-> ".join(c) for c in cycles)

def test_the_cycle_check_can_fail():
  g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
  assert _cycles(g) == [["a", "b", "c"]]
  assert _cycles({"a": {"b"}, "b": set()}) == []

def _layer(mod: str) -> int | None:
  best = None
  for i, names in enumerate(LAYERS):
    for n in names:
      if (mod == n or mod.startswith(n + ".")) and (best is None or len(n) > len(best[1])): best = (i, n)
  return None if best is None else best[0]

def test_tinysched_never_imports_replay():
  bad = [f"{m}:{line} imports {t}" for m in MODULES if m.startswith("tinysched")
         for line, t, _, _ in _imports(m) if t == "replay" or t.startswith("replay.")]
  assert not bad, bad

def test_replay_layers_import_only_downward():
  bad = []
  for m in MODULES:
    if not m.startswith("replay"): continue
    mine = _layer(m)
    for line, t, _, _ in _imports(m):
      theirs = _layer(t) if t.startswith("replay") else None
      if mine is not None and theirs is not None and theirs > mine and m != "replay":
        bad.append(f"{m}:{line} imports {t} (layer {LAYERS[theirs][0]} is above {LAYERS[mine][0]})")
  assert not bad, "\n".join(bad)

def _reason(lines: list[str], lineno: int) -> bool:
  line = lines[lineno - 1]
  if "#" in line.split("import", 1)[-1]: return True
  prev = lines[lineno - 2].strip() if lineno >= 2 else ""
  return prev.startswith("#")

def test_function_level_imports_say_why():
  bad = []
  for m, p in MODULES.items():
    lines = p.read_text().splitlines()
    for line, t, inner, _ in _imports(m):
      if inner and not _reason(lines, line): bad.append(f"{p.relative_to(ROOT)}:{line} imports {t} inside a function without a reason")
  assert not bad, f"{len(bad)} function-level import(s) without a reason:\n" + "\n".join(bad)

LEVEL_TEST = re.compile(r"""\blevel(?:["']\])?\s*(==|!=|\bin\b|\bnot in\b)\s*[("']*(kernel|schedule|program|model)\b"""
                        r"""|["'](kernel|schedule|program|model)["']\s*(==|!=|\bin\b|\bnot in\b)\s*[\w.\[\]"']*levels?\b""")

def test_no_level_tests_outside_the_level_classes():
  bad = []
  for m, p in MODULES.items():
    if not m.startswith("replay") or m.startswith("replay.levels"): continue
    for n, line in enumerate(p.read_text().splitlines(), 1):
      if LEVEL_TEST.search(line.split("#", 1)[0]): bad.append(f"{p.relative_to(ROOT)}:{n}: {line.strip()[:100]}")
  assert not bad, "a level asked for by name outside replay/levels:\n" + "\n".join(bad)

@pytest.mark.parametrize("text,found", [('if r.level == "program":', True), ("if level in ('kernel', 'schedule'):", True),
                                        ('if "schedule" == row_level:', True), ('if "program" not in levels:', True),
                                        ('if r["level"] == "kernel":', True), ("levels = LEVELS", False)])
def test_the_level_pattern_can_fail(text, found):
  assert bool(LEVEL_TEST.search(text)) is found
