"""Instructions per schedule() call, ours and tinygrad 0.10.0's, counted by valgrind (callgrind): the same ratios as
bench/schedule.py, without the box's noise. This 2-core VM's speed drifts by up to 2x within minutes, so a timed
ratio of two ~3 ms calls moves by +-0.1 from one run to the next; an instruction count moves by ~0.3% (same
inputs, PYTHONHASHSEED=0). Instructions are not time (cache misses and branch costs differ per instruction), so
this complements the timed bench rather than replacing it; both go in bench/results.

  python bench/schedule_instructions.py                               # tinysched only
  python bench/schedule_instructions.py --baseline /tmp/tgvenv/bin/python --runs 3
  python bench/schedule_instructions.py --tree /tmp/wt-old       # another checkout's tinysched (same model code)

Needs valgrind and a C compiler (apt-get install valgrind gcc): the worker toggles callgrind's counting around each
schedule() call through a 5-line C helper built here (callgrind's client requests are C macros). Per model and
library, in one process under valgrind, the same sequence as bench/schedule.py: the first schedule of the model
(`first`: for the first model also the process's first), `runs` schedules of the same graph (`warm`: our memo may
serve them) and `runs` with the memo dropped before each (`uncached`); the median of each is reported. Only
schedule() is counted: building the graph and the model's set-up (tinygrad realizes weights on PoCL, slow under
valgrind) are not.
"""
from __future__ import annotations
import argparse, os, platform, re, statistics, subprocess, sys, tempfile, time
from pathlib import Path

HERE = Path(__file__).resolve().parent

HELPER_C = r"""
#include <valgrind/callgrind.h>
void count_start(void) { CALLGRIND_ZERO_STATS; CALLGRIND_START_INSTRUMENTATION; CALLGRIND_TOGGLE_COLLECT; }
void count_stop(const char *label) { CALLGRIND_TOGGLE_COLLECT; CALLGRIND_DUMP_STATS_AT(label); CALLGRIND_STOP_INSTRUMENTATION; }
"""

def build_helper(folder: Path) -> Path:
  src, lib = folder / "count.c", folder / "libcount.so"
  src.write_text(HELPER_C)
  r = subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(lib), str(src)], capture_output=True, text=True)
  if r.returncode != 0:
    sys.exit(f"cannot build the callgrind helper (needs gcc and valgrind's headers: apt-get install gcc valgrind):\n{r.stderr[-2000:]}")
  return lib

def worker(lib: str, models: list[str], runs: int, helper: str, tree: str | None) -> None:
  import ctypes, gc
  count = ctypes.CDLL(helper)
  sys.path.insert(0, str(HERE.parent))  # for bench.models
  from bench.schedule import forget
  from bench.models import MODELS  # (this checkout's model code, whichever tinysched runs it)
  if tree: sys.path.insert(0, tree)  # that checkout's tinysched, ahead of this one
  if lib == "tinygrad":
    os.environ.setdefault("GPU", "1")
    from tinygrad import Tensor
    from tinygrad.nn.optim import Adam
  else:
    from tinysched import Tensor
    from tinysched.nn.optim import Adam
  for name in models:
    setup, forward = MODELS[name](Tensor, Adam)
    try: state = setup()
    except Exception as e:
      print(f"{name}: set-up failed: {type(e).__name__}: {e}", file=sys.stderr)
      continue
    for i in range(1 + 2 * runs):
      label = "first" if i == 0 else "warm" if i <= runs else "uncached"
      if label == "uncached": forget()
      outs = forward(state)
      gc.collect()  # (not counted either way; the counted call then starts from the same heap state each time)
      count.count_start()
      try: outs[0].schedule(*outs[1:])
      except Exception as e:  # a library that cannot schedule a model is a result too (tinygrad 0.10.0 crashes on some)
        count.count_stop(f"error:{name}".encode())
        print(f"{name}: {type(e).__name__}: {str(e)[:80]}", file=sys.stderr)
        break
      count.count_stop(f"{label}:{name}".encode())
      del outs
      gc.collect()

