"""The scheduler's passes, one module each, in the order `tinysched/schedule.py` runs them:

  bigraph     lazy graph -> one UOp graph (each computed buffer a VIEW(BUFFER, op))
  stores      which buffers must be stored to memory (outputs, meta ops, expands, unsafe pads) and the cut into kernels
  fusion      grouping around reductions: which stores share a kernel
  kernel_ast  one kernel's pre-sink -> its AST (views pushed to the loads and stores, buffers numbered)
  order       the kernels in an order that respects data and assign dependencies
"""
