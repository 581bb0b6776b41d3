"""Child processes that never outlive the command that started them."""
from __future__ import annotations
import ctypes, os, signal, sys
from typing import Callable

def parent_death_signal() -> Callable[[], None] | None:
  """A preexec function making the child receive SIGTERM when this process dies (Linux prctl PR_SET_PDEATHSIG), so
  a killed `replay accept`/`replay suite` leaves no model process behind; None where prctl is not available."""
  if not sys.platform.startswith("linux"): return None
  try: prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved here: the child should only make the call
  except (OSError, AttributeError): return None
  parent = os.getpid()
  def arm() -> None:
    prctl(1, int(signal.SIGTERM), 0, 0, 0)  # 1 = PR_SET_PDEATHSIG
    if os.getppid() != parent: os._exit(143)  # the parent died before the call took effect
  return arm