def run_counted(py: str, lib: str, models: list[str], runs: int, helper: Path, out: Path, tree: str | None = None) -> dict[str, dict[str, list[int]]]:
  """{model: {label: [instructions per call]}} from one valgrind process."""
  out.mkdir()
  env = {**os.environ, "PYTHONHASHSEED": "0", "TINYSCHED_DEVICE": os.environ.get("TINYSCHED_DEVICE", "NUMPY")}
  cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--collect-atstart=no", f"--callgrind-out-file={out}/cg",
         py, __file__, "--worker", lib, "--models", ",".join(models), "--runs", str(runs), "--helper", str(helper),
         *(["--tree", tree] if tree else [])]
  r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=HERE.parent)
  if r.returncode != 0: sys.exit(f"{lib} worker failed under valgrind:\n{r.stderr[-3000:]}")
  res: dict[str, dict[str, list[int]]] = {}
  for f in sorted(out.glob("cg.*"), key=lambda p: int(p.suffix[1:]) if p.suffix[1:].isdigit() else -1):
    text = f.read_text(errors="replace")
    label = re.search(r"^desc: Trigger: Client Request: (\S+)$", text, re.M)
    total = re.search(r"^totals: (\d+)", text, re.M) or re.search(r"^summary: (\d+)", text, re.M)
    if label is None or total is None: continue  # the dump valgrind writes at exit: nothing counted since the last
    kind, _, model = label.group(1).partition(":")
    res.setdefault(model, {}).setdefault(kind, []).append(int(total.group(1)))
  for line in r.stderr.splitlines():
    if not line.startswith("=="): print(f"  ({lib}) {line}", file=sys.stderr)
  return res

def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--models", default="mlp,cnn,gpt2,resnet18")
  ap.add_argument("--runs", type=int, default=3)
  ap.add_argument("--baseline", help="python interpreter with tinygrad==0.10.0 installed")
  ap.add_argument("--worker", choices=["tinysched", "tinygrad"], help=argparse.SUPPRESS)
  ap.add_argument("--tree", help="count the tinysched of this checkout instead of this one's (an A/B of two commits)")
  ap.add_argument("--helper", help=argparse.SUPPRESS)
  a = ap.parse_args()
  models = a.models.split(",")
  if a.worker:
    worker(a.worker, models, a.runs, a.helper, a.tree)
    return
  with tempfile.TemporaryDirectory() as tmp:
    helper = build_helper(Path(tmp))
    libs = [("tinysched", sys.executable)] + ([("tinygrad", a.baseline)] if a.baseline else [])
    counts = {}
    for lib, py in libs:
      print(f"counting {lib} under valgrind ...", file=sys.stderr, flush=True)
      counts[lib] = run_counted(py, lib, models, a.runs, helper, Path(tmp) / lib, a.tree if lib == "tinysched" else None)
  code = f"tinysched from {a.tree}" if a.tree else "tinysched from this checkout"
  print(f"# instructions per schedule() call (callgrind, millions; median of {a.runs}; first: one call; {code}) — "
        f"{platform.machine()}, Python {platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M')}\n")
  kinds = ("warm", "uncached", "first")
  hdr, sep = "| model |" + "".join(f" {k} M |" for k in kinds), "|---|" + "---:|" * len(kinds)
  if a.baseline:
    hdr += "".join(f" tinygrad {k} M |" for k in kinds) + "".join(f" {k} ratio |" for k in kinds)
    sep += "---:|" * (2 * len(kinds))
  print(hdr); print(sep)
  med = lambda lib, m, k: statistics.median(counts[lib][m][k]) if k in counts[lib].get(m, {}) else None  # noqa: E731
  for m in models:
    ours = [med("tinysched", m, k) for k in kinds]
    row = f"| {m} |" + "".join(" failed |" if v is None else f" {v / 1e6:.2f} |" for v in ours)
    if a.baseline:
      theirs = [med("tinygrad", m, k) for k in kinds]
      row += "".join(" failed |" if v is None else f" {v / 1e6:.2f} |" for v in theirs)
      row += "".join(" - |" if o is None or t is None else f" {o / t:.3f}x |" for o, t in zip(ours, theirs))
    print(row)

if __name__ == "__main__": main()
