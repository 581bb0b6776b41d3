"""The execution check: run a capture's stored (old) and current (new) kernels on a device, each side on its
own buffers, and check both against an independent reference.

Sides, by capture level:
- kernel: old = the stored AST, new = today's `full_ast_rewrite` of the stored pre-sink; both rendered by
  today's code generator;
- schedule: old = the stored kernel list, new = today's `schedule_graph` of the stored big graph; when the
  lists differ (kernels merged or split), every buffer both write is compared and the report maps old
  kernels to the new ones that write the same buffers;
- program: old = the stored OpenCL source exactly as captured, launched with its captured launch
  dimensions; new = today's codegen for the stored AST and optimization choices.
`replay diff`/`commits` pair two stores instead: both sides are stored, nothing is recomputed.

The reference, which shares no index code with the compiler (the NUMPY interpreter evaluates views from
shape/strides/offset/mask, floats accumulate in float64):
1. every kernel of each side, as it runs, against the interpreter on a copy of the device buffers just
   before it: a device, runtime or codegen bug is caught at the kernel that has it, and errors cannot
   compound along a deep model, so the tolerance stays tight. Outputs that hang on a float decision with
   near-equal operands (a recomputed value compared with a stored max) are left unjudged and counted
   (`undecidable_elements`): no reference that rounds differently from the device can decide them;
2. schedule level: both kernel lists, run by the interpreter from the same inputs, against the
   scheduler's input graph evaluated op by op (`replay.execute.reference`): a realize or fusion bug (a padded
   view over an unsafe op that is no longer realized) shows even when old and new agree.

Verdicts: `equivalent` (old ≈ new, both ≈ reference), `mismatch` (old and new differ), `wrong` (a side
disagrees with the reference, also when old and new agree), `unstable` (a side, run twice on the same
inputs, gives different bits), `failed` (could not compile or run), `timeout`, `skipped` (with the reason).
Nothing is reused between the sides: each is launched on fresh buffers and timed on its own.

Kernels run in worker processes (`python -m replay.execute.worker worker`) fed one job per line, so a kernel that
hangs or crashes the driver becomes `timeout`/`failed` and the check goes on with a fresh worker. A job's
time limit comes from a calibration run and its size (or --timeout); one that times out is retried once
alone with twice the time before it counts.

Timing: one warm-up, then rounds that interleave old, new and old again; each side's time is the minimum
over rounds; the noise is how far the two old series disagree. Sides that run the same kernels are an A/A sample, never
`slower`/`faster` (replay/check/perf.py). With 3 rounds or more, the rounds must also rank that way (Mann-Whitney U, p <
0.05) and a confirmation of as many rounds must agree (replay/execute/timing.py). `slower`/`faster` only beyond
max(threshold, 2 x noise) plus an absolute floor. FLOPs and bytes per kernel come from the AST.

The modules: `inputs` (seeded inputs, comparison and tolerances), `reference` (the scheduler's input
graph evaluated op by op), `jobs` (the job format; where its sides come from), `launch` (one side's kernels on a device
or the interpreter), `timing`, `judge` (one job's verdict), `worker` (the process entry points), `pool` (the parent:
device, calibration, batch compiles, worker processes), `verdicts` (which verdicts fail).
"""
