"""Target: the few facts about a device that code generation depends on.

A Target is part of the input of `to_program(ast, opts, target)`, so it is a small frozen value
with a deterministic text form (`stable_repr`) and a dict form for capture files. The runtime
builds one from a real OpenCL device (`tinysched.runtime.opencl`); tests build fake ones to
exercise limits (no fp16, tiny max_alloc) without special hardware.

has_fp16 picks how half renders (codegen/opencl.py): native `half` arithmetic, or half buffers read and written
with vload_half / vstore_half_rte around float arithmetic (core OpenCL). bfloat16 renders the same on every target.
NVIDIA_LIKE_GPU keeps has_fp16=True (unchanged, so code generated for it is unchanged); a real NVIDIA device probes False (its
compiler has half arithmetic but no half math builtins; runtime/opencl.py).
"""
from __future__ import annotations
import os
from dataclasses import dataclass, fields, asdict, replace
from typing import Any

@dataclass(frozen=True)
class Target:
  name: str = "generic"                # device name as the driver reports it
  vendor: str = ""
  driver_version: str = ""
  max_work_group_size: int = 256       # CL_DEVICE_MAX_WORK_GROUP_SIZE
  max_work_item_sizes: tuple[int, ...] = (256, 256, 64)
  local_mem_size: int = 32768          # bytes of __local memory per work-group
  has_fp16: bool = False               # native half: cl_khr_fp16 listed, or the runtime's probe passed; else half is storage only
  has_fp64: bool = False               # cl_khr_fp64
  max_alloc: int = 1 << 30             # CL_DEVICE_MAX_MEM_ALLOC_SIZE, bytes
  is_gpu: bool = True
  compute_units: int = 1
  tensor_cores: str = ""               # the matrix instructions codegen may use (codegen/tensor_core.py SM80), "" none

  # Fields added after captures existed are left out of both forms while they hold their default, so every capture made
  # before them keeps its key (a program-level input holds the target's dict).
  def _shown(self) -> list[str]: return [f.name for f in fields(self) if f.name not in _OPTIONAL or getattr(self, f.name) != _OPTIONAL[f.name]]
  def stable_repr(self) -> str:
    return "Target(" + ", ".join(f"{n}={getattr(self, n)!r}" for n in self._shown()) + ")"
  def to_dict(self) -> dict[str, Any]:
    d = asdict(self)
    d["max_work_item_sizes"] = list(self.max_work_item_sizes)
    return {n: d[n] for n in self._shown()}
  @staticmethod
  def from_dict(d: dict[str, Any]) -> Target:
    known = {f.name for f in fields(Target)}
    unknown = set(d) - known
    if unknown: raise ValueError(f"unknown Target fields {sorted(unknown)} (known: {sorted(known)})")
    kw = dict(d)
    if "max_work_item_sizes" in kw: kw["max_work_item_sizes"] = tuple(kw["max_work_item_sizes"])
    return Target(**kw)

_OPTIONAL: dict[str, Any] = {"tensor_cores": ""}
SM80 = "sm80"  # tensor_cores: mma.sync m16n8k16 fp16/bf16 -> fp32, ldmatrix and cp.async (NVIDIA compute capability 8.0 on)

# TINYSCHED_TC=0 forbids tensor cores: every Target a device or a name gives then has none (read when one is made)
def tensor_cores_allowed() -> bool:
  raw = os.environ.get("TINYSCHED_TC", "1")
  if raw not in ("0", "1"): raise ValueError(f"TINYSCHED_TC={raw!r}: use 1 (tensor cores where the device has them, the default) or 0 (never)")
  return raw == "1"

