"""The one enum of IR operations and the groups the compiler passes reason about."""
from __future__ import annotations
from enum import Enum, auto

class Ops(Enum):
  # meta and buffer ops: the scheduler's vocabulary
  SINK = auto(); BUFFER = auto(); BUFFER_VIEW = auto(); COPY = auto(); EMPTY = auto(); CONTIGUOUS = auto()  # noqa: E702
  ASSIGN = auto(); STORE = auto(); LOAD = auto(); PRELOAD = auto(); VALID = auto(); CONST = auto()  # noqa: E702
  DEFINE_GLOBAL = auto(); DEFINE_VAR = auto(); BIND = auto(); VIEW = auto()  # noqa: E702
  # unary ALU (CAST and BITCAST change the dtype; they are elementwise but not ALU)
  CAST = auto(); BITCAST = auto(); EXP2 = auto(); LOG2 = auto(); SIN = auto(); SQRT = auto(); RECIP = auto(); NEG = auto()  # noqa: E702
  # binary ALU
  ADD = auto(); MUL = auto(); IDIV = auto(); MOD = auto(); MAX = auto(); CMPLT = auto(); CMPNE = auto()  # noqa: E702
  AND = auto(); OR = auto(); XOR = auto(); SHL = auto(); SHR = auto()  # noqa: E702
  # ternary ALU
  WHERE = auto(); MULACC = auto()  # noqa: E702
  # reduction: arg is (alu_op, axes)
  REDUCE_AXIS = auto()
  # lowering (codegen) ops: loops, thread ids, local memory, accumulators, vectors
  RANGE = auto(); SPECIAL = auto(); DEFINE_LOCAL = auto(); DEFINE_ACC = auto(); ENDRANGE = auto()  # noqa: E702
  IF = auto(); ENDIF = auto(); BARRIER = auto(); VECTORIZE = auto(); GEP = auto(); INDEX = auto()  # noqa: E702
  def __repr__(self): return f"Ops.{self.name}"
  def __lt__(self, other: Ops) -> bool: return self.value < other.value  # lets nodes sort deterministically
  # identity hash (C speed) instead of Enum's hash of the name: ops are dict keys on every hot path. Sets of
  # ops are never iterated into an output (Enum's name hash is randomized per process anyway)
  __hash__ = object.__hash__

class GroupOp:
  Unary = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIP, Ops.NEG})
  Binary = frozenset({Ops.ADD, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.AND, Ops.OR, Ops.XOR,
                      Ops.SHL, Ops.SHR})
  Ternary = frozenset({Ops.WHERE, Ops.MULACC})
  ALU = Unary | Binary | Ternary
  Elementwise = ALU | {Ops.CAST, Ops.BITCAST}
  Commutative = frozenset({Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPNE, Ops.AND, Ops.OR, Ops.XOR})
  Associative = frozenset({Ops.ADD, Ops.MUL, Ops.AND, Ops.OR, Ops.MAX})
  Comparison = frozenset({Ops.CMPLT, Ops.CMPNE})
  # f(0) != 0 (or undefined): padding, which fills with 0, may not be pushed through these
  UnsafePad = frozenset({Ops.RECIP, Ops.LOG2, Ops.EXP2, Ops.IDIV, Ops.MOD})  # MOD too: x%0 is undefined in C
  # ops that become their own kernel (or no kernel), never fused
  Meta = frozenset({Ops.COPY, Ops.EMPTY, Ops.BUFFER_VIEW})
  Buffer = frozenset({Ops.LOAD, Ops.PRELOAD, Ops.STORE, Ops.VALID})
  Movement = frozenset({Ops.VIEW})
