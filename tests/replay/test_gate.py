"""The CI gate: decide() on reports, accept-marker detection, `replay gate` on real capture stores, ci/replay-gate, the workflow."""
from __future__ import annotations
import json, os, subprocess, sys
from pathlib import Path
import pytest
from click.testing import CliRunner
from replay.cli.app import main as cli
from replay.baseline import gate as G
import tinysched.schedule as S
from tests.replay.changes import capture_store
from tinysched import Tensor, Ops
from tinysched.rewrite import graph_rewrite, PatternMatcher, UPat

ROOT = Path(__file__).resolve().parents[2]
ACCEPT_TITLE = "Refactor view pushing [replay:accept]"

# *** decide(): the rules on synthetic reports ***

def make_report(changed: int = 0, error: int = 0, incompatible: int = 0, verdicts: tuple[str, ...] = (), fatal: tuple[str, ...] = ()) -> dict:
  results = [{"outcome": "identical", "exec": None}] * 3 + [{"outcome": "changed", "exec": None} for _ in range(changed)]
  results += [{"outcome": "error", "exec": None}] * error + [{"outcome": "incompatible", "exec": None}] * incompatible
  results += [{"outcome": "changed", "exec": {"verdict": v}} for v in verdicts]
  c = sum(r["outcome"] == "changed" for r in results)
  code = 2 if (error or incompatible or fatal or any(v in ("failed", "timeout") for v in verdicts)) else \
    1 if (c or any(v in ("mismatch", "wrong", "unstable") for v in verdicts)) else 0
  ex: dict[str, int] = {}
  for v in verdicts: ex[v] = ex.get(v, 0) + 1
  return {"schema": "tinysched-replay-report", "version": 1, "summary": {"total": len(results), "identical": 3, "changed": c, "error": error,
          "incompatible": incompatible, "exec": ex}, "exit_code": code, "fatal": list(fatal), "results": results, "groups": []}

@pytest.mark.parametrize("accept", [False, True])
def test_decide_clean_passes(accept):
  rep = make_report()
  assert G.decide(rep, 0, accept) == (True, "nothing changed: every capture replays identically")

def test_decide_changes_need_accept():
  rep = make_report(verdicts=("equivalent", "equivalent"))
  ok, why = G.decide(rep, 1, False)
  assert not ok and "2 capture(s) changed" in why and "[replay:accept]" in why and "replay accept" in why
  assert G.failure_exit(rep, 1) == 1
  ok, why = G.decide(rep, 1, True)
  assert ok and "accepted by [replay:accept]" in why and "2 checked numerically equivalent" in why
  # a change whose numbers were not checked (no execution check ran) is not: tests/replay/test_gate_unverified.py
  ok, why = G.decide(make_report(changed=1, verdicts=("equivalent",)), 1, True)
  assert not ok and "1 changed capture(s) have no `equivalent` execution verdict" in why

@pytest.mark.parametrize("kind", ["mismatch", "wrong", "unstable", "failed", "timeout", "error", "incompatible", "fatal", "no report", "exit 2"])
def test_decide_always_fails_even_when_accepted(kind):
  rep: dict | None = {"mismatch": lambda: make_report(changed=1, verdicts=("equivalent", "mismatch")),
                      # wrong: old and new agree with each other, and nothing changed, but the reference disagrees
                      "wrong": lambda: make_report(verdicts=("wrong",)), "unstable": lambda: make_report(changed=1, verdicts=("unstable",)),
                      "failed": lambda: make_report(verdicts=("failed",)), "timeout": lambda: make_report(changed=1, verdicts=("timeout",)),
                      "error": lambda: make_report(changed=1, error=1), "incompatible": lambda: make_report(incompatible=2),
                      "fatal": lambda: make_report(fatal=("x.db: not a capture store",)),
                      "no report": lambda: None, "exit 2": lambda: make_report()}[kind]()
  code = 2 if kind == "exit 2" else (rep or {}).get("exit_code", 1)
  ok, why = G.decide(rep, code, True)
  assert not ok, why
  assert {"mismatch": "miscompile", "wrong": "independent numpy reference", "unstable": "different bits", "failed": "failed to run",
          "timeout": "timed out", "error": "does not accept", "incompatible": "incompatible",
          "fatal": "could not be read", "no report": "without a readable JSON report", "exit 2": "exited 2"}[kind] in why
  assert G.failure_exit(rep, code) == (1 if kind in ("mismatch", "wrong", "unstable") else 2)

