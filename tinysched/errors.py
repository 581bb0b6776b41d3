"""Exception types of the Tensor API that are catchable both ways: as the Python type our messages always had
(ValueError, TypeError, IndexError, KeyError) and as the type tinygrad raises for the same mistake (RuntimeError, or
AttributeError for an unknown dtype name), so user code written against either keeps working. Each adds no behaviour."""

class ShapeError(ValueError, RuntimeError):
  """Shapes that do not fit: a bad reshape, a broadcast, expand, permute, pad, shrink, cat/stack, matmul or conv
  mismatch."""

class MaskShapeError(ShapeError, IndexError):
  """A boolean mask index `x[mask]` whose shape is not x's leading dims (torch raises IndexError for it)."""

class AxisError(IndexError, RuntimeError):
  """A dimension (axis) out of range for the tensor's shape."""

class DTypeError(TypeError, RuntimeError):
  """A dtype an op cannot take (an int-only op on floats, an assign across dtypes)."""

class DTypeNameError(KeyError, AttributeError):
  """An unknown dtype name (tinygrad's `getattr(dtypes, name)` raises AttributeError)."""

class ArgumentError(ValueError, RuntimeError):
  """An argument, or a combination of arguments, an op does not take (a fill value with a non-constant pad mode,
  attn_mask together with is_causal): torch raises RuntimeError for these."""

class JitError(ValueError, RuntimeError):
  """A TinyJit call that cannot replay its recording: an input of another shape, dtype, device or layout than the
  recorded call's, a changed plain argument, or a function the jit cannot record (tinysched/jit.py)."""
