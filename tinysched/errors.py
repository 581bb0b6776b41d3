"""Exception types of the Tensor API that are catchable every way user code catches the same mistake: as the Python type
our messages always had (ValueError, TypeError, IndexError, KeyError), as the type torch raises (mostly RuntimeError) and
as the type tinygrad 0.10.0 raises (it checks most shapes and arguments with `assert`: AssertionError; AttributeError for
an unknown dtype name), so code written against either keeps working. Each adds no behaviour."""

class ShapeError(ValueError, RuntimeError, AssertionError):
  """Shapes that do not fit: a bad reshape (a negative dimension included), a broadcast, expand, permute, pad, shrink,
  cat/stack, matmul, conv, gather or einsum mismatch, a negative dimension given to a creation function."""

class IndexShapeError(ShapeError, IndexError):
  """Index arrays of an advanced index that do not broadcast together (numpy, torch and tinygrad raise IndexError)."""

class MaskShapeError(IndexShapeError):
  """A boolean mask index `x[mask]` whose shape is not x's leading dims (torch raises IndexError for it)."""

class IndexTypeError(IndexError, TypeError):
  """An index of a type indexing does not take (a float, a str, a bool): numpy, torch and tinygrad raise IndexError."""

class AxisError(IndexError, RuntimeError):
  """A dimension (axis) out of range for the tensor's shape."""

class DTypeError(TypeError, RuntimeError, AssertionError):
  """A dtype an op cannot take (an int-only op on floats, an assign across dtypes), or data no dtype stands for."""

class DTypeNameError(KeyError, AttributeError):
  """An unknown dtype name (tinygrad's `getattr(dtypes, name)` raises AttributeError)."""

class ArgumentError(ValueError, RuntimeError, AssertionError):
  """An argument, or a combination of arguments, an op does not take (a fill value with a non-constant pad mode,
  attn_mask together with is_causal, a count out of range, an unknown mode name, an einsum with the wrong number of
  operands): torch raises RuntimeError for these, tinygrad 0.10.0 mostly AssertionError."""

class JitError(ValueError, RuntimeError):
  """A TinyJit call that cannot replay its recording: an input of another shape, dtype, device or layout than the
  recorded call's, a changed plain argument, or a function the jit cannot record (tinysched/jit.py)."""
