"""Evidence beyond the inputs: proofs with an SMT solver (z3) that hold for every value, not only the values a stored
input happens to reach. `smt` states UOp expressions as z3 formulas with the device's semantics; `rules` proves the
compiler's integer rewrite rules; `indexing` proves each captured kernel's loads and stores stay inside their buffers.
z3 (`pip install z3-solver`, the `proofs` extra) is optional: without it these say so and do nothing."""