def test_decide_distrusts_an_unexplained_exit_1():
  assert not G.decide(make_report(), 1, True)[0]

# *** where [replay:accept] comes from ***

def test_accept_marker_sources(tmp_path):
  assert G.accept_marker({"REPLAY_PR_TITLE": "fix: [Replay:Accept] typo"}, cwd=str(tmp_path)) == "the PR title (REPLAY_PR_TITLE)"
  assert G.accept_marker({"REPLAY_PR_TITLE": "plain title"}, cwd=str(tmp_path)) is None
  ev = tmp_path / "event.json"
  ev.write_text(json.dumps({"pull_request": {"title": ACCEPT_TITLE, "head": {"sha": "0" * 40}}}))
  assert G.accept_marker({"GITHUB_EVENT_PATH": str(ev)}, cwd=str(tmp_path)) == "the PR title"
  ev.write_text(json.dumps({"head_commit": {"message": "x\n\n[replay:accept]"}}))
  assert G.accept_marker({"GITHUB_EVENT_PATH": str(ev)}, cwd=str(tmp_path)) == "the pushed head commit message"
  ev.write_text("not json")
  assert G.accept_marker({"GITHUB_EVENT_PATH": str(ev)}, cwd=str(tmp_path)) is None
  repo = tmp_path / "repo"; repo.mkdir()
  gitc = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
  subprocess.run([*gitc, "init", "-q"], cwd=repo, check=True)
  subprocess.run([*gitc, "commit", "-q", "--allow-empty", "-m", "change the fusion rule\n\n[replay:accept] intended"], cwd=repo, check=True)
  assert G.accept_marker({}, cwd=str(repo)) == "the head commit message"
  subprocess.run([*gitc, "commit", "-q", "--allow-empty", "-m", "follow-up"], cwd=repo, check=True)
  assert G.accept_marker({}, cwd=str(repo)) is None

# *** `replay gate` on real capture stores (in-process, so planted changes are seen) ***

def workload():
  Tensor.manual_seed(5)
  x, w = Tensor.rand(4, 8), Tensor.rand(8, 3)
  (x @ w).relu().sum(1).realize()
  (x * 2 + 1).realize()
  (x - x.max(1, keepdim=True)).exp().realize()

@pytest.fixture(scope="module")
def db(tmp_path_factory): return capture_store(tmp_path_factory.mktemp("gate") / "base.db", workload, "gate")

@pytest.fixture
def ci_env(monkeypatch, tmp_path):
  """No accept marker anywhere unless a test sets one: not a git repo, no PR title, no event, no step summary."""
  for k in ("REPLAY_PR_TITLE", "GITHUB_EVENT_PATH", "GITHUB_STEP_SUMMARY"): monkeypatch.delenv(k, raising=False)
  monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
  monkeypatch.chdir(tmp_path)
  return tmp_path

swap = PatternMatcher([(UPat((Ops.ADD, Ops.MUL), name="x"), lambda x: x.replace(src=x.src[::-1]) if x.src[0].key < x.src[1].key else None,
                        "swap_commutative")], name="swap")

def plant(monkeypatch, fn):
  orig = S.full_ast_rewrite
  def patched(pre, var_vals, assigned, memo=None):
    ast, ctx = orig(pre, var_vals, assigned, memo)
    return fn(pre, ast), ctx
  monkeypatch.setattr(S, "full_ast_rewrite", patched)

def plant_change(monkeypatch): plant(monkeypatch, lambda pre, ast: graph_rewrite(ast, swap))
def plant_error(monkeypatch):
  def boom(pre, ast):
    if any(x.op is Ops.REDUCE_AXIS for x in pre.toposort()): raise ZeroDivisionError("planted failure")
    return ast
  plant(monkeypatch, boom)

def gate(db, tmp, *extra, device: str | None = None):
  """`replay gate` in this process (the planted change is a monkeypatch here: its determinism check says it cannot compare).
  `device`: run the execution check there (the marker accepts only changes it found equivalent), else --no-exec."""
  args = ["gate", str(db), *(["--device", device] if device else ["--no-exec"]), "--report-json", str(tmp / "r.json"), "--report-md",
          str(tmp / "r.md"), "--junit", str(tmp / "r.xml"), "--summary", str(tmp / "summary.md"), *extra]
  return CliRunner().invoke(cli, args)

