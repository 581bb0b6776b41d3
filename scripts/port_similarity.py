"""How close are our functions to tinygrad's? A check that our code is our own, not a port.

  python scripts/port_similarity.py TINYGRAD_PACKAGE_DIR [OUR_FILES...] [--threshold 0.7]

For every function/method body in our files (default: tinysched/ and replay/), the best token-sequence similarity
(difflib ratio over Python tokens, names and literals kept, comments and layout dropped) against every function body
in tinygrad's package, with the name of the closest one. Bodies shorter than 25 tokens are skipped: one-liners
such as `return self.x` say nothing. Prints the rows at or above --threshold, worst first; exit 1 when any.
Make the reference with: python -m venv /tmp/tgvenv && /tmp/tgvenv/bin/pip install tinygrad==0.10.0
"""
from __future__ import annotations
import argparse, ast, difflib, io, sys, tokenize
from pathlib import Path

MIN_TOKENS = 25

def _tokens(src: str) -> list[str]:
  out = []
  try:
    for t in tokenize.generate_tokens(io.StringIO(src).readline):
      if t.type in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER): continue
      if t.type == tokenize.STRING and t.string.lstrip("rbuRBU").startswith(('"""', "'''")): continue  # docstrings
      out.append(t.string)
  except (tokenize.TokenError, IndentationError): pass
  return out

def functions(path: Path) -> list[tuple[str, list[str]]]:
  src = path.read_text()
  try: tree = ast.parse(src)
  except SyntaxError: return []
  lines = src.splitlines(keepends=True)
  out = []
  for node in ast.walk(tree):
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
      body = "".join(lines[node.body[0].lineno - 1:node.end_lineno])
      toks = _tokens(_dedent(body))
      if len(toks) >= MIN_TOKENS: out.append((f"{path}:{node.lineno} {node.name}", toks))
  return out

def _dedent(s: str) -> str:
  import textwrap
  return textwrap.dedent(s)

def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("reference", type=Path)
  ap.add_argument("files", nargs="*", type=Path)
  ap.add_argument("--threshold", type=float, default=0.7)
  a = ap.parse_args()
  ref = [f for p in sorted(a.reference.rglob("*.py")) for f in functions(p)]
  ours_files = a.files or sorted([*Path("tinysched").rglob("*.py"), *Path("replay").rglob("*.py")])
  rows = []
  for p in ours_files:
    for name, toks in functions(p):
      best, best_name = 0.0, ""
      for rname, rtoks in ref:
        sm = difflib.SequenceMatcher(None, toks, rtoks, autojunk=False)
        if sm.real_quick_ratio() < max(best, a.threshold * 0.9) or sm.quick_ratio() < max(best, a.threshold * 0.9): continue
        if (r := sm.ratio()) > best: best, best_name = r, rname
      if best >= a.threshold: rows.append((best, name, best_name))
  for r, name, rname in sorted(rows, reverse=True): print(f"{r:.2f}  {name}  ~  {rname.split('site-packages/')[-1]}")
  print(f"{len(rows)} function(s) at or above {a.threshold}", file=sys.stderr)
  return 1 if rows else 0

if __name__ == "__main__": sys.exit(main())
