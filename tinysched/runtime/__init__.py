"""Device backends: the NUMPY reference interpreter and OpenCL. They register with device.py's registry here (device.py
imports no backend: the backends build on it); realize.py imports this package, so a schedule always finds them."""
from tinysched.device import DeviceError, register_backend
from tinysched.runtime.interpreter import NumpyBackend

def _opencl(name: str):
  try: from tinysched.runtime.opencl import OpenCLBackend  # keeps import tinysched fast: pyopencl and the codegen load at the first OpenCL device
  except ImportError as e: raise DeviceError(f"device {name} is not available in this build") from e
  return OpenCLBackend(name)

def _opencl_available() -> bool:
  try: from tinysched.runtime.opencl import opencl_available  # keeps import tinysched fast: pyopencl loads when the default device is chosen
  except ImportError: return False
  return opencl_available()

register_backend("NUMPY", NumpyBackend)
register_backend("OPENCL", _opencl, _opencl_available)
