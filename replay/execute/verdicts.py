"""The execution check's verdicts that fail, in one place (the check's exit code, the reports and the gate read them).

Worst first: a number that disagrees with the independent reference, then old vs new, then nondeterminism, then
kernels whose numbers could not be checked at all."""
FAIL_VERDICTS = ("wrong", "mismatch", "unstable", "failed", "timeout")   # always fail the gate, [replay:accept] or not
EXIT_2_VERDICTS = ("failed", "timeout")                                   # the check itself could not decide: exit 2
# Not a verdict but a replay outcome (replay/check/replayer.py): `unstable` (the determinism check: an output that differs in
# another process, by hash seed or allocation order) fails the gate whatever the marker says too; it is a finding about
# the code like `mismatch`, so it exits 1
