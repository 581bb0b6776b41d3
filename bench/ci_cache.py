"""Cold CI against warm CI: the main job run once with empty cache folders (a fresh CI machine) and again with the same
folders kept (what the GitHub workflow's cache steps restore), side by side in one run, with what each run added to the
caches: a warm run on unchanged code should compile nothing.

  python bench/ci_cache.py                       # the main job (scripts/replay.sh's `replay check ...` line), whole
  python bench/ci_cache.py --shards 4            # as ci/github/replay.yml's replay jobs: shard I/4, each its own caches
  python bench/ci_cache.py --job gate            # REPLAY_EXEC=all bash ci/replay-gate (the end of scripts/test.sh:
                                                 # --exec-all, --reoptimize, and proofs when z3 is installed)
  python bench/ci_cache.py --each --code-change  # plus: each cache folder emptied alone; a run after a code change
  python bench/ci_cache.py --out bench/results/ci-cache-DATE.txt   # appended to the file

The code measured is a snapshot of this checkout (its tracked and untracked, not ignored files, copied to a temporary
folder and byte-compiled as scripts/setup.sh does), run from there (PYTHONPATH): edits made in the checkout while the
bench runs do not change the code between the cold and the warm run.

The cache folders, each empty at the cold run and kept for the warm runs:
  TINYSCHED_CACHE      tinysched's disk caches: OpenCL binaries and batch pointers (opencl/), rendered programs (programs/,
                       with TINYSCHED_PROGRAM_CACHE=1 as scripts/replay.sh sets it), batch-compile markers (precompiled/)
  POCL_CACHE_DIR       PoCL's kernel cache: one folder per program it compiled (source, options, device), work-group
                       functions inside
  REPLAY_PROOF_CACHE   proof results (only a job that proves writes there)
  XDG_CACHE_HOME       anything else that caches under ~/.cache (pyopencl's and pytools' caches, ...): listed when written

What each run added: PoCL programs (new program folders: programs PoCL compiled from source) and files; tinysched's
rendered programs (program-cache misses, stored: a program with symbolic launch sizes is never stored), OpenCL entries,
batch-compile markers; proof entries. `--each` adds one run per cache folder with only that one emptied (what each is
worth). `--code-change` adds a run after a comment is appended to a tinysched module in the snapshot (a new code
fingerprint: the workflow's restore-keys case): rendered programs are then not trusted (misses), while PoCL's and the
OpenCL entries, keyed by the kernel source and the device, still hit.
CPU seconds are user + system of the job and every descendant it waited for (getrusage(RUSAGE_CHILDREN)).
"""
from __future__ import annotations
import argparse, os, platform, resource, shutil, subprocess, sys, tempfile, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from main_job import _script_args, _script_env  # noqa: E402

CHANGE = "\n# bench/ci_cache.py: a code change (a new code fingerprint)\n"
CACHES = {"tinysched": "TINYSCHED_CACHE", "pocl": "POCL_CACHE_DIR", "proofs": "REPLAY_PROOF_CACHE", "xdg": "XDG_CACHE_HOME"}

def _git(*args: str) -> str: return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout

def snapshot(dst: Path) -> str:
  """Copy the checkout's files (tracked, and untracked ones git does not ignore) to dst; returns `git describe --dirty`."""
  for rel in _git("ls-files", "-z", "--cached", "--others", "--exclude-standard").split("\0"):
    src = ROOT / rel
    if not rel or not src.is_file(): continue  # (a file deleted in the working tree is listed, and not copied)
    (dst / rel).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src, dst / rel)
  subprocess.run([sys.executable, "-m", "compileall", "-q", "tinysched", "replay"], cwd=dst, capture_output=True)
  return _git("describe", "--always", "--dirty").strip()

def machine(tree: Path, env: dict[str, str]) -> str:
  cpu = next((l.split(":", 1)[1].strip() for l in Path("/proc/cpuinfo").read_text().splitlines() if l.startswith("model name")), platform.machine())
  mem = next((int(l.split()[1]) / 2**20 for l in Path("/proc/meminfo").read_text().splitlines() if l.startswith("MemTotal")), 0.0)
  r = subprocess.run([sys.executable, "-c", "import pyopencl as cl; p = cl.get_platforms()[0]; print(p.version, '/', p.get_devices()[0].name)"],
                     cwd=tree, env=env, capture_output=True, text=True)
  cl = r.stdout.strip() or "no OpenCL platform"
  return f"{platform.node()}: {cpu}, {os.cpu_count()} cores, {mem:.0f} GiB, Python {platform.python_version()}, OpenCL {cl}"

