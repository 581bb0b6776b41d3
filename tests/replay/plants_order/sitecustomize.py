"""Planted nondeterminism for tests/replay/test_gate_determinism.py, applied in *every* Python process that starts with
this folder first on PYTHONPATH and TINYSCHED_TEST_ORDER_PLANT set: the `replay` CLI, its pool workers, and the fresh
processes the determinism check replays in, as a user's change on disk would be.

Both plants make the scheduler order the sources of ADD and MUL nodes by iterating a set, after full_ast_rewrite (a
kernel has many such nodes, each a chance for two processes to disagree):
- `id_order`: a set of the source UOps. A UOp hashes by identity, so the order follows the nodes' addresses: the same
  under every PYTHONHASHSEED, and another one where the allocation history differs;
- `str_order`: a set of the sources' content keys (hex strings), whose order follows PYTHONHASHSEED alone.
"""
import os

def _in_set_order(order):
  from tinysched import schedule as S
  from tinysched.ops import Ops
  from tinysched.rewrite import PatternMatcher, UPat, graph_rewrite
  def reorder(x):
    srcs = order(x.src)
    if srcs is None or len(srcs) != len(x.src): return None  # a repeated source: nothing to order
    n = x.replace(src=tuple(srcs))
    return None if n is x else n
  pm = PatternMatcher([(UPat((Ops.ADD, Ops.MUL), name="x"), reorder, "in_set_order")], name="in_set_order")
  orig = S.full_ast_rewrite
  def patched(pre, var_vals, assigned, memo=None):
    ast, ctx = orig(pre, var_vals, assigned, memo)
    return graph_rewrite(ast, pm), ctx
  S.full_ast_rewrite = patched

def _by_keys(src):
  keys = set(sorted(s.key for s in src))  # inserted in one order: the iteration order depends on the str hashes alone
  by_key = {s.key: s for s in src}
  return [by_key[k] for k in keys] if len(keys) == len(src) else None

def _by_identity(src):
  # inserted in one order (by key), so that the iteration order depends on the addresses alone (and a node rewritten
  # to its new order keeps it: no rewrite loop)
  return list(set(sorted(src, key=lambda s: s.key)))

PLANTS = {"id_order": lambda: _in_set_order(_by_identity), "str_order": lambda: _in_set_order(_by_keys)}

if (_name := os.environ.get("TINYSCHED_TEST_ORDER_PLANT")):
  PLANTS[_name]()
