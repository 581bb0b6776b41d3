"""The single point where tinysched reports its work to a capture tool.

`replay` installs a function in HOOK; tinysched never imports replay. When HOOK is None (the default)
a capture point costs one attribute lookup. The hook is called as HOOK(level, inputs, output) with
level "kernel" (inputs (pre, var_vals, assigns) -> ast), "schedule" (inputs (big graph sink, ...) ->
asts) or "program" (inputs (ast, opts, target) -> source).
"""
from __future__ import annotations
from typing import Any, Callable

HOOK: Callable[[str, Any, Any], None] | None = None
