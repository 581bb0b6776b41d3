"""SIGINT and SIGTERM stop a running check at once (replay.process): within seconds, whatever the jobs still queued,
every helper process ended, a partial report written and marked as such, exit 130/143; a worker that a signal from
outside killed is not a `failed` kernel. The jobs are made long by a plant (tests/replay/plants_stop): each sleeps
PLANT_SLOW_SECONDS before it runs, like a long kernel."""
import json, os, signal, subprocess, sys, time
from pathlib import Path
import pytest
import replay
from tinysched import Tensor

ROOT = Path(__file__).resolve().parents[2]
PLANTS = Path(__file__).resolve().parent / "plants_stop"

@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
  """A store of six distinct kernels: six execution jobs."""
  db = tmp_path_factory.mktemp("stop") / "small.db"
  with replay.capture(db, label="s", levels=("kernel",)):
    x = Tensor.arange(24).reshape(4, 6).float()
    for f in (lambda t: t.sum(1), lambda t: t.max(0), lambda t: (t * 2).exp2(), lambda t: t.relu().sqrt(), lambda t: t.T.contiguous(),
              lambda t: t.mean()):
      f(x + 1).realize()
  return db

def _env(tmp: Path, seconds: float, **extra: str) -> dict:
  env = {k: v for k, v in os.environ.items() if not k.startswith(("TINYSCHED_CAPTURE", "PLANT_"))}
  (tmp / "jobs").mkdir(exist_ok=True)
  return {**env, "PYTHONPATH": os.pathsep.join([str(PLANTS), str(ROOT)]), "PLANT_SLOW_JOBS": str(tmp / "jobs"),
          "PLANT_SLOW_SECONDS": str(seconds), "REPLAY_TEST_TOKEN": str(tmp), "TINYSCHED_CACHE": str(tmp / "cache"), **extra}

def _start(db: Path, tmp: Path, seconds: float, preexec=None, **extra: str) -> subprocess.Popen:
  cmd = [sys.executable, "-m", "replay.cli", "check", str(db), "--exec-all", "-j2", "--no-determinism", "--device", "NUMPY",
         "--report-json", str(tmp / "r.json"), "--junit", str(tmp / "j.xml")]
  return subprocess.Popen(cmd, env=_env(tmp, seconds, **extra), cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True, preexec_fn=preexec)

def _wait_busy(tmp: Path, p: subprocess.Popen, n: int = 2, limit: float = 120.0) -> None:
  """Until `n` jobs are running (their plant wrote its file)."""
  t0 = time.monotonic()
  while len(list((tmp / "jobs").iterdir())) < n:
    assert p.poll() is None, p.communicate()
    assert time.monotonic() - t0 < limit, "the workers never started a job"
    time.sleep(0.05)

def _ours(tmp: Path) -> list[int]:
  """Processes still alive that were started for this test's run (they carry its token in their environment)."""
  out = []
  for d in Path("/proc").iterdir():
    if not d.name.isdigit() or int(d.name) == os.getpid(): continue
    try: env = (d / "environ").read_bytes()
    except OSError: continue
    if f"REPLAY_TEST_TOKEN={tmp}".encode() in env.split(b"\0"): out.append(int(d.name))
  return out

def _no_orphans(tmp: Path) -> None:
  deadline = time.monotonic() + 1.0  # (reaping by init may take a moment)
  while (left := _ours(tmp)) and time.monotonic() < deadline: time.sleep(0.05)
  assert not left, f"processes outlived the run: {left}"

pytestmark = pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs /proc to find leftover processes")

@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_stops_a_running_exec_check_at_once(small, tmp_path, sig, code):
  p = _start(small, tmp_path, seconds=60)
  _wait_busy(tmp_path, p)
  t0 = time.monotonic()
  os.killpg(p.pid, sig)  # as a terminal does: the whole foreground group (our workers run in their own sessions)
  out, err = p.communicate(timeout=120)
  took = time.monotonic() - t0
  # the jobs sleep 60 s each: a stop that waited for them (the bug) takes minutes; the limit is loose for a loaded machine
  assert p.returncode == code and took < 10, (p.returncode, took, out, err)
  assert "Traceback" not in err, err
  _no_orphans(tmp_path)
  rep = json.loads((tmp_path / "r.json").read_text())
  assert rep["stopped"] == sig.name and rep["exit_code"] == code, rep.get("stopped")
  verdicts = [r["exec"]["verdict"] for r in rep["results"] if r.get("exec")]
  assert "failed" not in verdicts and "timeout" not in verdicts, verdicts  # stopped kernels are not broken kernels
  assert all(v == "skipped" for v in verdicts), verdicts
  import xml.etree.ElementTree as ET
  ET.parse(tmp_path / "j.xml")  # the partial JUnit file is whole

def test_without_the_stop_handling_the_same_signal_is_late(small, tmp_path):
  # the plant takes replay.process.stoppable out: Ctrl-C then waits for the queued jobs (the bug this file guards against)
  p = _start(small, tmp_path, seconds=8, PLANT_NO_STOP="1")
  _wait_busy(tmp_path, p)
  t0 = time.monotonic()
  os.killpg(p.pid, signal.SIGINT)
  p.communicate(timeout=300)
  assert time.monotonic() - t0 > 6, "the plant did not make the stop late: this test would not see the bug"

def test_a_parent_that_ignores_sigint_finishes_and_blames_no_kernel(small, tmp_path):
  # nohup-like: SIGINT ignored by the command; a SIGINT to its group must neither stop it nor kill its workers
  p = _start(small, tmp_path, seconds=1, preexec=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
  _wait_busy(tmp_path, p)
  os.killpg(p.pid, signal.SIGINT)
  out, err = p.communicate(timeout=300)
  assert p.returncode == 0, (out, err)
  rep = json.loads((tmp_path / "r.json").read_text())
  assert not rep.get("stopped") and {r["exec"]["verdict"] for r in rep["results"]} == {"equivalent"}, rep["summary"]
  _no_orphans(tmp_path)

def test_a_worker_killed_from_outside_is_not_a_failed_kernel(small, tmp_path):
  p = _start(small, tmp_path, seconds=1.5)
  _wait_busy(tmp_path, p, n=1)
  victim = int(next((tmp_path / "jobs").iterdir()).name.split("-")[1])
  os.kill(victim, signal.SIGTERM)  # e.g. an administrator's kill: not the kernel's doing
  out, err = p.communicate(timeout=300)
  rep = json.loads((tmp_path / "r.json").read_text())
  assert p.returncode == 0 and {r["exec"]["verdict"] for r in rep["results"]} == {"equivalent"}, (rep["summary"], err)

def test_the_gate_fails_a_partial_or_empty_report():
  from replay.baseline.gate import decide, failure_exit
  base = {"schema": "tinysched-replay-report", "summary": {"total": 1, "identical": 1}, "exit_code": 0,
          "results": [{"outcome": "identical", "exec": None}]}
  assert decide(base, 0, False)[0]
  stopped = {**base, "stopped": "SIGINT", "selected": 5, "exit_code": 130}
  ok, why = decide(stopped, 130, True)
  assert not ok and "stopped by SIGINT" in why and failure_exit(stopped, 130) == 130
  empty = {**base, "results": [], "summary": {"total": 0}}
  ok, why = decide(empty, 0, True)
  assert not ok and "replayed no capture" in why
  assert decide({**empty, "allow_empty": True}, 0, False)[0]  # asked for: `replay check --allow-empty`