def test_gate_clean_passes(db, ci_env):
  r = gate(db, ci_env)
  assert r.exit_code == 0, r.output
  assert "replay gate: PASS: nothing changed" in r.output
  assert json.loads((ci_env / "r.json").read_text())["exit_code"] == 0 and (ci_env / "r.xml").is_file()
  s = (ci_env / "summary.md").read_text()
  assert "replay gate: PASS" in s and "process replay" in s

def test_gate_changed_fails_without_accept(db, ci_env, monkeypatch):
  plant_change(monkeypatch)
  r = gate(db, ci_env)
  assert r.exit_code == 1, r.output
  assert "replay gate: FAIL" in r.output and "changed" in r.output and "[replay:accept]" in r.output
  assert "replay gate: FAIL" in (ci_env / "summary.md").read_text()

def test_gate_changed_passes_with_accept_in_pr_title(db, ci_env, monkeypatch):
  plant_change(monkeypatch)
  monkeypatch.setenv("REPLAY_PR_TITLE", ACCEPT_TITLE)
  r = gate(db, ci_env, device="NUMPY")
  assert r.exit_code == 0, r.output
  assert "replay gate: PASS" in r.output and "accepted by [replay:accept]" in r.output and "found in the PR title" in r.output

def test_gate_changed_passes_with_accept_in_event_file_and_step_summary(db, ci_env, monkeypatch):
  plant_change(monkeypatch)
  ev = ci_env / "event.json"
  ev.write_text(json.dumps({"pull_request": {"title": ACCEPT_TITLE}}))
  monkeypatch.setenv("GITHUB_EVENT_PATH", str(ev))
  monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(ci_env / "step.md"))
  r = CliRunner().invoke(cli, ["gate", str(db), "--device", "NUMPY"])
  assert r.exit_code == 0, r.output
  s = (ci_env / "step.md").read_text()
  assert "replay gate: PASS" in s and "[replay:accept] found in the PR title" in s and "### Groups" in s

def test_gate_error_fails_even_with_accept(db, ci_env, monkeypatch):
  plant_error(monkeypatch)
  monkeypatch.setenv("REPLAY_PR_TITLE", ACCEPT_TITLE)
  r = gate(db, ci_env)
  assert r.exit_code == 2, r.output
  assert "replay gate: FAIL" in r.output and "error" in r.output

def test_gate_mismatch_fails_even_with_accept(db, ci_env, monkeypatch):
  # a real changed report, with the execution check's verdict on one changed kernel set to `mismatch`
  plant_change(monkeypatch)
  assert gate(db, ci_env, "--accept", device="NUMPY").exit_code == 0
  doc = json.loads((ci_env / "r.json").read_text())
  ch = next(r for r in doc["results"] if r["outcome"] == "changed")
  ch["exec"] = {"verdict": "mismatch", "max_abs_err": 0.5}
  doc["summary"]["exec"] = {"mismatch": 1}
  (ci_env / "m.json").write_text(json.dumps(doc))
  r = CliRunner().invoke(cli, ["gate", "--from-report", str(ci_env / "m.json"), "--exit-code", "1", "--accept"])
  assert r.exit_code == 1 and "miscompile" in r.output, r.output
  # the same report without the mismatch is accepted
  ch["exec"] = {"verdict": "equivalent"}
  doc["summary"]["exec"] = {"equivalent": 1}
  (ci_env / "e.json").write_text(json.dumps(doc))
  r = CliRunner().invoke(cli, ["gate", "--from-report", str(ci_env / "e.json"), "--exit-code", "1", "--accept"])
  assert r.exit_code == 0, r.output

bump_one = PatternMatcher([(UPat(Ops.CONST, name="c"), lambda c: c.replace(arg=1.5) if type(c.arg) is float and c.arg == 1.0 else None,
                            "bump_one")], name="bump")

@pytest.mark.skipif(not G.exec_available(), reason="replay.execute.pool (the execution check) is not installed")
def test_gate_exec_real_mismatch_fails_even_with_accept(db, ci_env, monkeypatch):
  # `x * 2 + 1` now adds 1.5: the execution check runs old and new kernels and finds different numbers
  plant(monkeypatch, lambda pre, ast: graph_rewrite(ast, bump_one))
  monkeypatch.setenv("REPLAY_PR_TITLE", ACCEPT_TITLE)
  r = CliRunner().invoke(cli, ["gate", str(db), "-j", "1", "--report-json", str(ci_env / "x.json")])
  assert r.exit_code == 1 and "replay gate: FAIL" in r.output and "miscompile" in r.output, r.output
  doc = json.loads((ci_env / "x.json").read_text())
  assert any((x["exec"] or {}).get("verdict") == "mismatch" for x in doc["results"])

