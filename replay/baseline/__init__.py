"""The committed baseline: accept, the CI gate, commits, distill, coverage, the model suite, the pytest plugin."""
