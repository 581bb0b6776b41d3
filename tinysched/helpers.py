"""Small, dependency-free utilities shared by every module."""
from __future__ import annotations
import contextlib, contextvars, functools, itertools, math, os
from typing import Iterable, TypeVar, Any

T = TypeVar("T")

def prod(xs: Iterable[Any], start: Any = 1) -> Any: return math.prod(xs, start=start)  # start * x0 * x1 ..., any objects with *
def dedup(xs: Iterable[T]) -> list[T]: return list(dict.fromkeys(xs))  # keeps first-seen order: deterministic
def all_int(xs: Iterable[Any]) -> bool: return all(type(x) is int for x in xs)
def all_same(xs: list[Any]) -> bool: return all(x == xs[0] for x in xs[1:])
def argsort(xs: list[Any]) -> list[int]: return sorted(range(len(xs)), key=xs.__getitem__)
def flatten(xss: Iterable[Iterable[T]]) -> list[T]: return list(itertools.chain.from_iterable(xss))
def merge_dicts(ds: Iterable[dict]) -> dict:
  out: dict = {}
  for d in ds:
    for k, v in d.items():
      if k in out and out[k] != v: raise ValueError(f"cannot merge dicts: key {k} has values {out[k]} and {v}")
      out[k] = v
  return out
def make_tuple(x: int | Iterable[int], n: int) -> tuple[int, ...]: return (x,)*n if isinstance(x, int) else tuple(x)
def round_up(x: int, a: int) -> int: return (x + a - 1) // a * a

def _env_as(key: str, default: Any) -> Any:
  """The environment variable `key` converted to the type of `default`, or `default` when it is not set."""
  raw = os.environ.get(key)
  return default if raw is None else type(default)(raw)

@functools.lru_cache(maxsize=None)
def getenv(key: str, default: Any = 0) -> Any:
  """_env_as, read once per (key, default) for the process; tests that change the environment clear the cache."""
  return _env_as(key, default)
DEBUG = getenv("DEBUG", 0)

# *** flags readable from the environment and overridable in a `with Context(NAME=value):` block ***
_CONTEXT: contextvars.ContextVar[dict[str, Any]] = contextvars.ContextVar("tinysched_context", default={})

class ContextFlag:
  """A switch: the innermost `Context(key=...)` value if one is active, else the environment (read at each use, so a
  test may set it), else `default`. Truthiness and int() give its value."""
  def __init__(self, key: str, default: Any = 0): self.key, self.default = key, default
  @property
  def value(self) -> Any:
    ctx = _CONTEXT.get()
    return ctx[self.key] if self.key in ctx else _env_as(self.key, self.default)
  def __bool__(self) -> bool: return bool(self.value)
  def __int__(self) -> int: return int(self.value)
  def __repr__(self) -> str: return f"ContextFlag({self.key}={self.value!r})"

@contextlib.contextmanager
def Context(**flags: Any):
  """`with Context(FUSE_ARANGE=1): ...` overrides ContextFlags for the block (per thread / async task)."""
  token = _CONTEXT.set({**_CONTEXT.get(), **flags})
  try: yield
  finally: _CONTEXT.reset(token)

# scheduler switch (tinygrad 0.10.0, where it defaults off): recompute an arange (a sum of masked constants) inside
# the kernels that read it, where codegen folds it to a closed form. On by default here: without it an embedding
# lookup costs vocab x tokens x dim (GPT-2's 50257 x 768 over 64 tokens: 1,686 ms instead of ~1 ms on PoCL).
# FUSE_ARANGE=0 gives the seed's default schedule exactly.
FUSE_ARANGE = ContextFlag("FUSE_ARANGE", 1)

def cdiv(a: int, b: int) -> int:
  """C-style integer division (truncates toward zero), the semantics of Ops.IDIV."""
  q = abs(a) // abs(b)
  return q if (a < 0) == (b < 0) else -q
def cmod(a: int, b: int) -> int:
  """C-style remainder (sign of the dividend), the semantics of Ops.MOD."""
  return a - b * cdiv(a, b)
