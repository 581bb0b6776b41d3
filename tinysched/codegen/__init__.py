"""Code generation: kernel AST + optimization choices -> OpenCL C.

kernel.py (axes and Opts), lowerer.py (AST -> linear loop program: the pass pipeline LOWERING_PASSES),
folds.py (closed forms of reduces), emit.py (placing nodes into loop scopes), narrow.py (32-bit index
types where exact), rebuild.py (small graph builders), provenance.py (which pass or rule made each
node), opencl.py (rendering), tc_match.py and tensor_core.py (matmuls on NVIDIA's tensor cores: which kernels, and
their template), heuristic.py (default Opts per device), program.py (`to_program`, the
pure entry point).
"""
from tinysched.codegen.target import Target, GENERIC_GPU, GENERIC_CPU
from tinysched.codegen.kernel import Opt, OptOps, Kernel, KernelError, KernelOptError
from tinysched.codegen.opencl import UnsupportedDTypeError
from tinysched.codegen.program import Program, to_program
from tinysched.codegen.heuristic import default_opts

__all__ = ["Target", "GENERIC_GPU", "GENERIC_CPU", "Opt", "OptOps", "Kernel", "KernelError", "KernelOptError", "UnsupportedDTypeError",
           "Program", "to_program", "default_opts"]