def census(folders: dict[str, Path]) -> dict[str, int]:
  """Counts of what the cache folders hold (PoCL's half-written tempfile_* leftovers not counted)."""
  out: dict[str, int] = {}
  for name, f in folders.items():
    files = [p for p in f.rglob("*") if p.is_file() and not p.name.startswith(("tempfile_", ".tmp-"))] if f.exists() else []
    out[f"{name} files"] = len(files)
    out[f"{name} bytes"] = sum(p.stat().st_size for p in files)
    if name == "pocl": out["pocl programs"] = sum(1 for p in f.glob("*/*") if p.is_dir()) if f.exists() else 0
    if name == "tinysched":
      for sub in ("programs", "opencl", "precompiled"): out[f"tinysched {sub}"] = sum(1 for p in files if p.relative_to(f).parts[0] == sub)
    if name == "xdg":  # which tools wrote there: the first folder level
      for p in files: out[f"xdg {p.relative_to(f).parts[0]}"] = out.get(f"xdg {p.relative_to(f).parts[0]}", 0) + 1
  return out

def job(tree: Path, kind: str, shard: str | None, report_dir: Path) -> tuple[list[str], dict[str, str]]:
  """The command line and the environment of the job, run with the snapshot's code."""
  venv_bin = str(Path(sys.executable).parent)
  env = {"PYTHONPATH": str(tree), "PATH": f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}"}
  shard_args = ["--shard", shard] if shard else []
  if kind == "main":  # what scripts/replay.sh runs after its set-up: its exports and its `exec replay check ...` line
    env.update(_script_env(tree))
    return [sys.executable, "-m", "replay.cli", *_script_args(tree), *shard_args], env
  env.update(REPLAY_EXEC="all", REPLAY_REPORT_DIR=str(report_dir), REPLAY=f"{sys.executable} -m replay.cli")
  return ["bash", "ci/replay-gate", *sorted(str(p.relative_to(tree)) for p in (tree / "captures").glob("*.db")), *shard_args], env

def _children_cpu() -> float:
  r = resource.getrusage(resource.RUSAGE_CHILDREN)
  return r.ru_utime + r.ru_stime

def run(tree: Path, cmd: list[str], env: dict[str, str], folders: dict[str, Path], log: Path) -> dict:
  full = {**os.environ, **env, **{CACHES[n]: str(f) for n, f in folders.items()}}
  before = census(folders)
  load, cpu0, t0 = os.getloadavg()[0], _children_cpu(), time.perf_counter()
  with open(log, "w") as out: rc = subprocess.run(cmd, cwd=tree, env=full, stdout=out, stderr=subprocess.STDOUT).returncode
  wall, cpu = time.perf_counter() - t0, _children_cpu() - cpu0
  after = census(folders)
  added = {k: after.get(k, 0) - before.get(k, 0) for k in sorted(set(after) | set(before)) if after.get(k, 0) != before.get(k, 0)}
  return {"wall": wall, "cpu": cpu, "rc": rc, "load": f"{load:.2f}->{os.getloadavg()[0]:.2f}", "added": added, "after": after}

