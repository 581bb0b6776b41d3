"""The single point where tinysched reports its work to a capture tool.

`replay` installs a function in HOOK; tinysched never imports replay. When HOOK is None (the default)
a capture point costs one attribute lookup. The hook is called as HOOK(level, inputs, output) with
level "kernel" (inputs (pre, var_vals, assigns) -> ast), "schedule" (inputs (big graph sink, ...) ->
asts) or "program" (inputs (ast, opts, target) -> source). One more point is an observation, not a level: "host"
(inputs (numpy array, dtype) -> None), host data copied into a new Tensor, whose contents no graph holds (replay's
model level digests it); a tool ignores what it does not record.
"""
from __future__ import annotations
import contextlib, importlib, os, sys
from typing import Callable, Iterator

HOOK: Callable[..., None] | None = None  # HOOK(level, inputs, output, info=None)

@contextlib.contextmanager
def paused() -> Iterator[None]:
  """Nothing is captured inside the block: a tool re-running stored inputs (replay) must not capture itself."""
  global HOOK
  prev, HOOK = HOOK, None
  try: yield
  finally: HOOK = prev

def _load_tool() -> Callable[..., None] | None:
  from importlib.metadata import entry_points  # keeps import tinysched fast (~13 ms): only a capture run looks for the tool
  eps = list(entry_points(group="tinysched.capture"))
  if not eps:
    print("tinysched: TINYSCHED_CAPTURE is set but no capture tool is installed (pip install -e . installs replay's)", file=sys.stderr)
    return None
  eps[0].load()()  # the tool installs its hook into HOOK
  return HOOK if HOOK is not _first_call else None

def _first_call(*args, **kwargs) -> None:
  # resolved at the first capture point, not at import: the capture tool itself imports tinysched
  global HOOK
  HOOK = None
  hook = _load_tool()
  if hook is not None: hook(*args, **kwargs)

def autoload() -> None:
  """When TINYSCHED_CAPTURE is set, the first capture point starts the capture tool registered under the
  `tinysched.capture` entry point (replay registers one): discovery keeps tinysched independent of replay."""
  global HOOK
  if os.environ.get("TINYSCHED_CAPTURE") and HOOK is None:
    HOOK = _first_call
    _check_settings()

def _check_settings() -> None:
  """Let the tool check its settings now, at tinysched's import, so a misconfiguration stops the program before any
  user code runs (a tool module may offer `check_env()`). Skipped while the tool's own package is being imported:
  it imports tinysched, and checks when it installs itself."""
  from importlib.metadata import entry_points  # keeps import tinysched fast (~13 ms): only a capture run looks for the tool
  eps = list(entry_points(group="tinysched.capture"))
  if not eps or eps[0].module.split(".")[0] in sys.modules: return
  check = getattr(importlib.import_module(eps[0].module), "check_env", None)
  if check is not None: check()
