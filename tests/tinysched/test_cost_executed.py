"""The cost model's two counts (tinysched/cost.py): the AST's (what GlobalCounters counts) and what a lowered kernel
executes (what throughput is measured in). Neither may claim work the kernel does not do: a gather reads the rows it
needs, not the table; an arange is computed in closed form; a shrink of a buffer reaches the shrink; a broadcast
reads its source once."""
import numpy as np
import pytest
from tinysched import Tensor, Variable, nn
from tinysched.codegen.program import to_program
from tinysched.codegen.target import GENERIC_GPU, POCL_CPU
from tinysched.cost import ProgramCost, kernel_cost, kernel_flops, throughput_cost
from tinysched.ops import Ops
from tinysched.realize import kernel_vars

def kernels(t: Tensor) -> list:
  return [si for si in t.schedule_with_vars()[0] if si.ast.op is Ops.SINK]

def costs(si, target=GENERIC_GPU, var_vals=None) -> tuple[tuple[int, int], tuple[int, int]]:
  """(AST model's (FLOPs, bytes), executed (FLOPs, bytes)) of one scheduled kernel."""
  sizes, its = {i: b.size for i, b in enumerate(si.bufs)}, {i: b.dtype.itemsize for i, b in enumerate(si.bufs)}
  prg = to_program(si.ast, None, target)
  return kernel_cost(si.ast, sizes, its, var_vals), throughput_cost(si.ast, prg.cost, sizes, its, var_vals)

@pytest.mark.parametrize("target", [GENERIC_GPU, POCL_CPU])
@pytest.mark.parametrize("m,k,n", [(64, 32, 16), (33, 7, 5), (128, 256, 64)])
def test_a_matmul_executes_at_least_its_multiply_adds_and_moves_each_buffer_once(target, m, k, n):
  (si,) = kernels(Tensor(np.ones((m, k), np.float32)) @ Tensor(np.ones((k, n), np.float32)))
  (af, ab), (ef, eb) = costs(si, target)
  assert af == 2 * m * n * k and ab == (m * k + k * n + m * n) * 4
  # a split reduce adds its partial sums (a tree over the work-group, each level by the threads it lets through)
  assert 2 * m * n * k <= ef <= 2 * m * n * k + 2 * m * n * 1024 and eb == ab

def test_a_tree_reduce_counts_only_the_threads_its_gates_let_through():
  (si,) = kernels(Tensor(np.ones((64, 32), np.float32)) @ Tensor(np.ones((32, 16), np.float32)))
  prg = to_program(si.ast, None, GENERIC_GPU)
  # 64x16 outputs, 32 partial products each (1024 per group of 16 outputs x 32 threads x 2), then 16 + 8 + 4 + 2 + 1
  # adds per output in the tree: the gate `lidx0 < 16` lets 16 of 32 threads through, and so on
  if [o for o in prg.opts if o.op.name == "GROUP"]: assert prg.cost.at()[0] == 2 * 64 * 16 * 32 + 64 * 16 * 31

def test_a_sum_is_counted_alike_by_both():
  (si,) = kernels(Tensor(np.ones((300, 200), np.float32)).sum(1))
  (af, ab), (ef, eb) = costs(si)
  assert af == ef == 60000 and eb == ab == (60000 + 300) * 4

def test_a_sum_of_constants_is_closed_form_in_both():
  (si,) = kernels(Tensor.arange(1000) * 2.0)
  assert costs(si)[1][0] == 1000  # the MUL; the arange is folded (codegen/folds.py)
  (si,) = kernels(Tensor.ones(1000).cumsum())
  (af, _), (ef, _) = costs(si)
  assert ef <= 1000              # a masked sum of ones per element: closed form
  assert af <= 3 * 1000          # the AST model: a reduce that loads nothing counts per output element, not 1000 x 1000

def test_a_gather_reads_the_rows_it_needs_not_the_table():
  vocab, dim, n = 5000, 64, 3
  emb = nn.Embedding(vocab, dim)
  emb.weight.realize()
  sis = kernels(emb(Tensor(np.array([1, 2, 3], np.int32))))
  (af, ab), (ef, eb) = costs(sis[-1])
  assert af >= vocab * dim * n                 # the AST: a one-hot sum over the vocabulary
  assert ef <= n * dim * 4                     # executed: the gather codegen made of it
  assert eb <= (n * dim * 2 + n) * 4 < ab      # the rows read and written, the tokens

def test_a_shrink_reaches_the_shrink_and_a_broadcast_its_source_once():
  big = Tensor(np.ones(4096, np.float32)).realize()
  (si,) = kernels(big[100:110] * 3)
  (_, ab), (_, eb) = costs(si)
  assert ab == eb == (10 + 10) * 4
  x, y = Tensor(np.ones(50, np.float32)).realize(), Tensor(np.ones(70, np.float32)).realize()
  (si,) = kernels(x.reshape(50, 1) + y.reshape(1, 70))
  (_, ab), (_, eb) = costs(si)
  assert ab == eb == (50 + 70 + 50 * 70) * 4

def test_symbolic_sizes_count_at_the_values_given():
  x = Tensor(np.ones(64, np.float32)).realize()
  for n in (5, 40):
    v = Variable("n", 1, 64).bind(n)
    (si,) = kernels(x[:v] * 2)
    (var,) = kernel_vars(si.ast)
    (af, ab), (ef, eb) = costs(si, var_vals={var: n})
    assert kernel_flops(si.ast, {var: n}) == af and ef == n and ab == eb == (n + 64) * 4 - (64 - n) * 4

def test_the_least_of_three_bounds_holds_the_bytes():
  (si,) = kernels(Tensor(np.ones(100, np.float32)) + 1)
  sizes, its = {0: 100, 1: 100}, {0: 4, 1: 4}
  assert throughput_cost(si.ast, ProgramCost(100, (100, 100)), sizes, its) == (100, 800)
  assert throughput_cost(si.ast, ProgramCost(100, (7, 3)), sizes, its) == (100, 40)     # what the program touches
  assert throughput_cost(si.ast, ProgramCost(100, (10**9, 10**9)), {0: 20, 1: 20}, its) == (100, 160)  # the buffers' sizes
