"""Which rules, turned off, make a replay come out another way: the set search that both the cause of a change group
(replay/check/causes.py: without which rules does the stored output come back?) and the blame against the reference
(replay/triage/reference.py: without which rules does the program compute what its AST means?) run.

`restores(rules)` answers one question (a replay with those rules off, in a process of its own); `spent()` says when
the budget is gone. The order: each rule alone (likeliest first), then pairs of the PAIR_CANDIDATES likeliest, then, if
turning all of them off restores, Zeller's ddmin over the set (as LLVM's debug counters are bisected in chunks), kept
only if it is small. A change two rules make together is named as the pair and neither alone: the result is 1-minimal
as far as the budget let the search go.
"""
from __future__ import annotations
from typing import Callable

PAIR_CANDIDATES = 6      # the likeliest rules whose pairs are tried (15 pairs)
MAX_SET = 8              # a larger set found by ddmin names nothing useful

def ddmin(items: list[str], restores: Callable[[list[str]], bool], spent: Callable[[], bool]) -> list[str]:
  """A 1-minimal subset of `items` (which restores) that still restores (Zeller's ddmin), within the budget."""
  n = 2
  while len(items) >= 2 and not spent():
    size = -(-len(items) // n)
    chunks = [items[i:i + size] for i in range(0, len(items), size)]
    for c in chunks:
      if restores(c):
        items, n = c, 2
        break
    else:
      for c in chunks:
        rest = [x for x in items if x not in c]
        if rest and restores(rest):
          items, n = rest, max(n - 1, 2)
          break
      else:
        if n >= len(items): break
        n = min(len(items), 2 * n)
  return items

def smallest_set(order: list[str], restores: Callable[[list[str]], bool], spent: Callable[[], bool],
                 tried: frozenset[str] = frozenset()) -> list[str] | None:
  """The first of: a single rule of `order` (those in `tried` were asked alone already), a pair of its likeliest, a
  small 1-minimal set by ddmin; None when none restores (or the budget ran out first)."""
  for name in order:
    if name not in tried and restores([name]): return [name]
  top = order[:PAIR_CANDIDATES]
  for i in range(len(top)):
    for j in range(i + 1, len(top)):
      if restores([top[i], top[j]]): return [top[i], top[j]]
  if not spent() and order and restores(order):
    found = ddmin(order, restores, spent)
    if len(found) <= MAX_SET and restores(found): return found
  return None
