"""The emitter: places the nodes of a lowered kernel into nested loop scopes, then flattens them to a linear program.

Values go to the innermost open loop they depend on (loop-invariant work is hoisted out, nothing is used outside the
loop that defines it); effects (STORE, ASSIGN, BARRIER) go where they are emitted, in program order; DEFINE_ACC and
DEFINE_LOCAL are declared at function scope.
"""
from __future__ import annotations
from tinysched.dtype import dtypes
from tinysched.ops import Ops
from tinysched.uop import UOp
from tinysched.codegen.kernel import KernelError

LEAVES = frozenset({Ops.CONST, Ops.DEFINE_GLOBAL, Ops.DEFINE_VAR})
EFFECTS = frozenset({Ops.STORE, Ops.ASSIGN, Ops.BARRIER, Ops.DEFINE_ACC, Ops.DEFINE_LOCAL})

class Block:
  __slots__ = ("range", "items", "open_child", "closed")
  range: UOp | None  # None for the kernel's top block
  items: list[UOp | Block]
  open_child: Block | None
  def __init__(self, rng: UOp | None):
    self.range, self.items, self.open_child, self.closed = rng, [], None, False

class Emitter:
  def __init__(self) -> None:
    self.root = Block(None)
    self.stack: list[Block] = [self.root]
    self.placed: dict[UOp, Block] = {}
    self.always: set[UOp] = set()            # declarations and effects: visible once emitted (membership only)
    self.contrib: dict[UOp, frozenset] = {}  # the loops a node's value depends on

  def _visible(self, x: UOp) -> bool:
    if x in self.always or x.op in LEAVES: return True
    b = self.placed.get(x)
    return b is not None and not b.closed

  def _insert(self, b: Block, x: UOp) -> None:
    if b.open_child is not None: b.items.insert(len(b.items) - 1, x)  # hoisted: before the open loop (always the last item)
    else: b.items.append(x)
    self.placed[x] = b

  def value(self, root: UOp) -> UOp:
    stack: list[tuple[UOp, bool]] = [(root, False)]
    while stack:
      x, ready = stack.pop()
      if self._visible(x) and x in self.contrib: continue
      if not ready:
        stack.append((x, True))
        stack.extend((s, False) for s in reversed(x.src) if not (self._visible(s) and s in self.contrib))
        continue
      c = frozenset().union(*(self.contrib[s] for s in x.src))
      if x.op is Ops.RANGE: c = c | {x}
      self.contrib[x] = c
      if x.op in LEAVES: continue
      if x.op is Ops.RANGE: raise KernelError(f"internal: loop {x.arg} used outside of its scope")
      if x.op in EFFECTS: raise KernelError(f"internal: {x.op} used before it was emitted")
      target = self.root
      open_ranges = [b.range for b in self.stack if b.range is not None]
      if any(r not in open_ranges for r in c if r.op is Ops.RANGE): raise KernelError("internal: value depends on a closed loop")
      for b in reversed(self.stack):
        if b.range is not None and b.range in c:
          target = b
          break
      self._insert(target, x)
    return root

  def declare(self, x: UOp) -> UOp:
    """DEFINE_ACC / DEFINE_LOCAL: declared at function scope (local arrays first of all)."""
    for s in x.src: self.value(s) if s.op is not Ops.RANGE else None
    self.contrib[x] = frozenset(s for s in x.src if s.op is Ops.RANGE)
    if x.op is Ops.DEFINE_LOCAL:
      n = sum(1 for it in self.root.items if isinstance(it, UOp) and it.op is Ops.DEFINE_LOCAL)
      self.root.items.insert(n, x)
      self.placed[x] = self.root
    else: self._insert(self.root, x)
    self.always.add(x)
    return x

  def effect(self, x: UOp, contrib: frozenset | None = None) -> UOp:
    """STORE / ASSIGN / BARRIER: emitted in the innermost open scope, in program order. `contrib`
    overrides the loops the node's users depend on (an accumulator update read again inside its loop)."""
    for s in x.src:
      if s.op not in EFFECTS: self.value(s)
    cur = self.stack[-1]
    cur.items.append(x)
    self.placed[x] = cur
    self.always.add(x)
    # users of an ASSIGN read the accumulator after its loops; users of a BARRIER live in this scope
    if contrib is not None: self.contrib[x] = contrib
    elif x.op is Ops.BARRIER: self.contrib[x] = frozenset(b.range for b in self.stack if b.range is not None)
    else: self.contrib[x] = frozenset()
    return x

  def open(self, rng: UOp) -> None:
    for s in rng.src: self.value(s)  # a symbolic bound is computed before the loop
    b = Block(rng)
    cur = self.stack[-1]
    cur.items.append(b)
    cur.open_child = b
    self.stack.append(b)
    self.placed[rng] = b
    self.contrib[rng] = frozenset({rng})

  def close(self) -> None:
    b = self.stack.pop()
    b.closed = True
    self.stack[-1].open_child = None

  def linearize(self) -> list[UOp]:
    if len(self.stack) != 1: raise KernelError("internal: unclosed loops")
    def walk(b: Block) -> list[UOp]:
      out: list[UOp] = []
      for it in b.items:
        # (a nested block is a loop's: its range is set)
        if isinstance(it, Block): out += [it.range] + walk(it) + [UOp(Ops.ENDRANGE, dtypes.void, (it.range,))]  # type: ignore[arg-type]
        else: out.append(it)
      return out
    return walk(self.root)

__all__ = ["Emitter", "LEAVES", "EFFECTS"]