# *** the class of a device: the limits code generation can tell apart ***
# A device reports its limits in full (PoCL: 2 MiB of local memory on one build, 1 MiB on another; 4096 or 8192
# work-items), but code generation never asks for more than CLASS_LIMITS: the heuristic's largest work-group is 256
# work-items and its local tiles a few KiB (codegen/heuristic.py; tests/tinysched/test_target_class.py measures both on the
# model suite). Code is generated for the device's class, its limits
# clamped to these, so every device of one class renders every kernel alike and a program-level capture records the
# same input on each (its key names no host). Explicit opts that need more than the class allows are refused as they
# would be on a smaller device.
CLASS_LIMITS = {"max_work_group_size": 1024, "max_work_item_size": 1024, "local_mem_size": 64 << 10}

def device_class(t: Target) -> Target:
  """`t` with its limits clamped to CLASS_LIMITS (a Target within them is returned as is): what `to_program` renders for."""
  wg, wi, lm = CLASS_LIMITS["max_work_group_size"], CLASS_LIMITS["max_work_item_size"], CLASS_LIMITS["local_mem_size"]
  if t.max_work_group_size <= wg and t.local_mem_size <= lm and all(x <= wi for x in t.max_work_item_sizes): return t
  return replace(t, max_work_group_size=min(t.max_work_group_size, wg), max_work_item_sizes=tuple(min(x, wi) for x in t.max_work_item_sizes),
                 local_mem_size=min(t.local_mem_size, lm))

# stand-ins for tests and for rendering without a device
GENERIC_GPU = Target(name="generic-gpu", max_work_group_size=1024, max_work_item_sizes=(1024, 1024, 64), local_mem_size=49152,
                     has_fp16=True, has_fp64=True, max_alloc=1 << 32, is_gpu=True, compute_units=64)
# (the CPUs as their class: a CPU reports more work-items and local memory than code generation uses, device_class)
GENERIC_CPU = device_class(Target(name="generic-cpu", max_work_group_size=4096, max_work_item_sizes=(4096, 4096, 4096), local_mem_size=2 << 20,
                                  has_fp16=False, has_fp64=True, max_alloc=1 << 30, is_gpu=False, compute_units=2))

# *** named targets: code generation for a device that is not present ***
# Descriptions of real device kinds, so a machine without the device can generate (and capture, TINYSCHED_CAPTURE_TARGET)
# its code: work-group limits, local memory size, fp16/fp64, GPU or not, and the compute units the heuristic sizes
# work by. Vector widths are not a field: the code generator emits float4 for every target (codegen/lowerer.py).
POCL_CPU = device_class(Target(name="pocl-cpu", vendor="The pocl project", max_work_group_size=4096, max_work_item_sizes=(4096, 4096, 4096),
                               local_mem_size=2 << 20, has_fp16=False, has_fp64=True, max_alloc=1 << 30, is_gpu=False, compute_units=2))
NVIDIA_LIKE_GPU = Target(name="nvidia-like-gpu", vendor="NVIDIA Corporation", max_work_group_size=1024, max_work_item_sizes=(1024, 1024, 64),
                         local_mem_size=49152, has_fp16=True, has_fp64=True, max_alloc=1 << 34, is_gpu=True, compute_units=132,
                         tensor_cores=SM80)
# the registry: name -> Target (insertion order is the order names are listed in)
TARGETS: dict[str, Target] = {t.name: t for t in (POCL_CPU, NVIDIA_LIKE_GPU, GENERIC_GPU, GENERIC_CPU)}

class UnknownTargetError(KeyError):
  """A target name that is not in TARGETS; the message names it and the known names."""
  def __str__(self) -> str: return str(self.args[0])

def named_target(name: str) -> Target:
  """TARGETS[name], or UnknownTargetError naming `name` and every known name."""
  if name not in TARGETS: raise UnknownTargetError(f"unknown target {name!r}; known targets: {', '.join(TARGETS)}")
  t = TARGETS[name]
  return t if tensor_cores_allowed() else replace(t, tensor_cores="")

__all__ = ["Target", "CLASS_LIMITS", "tensor_cores_allowed", "SM80", "device_class",
           "GENERIC_GPU", "GENERIC_CPU", "POCL_CPU", "NVIDIA_LIKE_GPU", "TARGETS", "named_target", "UnknownTargetError"]
