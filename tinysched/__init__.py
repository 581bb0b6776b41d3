"""tinysched: a lazy-tensor compiler (scheduler, codegen, runtime) built for process replay.

Named `tinysched`, not `sched`: the standard library has a `sched` module that would shadow it.
"""
from tinysched.dtype import dtypes, DType
from tinysched.ops import Ops, GroupOp
from tinysched.uop import UOp, Variable, sint, resolve
from tinysched.rewrite import UPat, PatternMatcher, graph_rewrite
from tinysched.shape import View, ShapeTracker
from tinysched.device import Device
from tinysched.tensor import Tensor
from tinysched.errors import ShapeError, AxisError, DTypeError, DTypeNameError, ArgumentError, JitError, MaskShapeError
from tinysched.jit import TinyJit
from tinysched.helpers import GlobalCounters
from tinysched import nn

__all__ = ["dtypes", "DType", "Ops", "GroupOp", "UOp", "Variable", "sint", "resolve", "UPat", "PatternMatcher", "graph_rewrite", "View",
           "ShapeTracker", "Device", "Tensor", "nn",
           "ShapeError", "AxisError", "DTypeError", "DTypeNameError", "ArgumentError", "MaskShapeError", "TinyJit", "JitError", "GlobalCounters"]

from tinysched import capture_hook as _capture_hook
_capture_hook.autoload()
