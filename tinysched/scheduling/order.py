"""Pass 5: the kernels in an order that can run. A kernel runs after the kernels that produce its inputs, and
a kernel that reads a buffer's value from before an assign runs before the kernel that assigns it."""
from __future__ import annotations
from collections import deque
from typing import Sequence, TypeVar
from tinysched.scheduling.bigraph import ScheduleError

K = TypeVar("K")

def run_order(kernels: Sequence[K]) -> list[K]:
  """Kahn's algorithm; among kernels that are ready, the one grouped first runs first (deterministic)."""
  made_by = {out: i for i, k in enumerate(kernels) for out in k.outputs}  # type: ignore[attr-defined]
  then: list[list[int]] = [[] for _ in kernels]  # then[i]: kernels that wait for kernel i
  waits = [0] * len(kernels)
  def edge(first: int, second: int) -> None:
    then[first].append(second); waits[second] += 1
  for i, k in enumerate(kernels):
    assigners: dict[int, None] = {}
    for b in k.assign_preloads:  # type: ignore[attr-defined]
      if (j := made_by.get(b)) is not None and j != i: assigners[j] = None
    for j in assigners: edge(i, j)
    producers: dict[int, None] = {}
    for b in k.inputs:  # type: ignore[attr-defined]
      if (j := made_by.get(b)) is not None and j != i and j not in assigners: producers[j] = None
    for j in producers: edge(j, i)
  ready = deque(i for i, n in enumerate(waits) if n == 0)
  order: list[int] = []
  while ready:
    order.append(i := ready.popleft())
    for j in then[i]:
      waits[j] -= 1
      if waits[j] == 0: ready.append(j)
  if len(order) < len(kernels):
    stuck = [i for i, n in enumerate(waits) if n > 0]
    raise ScheduleError(f"cycle detected in graph: grouped {len(kernels)} kernels but only {len(order)} can be ordered; "
                        f"kernels {stuck[:8]} wait on each other (often two assigns reading each other's targets).\n"
                        "help: realize one of the assigns first, or use .contiguous() on the value read before the assign")
  return [kernels[i] for i in order]
