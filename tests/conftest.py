import os, sys
# The suite runs on the device named by TINYSCHED_DEVICE; without it, on the NUMPY reference interpreter
# (the OpenCL run sets TINYSCHED_DEVICE=OPENCL explicitly).
os.environ.setdefault("TINYSCHED_DEVICE", "NUMPY")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
