"""The error type every replay command raises for a failure the user can act on: the message, and what to do next
(`hint`), which the CLI prints under it and exits 2 (replay/cli/common.py `_fail`)."""
from __future__ import annotations

class HintedError(RuntimeError):
  def __init__(self, msg: str, hint: str | None = None):
    super().__init__(msg)
    self.hint = hint

__all__ = ["HintedError"]
