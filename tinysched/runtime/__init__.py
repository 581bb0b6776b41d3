"""Device backends: the NUMPY reference interpreter and OpenCL."""