def _added(r: dict, key: str) -> str: return str(r["added"].get(key, 0))

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--job", choices=["main", "gate"], default="main", help="main: scripts/replay.sh's check; gate: REPLAY_EXEC=all ci/replay-gate")
  ap.add_argument("--shards", type=int, default=1, help="run the job as N shards (--shard I/N), each with its own cache folders")
  ap.add_argument("--warm", type=int, default=2, help="warm runs after the cold one (default 2)")
  ap.add_argument("--each", action="store_true", help="after the warm runs, one run per cache folder with only that folder emptied")
  ap.add_argument("--code-change", action="store_true", help="one more run after a comment is appended to a tinysched module")
  ap.add_argument("--out", type=Path, help="also append the table to this file")
  a = ap.parse_args()
  with tempfile.TemporaryDirectory(prefix="ci-cache-") as tmp_:
    tmp = Path(tmp_)
    tree = tmp / "tree"
    rev = snapshot(tree)
    cmd0, env0 = job(tree, a.job, None, tmp / "report")
    shown = " ".join([Path(cmd0[0]).name, *cmd0[1:12]] + (["..."] if len(cmd0) > 12 else []) + ([f"--shard I/{a.shards}"] if a.shards > 1 else []))
    exports = " ".join(f"{k}={v}" for k, v in env0.items() if k not in ("PATH", "PYTHONPATH"))
    argv = " ".join(["python bench/ci_cache.py", *sys.argv[1:]])
    head = [f"# {time.strftime('%Y-%m-%d %H:%M %Z')}, {rev} (snapshot of the working tree), {argv}",
            f"# {machine(tree, {**os.environ, **env0})}", f"# job: {shown}; env {exports}"]
    print("\n".join(head), file=sys.stderr)
    rows: list[tuple[str, str, dict]] = []
    for i in range(a.shards):
      shard = f"{i}/{a.shards}" if a.shards > 1 else None
      folders = {n: tmp / f"cache-{i}" / n for n in CACHES}
      cmd, env = job(tree, a.job, shard, tmp / "report")
      def step(label: str) -> None:
        print(f"ci_cache: shard {shard or 'all'}: {label} ...", file=sys.stderr)
        rows.append((shard or "all", label, run(tree, cmd, env, folders, tmp / f"log-{i}-{len(rows)}.txt")))
        print(f"ci_cache:   {rows[-1][2]['wall']:.1f} s, exit {rows[-1][2]['rc']}, added {rows[-1][2]['added']}", file=sys.stderr)
      for label in ["cold"] + [f"warm {k + 1}" for k in range(a.warm)]: step(label)
      if a.each:  # one folder emptied, the others kept: what each cache is worth
        for name, f in folders.items():
          if not any(p.is_file() for p in f.rglob("*")): continue
          f.rename(f.with_name(f"{name}.kept"))
          step(f"only {name} empty")
          shutil.rmtree(f, ignore_errors=True)
          f.with_name(f"{name}.kept").rename(f)
      if a.code_change:
        mod = tree / "tinysched/helpers.py"
        mod.write_text(mod.read_text() + CHANGE)
        step("code changed")
        mod.write_text(mod.read_text().removesuffix(CHANGE))
    lines = head + ["", "| shard | run | wall s | CPU s | load (1-min, before->after) | exit | PoCL programs built | PoCL files added "
                    "| rendered programs stored (program-cache misses) | OpenCL entries added | batch-compile markers | proof entries added "
                    "| other ~/.cache files added |", "|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for shard, label, r in rows:
      other = ", ".join(f"{k[4:]}: {v}" for k, v in r["added"].items() if k.startswith("xdg ") and k != "xdg bytes" and k != "xdg files") or "0"
      lines.append(f"| {shard} | {label} | {r['wall']:.1f} | {r['cpu']:.1f} | {r['load']} | {r['rc']} | {_added(r, 'pocl programs')} | "
                   f"{_added(r, 'pocl files')} | {_added(r, 'tinysched programs')} | {_added(r, 'tinysched opencl')} | "
                   f"{_added(r, 'tinysched precompiled')} | {_added(r, 'proofs files')} | {other} |")
    if a.shards > 1:
      for label in dict.fromkeys(lbl for _, lbl, _ in rows):
        sel = [r for _, lbl, r in rows if lbl == label]
        lines.append(f"| all shards | {label} (sum) | {sum(r['wall'] for r in sel):.1f} | {sum(r['cpu'] for r in sel):.1f} | | "
                     f"{max(r['rc'] for r in sel)} | {sum(int(_added(r, 'pocl programs')) for r in sel)} | "
                     f"{sum(int(_added(r, 'pocl files')) for r in sel)} | {sum(int(_added(r, 'tinysched programs')) for r in sel)} | "
                     f"{sum(int(_added(r, 'tinysched opencl')) for r in sel)} | {sum(int(_added(r, 'tinysched precompiled')) for r in sel)} | "
                     f"{sum(int(_added(r, 'proofs files')) for r in sel)} | |")
    sizes = {}
    for shard, label, r in rows:
      if label == "cold": sizes[shard] = r["after"]
    lines.append("")
    for shard, s in sizes.items():
      lines.append(f"cache folders after the cold run of shard {shard}: " + ", ".join(
        f"{n} {s.get(f'{n} files', 0)} files {s.get(f'{n} bytes', 0) / 2**20:.1f} MiB" for n in CACHES))
  text = "\n".join(lines) + "\n"
  print(text)
  if a.out:
    a.out.parent.mkdir(parents=True, exist_ok=True)
    with open(a.out, "a") as f: f.write(("\n" if f.tell() else "") + text)

if __name__ == "__main__": main()
