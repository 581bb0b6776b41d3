"""The single point where tinysched reports its work to a capture tool.

`replay` installs a function in HOOK; tinysched never imports replay. When HOOK is None (the default)
a capture point costs one attribute lookup. The hook is called as HOOK(level, inputs, output) with
level "kernel" (inputs (pre, var_vals, assigns) -> ast), "schedule" (inputs (big graph sink, ...) ->
asts) or "program" (inputs (ast, opts, target) -> source).
"""
from __future__ import annotations
from typing import Any, Callable

HOOK: Callable[..., None] | None = None  # HOOK(level, inputs, output, info=None)

def autoload() -> None:
  """When TINYSCHED_CAPTURE is set, start the capture tool registered under the `tinysched.capture`
  entry point (replay registers one). Discovery by entry point keeps tinysched independent of replay."""
  import os, sys
  if not os.environ.get("TINYSCHED_CAPTURE") or HOOK is not None: return
  from importlib.metadata import entry_points
  eps = list(entry_points(group="tinysched.capture"))
  if not eps:
    print("tinysched: TINYSCHED_CAPTURE is set but no capture tool is installed (pip install -e . installs replay's)", file=sys.stderr)
    return
  eps[0].load()()