def test_gate_bad_usage_and_missing_report(db, ci_env):
  r = CliRunner().invoke(cli, ["gate", str(db), "--from-report", "x.json"])
  assert r.exit_code == 2 and "not both" in r.output
  r = CliRunner().invoke(cli, ["gate", "--from-report", str(ci_env / "missing.json"), "--exit-code", "1", "--accept"])
  assert r.exit_code == 2 and "without a readable JSON report" in r.output
  if not G.exec_available():
    r = CliRunner().invoke(cli, ["gate", str(db)])
    assert r.exit_code == 2 and "--no-exec" in r.output

# *** ci/replay-gate (bash) on the clean case, and on a store that cannot be read ***

def run_script(tmp: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
  e = {k: v for k, v in os.environ.items() if k not in ("REPLAY_PR_TITLE", "GITHUB_EVENT_PATH", "GITHUB_STEP_SUMMARY")}
  e.update({"PATH": f"{Path(sys.executable).parent}{os.pathsep}{e.get('PATH', '')}", "REPLAY_REPORT_DIR": str(tmp / "out"),
            "GITHUB_STEP_SUMMARY": str(tmp / "step.md"), "GIT_CEILING_DIRECTORIES": str(tmp.parent), "PYTHONPATH": str(ROOT),
            "REPLAY": f"{sys.executable} -m replay.cli", **env})
  if not G.exec_available(): e["REPLAY_EXEC"] = "0"
  return subprocess.run(["bash", str(ROOT / "ci/replay-gate"), *args], cwd=tmp, env=e, capture_output=True, text=True, timeout=300)

def test_replay_gate_script_clean_and_broken(db, tmp_path):
  r = run_script(tmp_path, str(db))
  assert r.returncode == 0, r.stdout + r.stderr
  assert "replay gate: PASS" in r.stdout
  out = tmp_path / "out"
  assert json.loads((out / "report.json").read_text())["summary"]["changed"] == 0
  assert (out / "report.md").is_file() and "<testsuites" in (out / "junit.xml").read_text()
  assert "replay gate: PASS" in (tmp_path / "step.md").read_text()
  # a store that cannot be read fails, even when accepted, and no stale report from the run above decides it
  (tmp_path / "bad.db").write_bytes(b"not sqlite at all" * 100)
  r = run_script(tmp_path, str(tmp_path / "bad.db"), REPLAY_PR_TITLE=ACCEPT_TITLE)
  assert r.returncode == 2, r.stdout + r.stderr
  assert "replay gate: FAIL" in r.stdout

# *** the GitHub workflow ***

def test_workflow_is_valid_yaml():
  yaml = pytest.importorskip("yaml")
  doc = yaml.safe_load((ROOT / "ci/github/replay.yml").read_text())
  on = doc.get("on", doc.get(True))  # YAML 1.1 reads a bare `on` key as True
  assert "pull_request" in on and "push" in on
  jobs = doc["jobs"]
  assert set(jobs) == {"tests", "replay", "gate"}
  assert jobs["replay"]["needs"] == "tests" and jobs["gate"]["needs"] == "replay"
  shards = jobs["replay"]["strategy"]["matrix"]["shard"]
  assert shards == list(range(len(shards))) and str(len(shards)) == doc["env"]["REPLAY_SHARDS"]
  steps = lambda j: "\n".join(str(s.get("run", "")) for s in jobs[j]["steps"])
  assert "pocl-opencl-icd" in steps("tests") and 'pip install -e ".[dev]"' in steps("tests") and "pytest" in steps("tests")
  assert "--shard" in steps("replay") and "--report-json" in steps("replay")
  assert "replay report merge" in steps("gate") and "replay gate --from-report merged.json" in steps("gate")
  gate_step = next(s for s in jobs["gate"]["steps"] if "replay gate" in str(s.get("run", "")))
  assert "github.event.pull_request.title" in gate_step["env"]["REPLAY_PR_TITLE"]
  assert "${{" not in gate_step["run"]  # untrusted input only through the environment

def test_replay_gate_catches_a_heuristic_change_on_the_committed_baseline(tmp_path):
  """A planted heuristic change (the CPU choice loses its last opt) fails the gate on captures/: program captures are
  replayed with the optimization chosen again (--reoptimize, the gate's default); with the stored choices only
  (REPLAY_REOPTIMIZE=0) the same run passes, which is why the gate reoptimizes."""
  plants = str(ROOT / "tests/replay/plants")
  caps = [str(p) for p in sorted((ROOT / "captures").glob("*.db"))]
  env = {"TINYSCHED_TEST_PLANT": "heuristic", "PYTHONPATH": f"{plants}{os.pathsep}{ROOT}", "REPLAY_EXEC": "0"}
  r = run_script(tmp_path, *caps, "--level", "program", **env)
  assert r.returncode == 1 and "replay gate: FAIL" in r.stdout, r.stdout + r.stderr
  changed = [x for x in json.loads((tmp_path / "out" / "report.json").read_text())["results"] if x["outcome"] == "changed"]
  assert changed and all("opts changed" in (x["signature"] or "") for x in changed)
  r = run_script(tmp_path, *caps, "--level", "program", REPLAY_REOPTIMIZE="0", **env)
  assert r.returncode == 0 and "replay gate: PASS" in r.stdout, r.stdout + r.stderr

def test_replay_gate_catches_can_pad_on_the_committed_baseline(tmp_path):
  """Planted can_pad (every op zero-preserving: a pad over exp is no longer stored first) fails the gate on captures/:
  the distilled test captures (captures/tests.db) hold the pads over unsafe ops that no model has; the model stores
  alone pass, which is why the test suite is part of the baseline."""
  plants = str(ROOT / "tests/replay/plants")
  models = [str(p) for p in sorted((ROOT / "captures").glob("*.db")) if p.stem not in ("tests", "gpu_target")]
  env = {"TINYSCHED_TEST_PLANT": "can_pad", "PYTHONPATH": f"{plants}{os.pathsep}{ROOT}", "REPLAY_EXEC": "0"}
  r = run_script(tmp_path, *models, "--level", "schedule", **env)
  assert r.returncode == 0 and "replay gate: PASS" in r.stdout, r.stdout + r.stderr
  r = run_script(tmp_path, str(ROOT / "captures/tests.db"), "--level", "schedule", **env)
  assert r.returncode == 1 and "replay gate: FAIL" in r.stdout, r.stdout + r.stderr
  changed = [x for x in json.loads((tmp_path / "out" / "report.json").read_text())["results"] if x["outcome"] == "changed"]
  assert changed and all(x["level"] == "schedule" for x in changed)

def test_replay_gate_catches_a_gpu_work_group_change_on_the_committed_baseline(tmp_path):
  """A planted change of the GPU local-size choice fails the gate through captures/gpu_target.db (program level, rendered
  for the nvidia-like-gpu target on this CPU machine); the CPU-target program captures do not see it."""
  plants = str(ROOT / "tests/replay/plants")
  env = {"TINYSCHED_TEST_PLANT": "gpu_local", "PYTHONPATH": f"{plants}{os.pathsep}{ROOT}", "REPLAY_EXEC": "0"}
  r = run_script(tmp_path, str(ROOT / "captures/gpu_target.db"), "--level", "program", **env)
  assert r.returncode == 1 and "replay gate: FAIL" in r.stdout, r.stdout + r.stderr
  changed = [x for x in json.loads((tmp_path / "out" / "report.json").read_text())["results"] if x["outcome"] == "changed"]
  assert changed and all("LOCAL(" in (x["signature"] or "") for x in changed)
  r = run_script(tmp_path, str(ROOT / "captures/mlp_digits.db"), "--level", "program", **env)
  assert r.returncode == 0 and "replay gate: PASS" in r.stdout, r.stdout + r.stderr

def test_replay_gate_fails_when_its_filter_selects_nothing(db, tmp_path):
  # a shard, label or key that empties the run: the check says so (exit 2) and the gate fails, accept marker or not
  r = run_script(tmp_path, str(db), "--label", "no-such-model", REPLAY_PR_TITLE=ACCEPT_TITLE, REPLAY_EXEC="0", REPLAY_PROVE="0")
  assert r.returncode == 2 and "nothing to replay" in r.stderr and "replay gate: FAIL" in r.stdout, r.stdout + r.stderr
