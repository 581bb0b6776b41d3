import os, sys
# The suite runs on the device named by TINYSCHED_DEVICE; without it, on the NUMPY reference interpreter
# (the OpenCL run sets TINYSCHED_DEVICE=OPENCL explicitly).
os.environ.setdefault("TINYSCHED_DEVICE", "NUMPY")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# the scheduler raises the recursion limit when it is first imported (its fusion walk recurses along chains of
# buffers); importing it here, before any test, keeps that out of hypothesis' per-test recursion-limit check
import tinysched.schedule  # noqa: E402,F401

# `replay accept` captures this suite into the baseline (replay/baseline/extras.py, with --hypothesis-profile=replay-capture):
# the generated examples must be the same in every run (no random seed, no example database), or the distilled store
# would change on an unchanged main
from hypothesis import settings  # noqa: E402
settings.register_profile("replay-capture", derandomize=True, database=None)
