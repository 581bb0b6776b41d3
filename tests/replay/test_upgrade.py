"""Captures that survive IR refactors (replay/store/upgrade.py): the format's version moves with every change the stored
form sees, a registered step carries an older document to today's, and a change without its step is caught here.

The refactor tests make the change on a copy of the repository (a branch, in effect): an op used by every kernel renamed
(SINK -> ROOTS, in tinysched and replay), and the layout of the VIEW argument changed ({"st": [views]} ->
{"st": {"views": [views]}}). Each time the committed baseline, read through the step, replays `identical` with
`--exec-all`; without the step the same baseline is `incompatible` and the message names the missing step."""
import json, os, re, shutil, subprocess, sys
from pathlib import Path
import pytest
from replay.store import encode as E, upgrade as U

ROOT = Path(__file__).resolve().parents[2]
STORE = "captures/mlp_digits.db"

def test_the_schema_is_the_one_recorded_for_this_version():
  # an IR change the stored form sees (an op added, renamed, an argument or source count changed) needs a version and a step
  want = U.SCHEMAS.get(E.VERSION)
  got = U.schema_fingerprint()
  assert want is not None and got == want[0], (
    f"the IR the encoder writes changed ({'; '.join(U.schema_changes(list(want[1]) if want else [])) or 'an argument or source count'}): "
    f"set VERSION = {E.VERSION + 1} in replay/store/encode.py, record SCHEMAS[{E.VERSION + 1}] = ({got!r}, <op names>) and register the "
    f"step in replay/store/upgrade.py:\n{U.skeleton(E.VERSION)}\n(if the stored form did not change, e.g. a reworded argument "
    "description, record the new fingerprint for this version instead)")
  assert sorted(U.STEPS) == list(range(1, E.VERSION)), "every older version needs its step to the next"

def test_the_fingerprint_sees_a_rename_and_an_argument_change():
  # the check above must be able to fail: the same schema with an op renamed, or an op's argument changed
  s = U.schema()
  renamed = {**s, "ops": {("ROOTS" if k == "SINK" else k): v for k, v in s["ops"].items()}}
  assert U.schema_fingerprint(renamed) != U.schema_fingerprint(s)
  assert U.schema_changes(list(s["ops"]), renamed) == ["ops added: ROOTS", "ops gone: SINK"]
  changed = {**s, "ops": {**s["ops"], "REDUCE_AXIS": {**s["ops"]["REDUCE_AXIS"], "arg": "(axes, op)"}}}
  assert U.schema_fingerprint(changed) != U.schema_fingerprint(s)

def test_the_chain_applies_in_order_and_names_a_missing_step(monkeypatch):
  monkeypatch.setattr(U, "STEPS", {})
  doc = {"format": "tinysched-uop", "version": 1, "nodes": [["SINK", {"dt": "void"}, [], None]], "roots": [0]}
  with pytest.raises(U.UpgradeError, match=r"no upgrade step from 1 to 2 is registered[\s\S]*@step\(1"): U.upgrade(doc, 2)
  U.step(1, "SINK renamed ROOTS")(lambda d: U.rename_ops(d, {"SINK": "ROOTS"}))
  U.step(2, "ROOTS's argument becomes a tuple")(lambda d: U.map_args(d, "ROOTS", lambda a: {"t": []}))
  out = U.upgrade(doc, 3)
  assert out["version"] == 3 and out["nodes"] == [["ROOTS", {"dt": "void"}, [], {"t": []}]] and doc["nodes"][0][0] == "SINK"  # pure
  with pytest.raises(ValueError, match="two upgrade steps"): U.step(1, "again")(lambda d: d)
  U.STEPS[3] = U.Step(3, "broken", lambda d: 1 / 0)
  with pytest.raises(U.UpgradeError, match=r"step 3 -> 4 \(broken\) failed"): U.upgrade(doc, 4)

# *** real refactors on a copy of the repository ***

def _copy(tmp: Path) -> Path:
  """The working tree's tinysched/ and replay/ and one committed store: what a branch with the refactor would hold."""
  dst = tmp / "repo"
  for d in ("tinysched", "replay"): shutil.copytree(ROOT / d, dst / d, ignore=shutil.ignore_patterns("__pycache__"))
  (dst / "captures").mkdir(parents=True)
  shutil.copy(ROOT / STORE, dst / STORE)
  return dst

def _edit(path: Path, old: str, new: str, count: int | None = 1) -> None:
  text = path.read_text()
  n = len(re.findall(old, text))
  assert n and (count is None or n == count), f"the refactor no longer applies to {path.name}: {old!r} found {n} times"
  path.write_text(re.sub(old, new, text))

def _bump(repo: Path, what: str, step_code: str) -> None:
  """The version moved and the schema recorded, as the refactor's author does; `step_code` the step (or none)."""
  _edit(repo / "replay/store/encode.py", r'FORMAT, VERSION = "tinysched-uop", 1', 'FORMAT, VERSION = "tinysched-uop", 2')
  (repo / "replay/store/upgrade.py").write_text((repo / "replay/store/upgrade.py").read_text() + step_code)

def _check(repo: Path, tmp: Path) -> tuple[int, dict, str]:
  env = {k: v for k, v in os.environ.items() if not k.startswith("TINYSCHED_CAPTURE")}
  env.update(PYTHONPATH=str(repo), TINYSCHED_CACHE=str(tmp / "cache"), TINYSCHED_PROGRAM_CACHE="1")
  r = subprocess.run([sys.executable, "-m", "replay.cli", "check", STORE, "--exec-all", "--no-determinism", "-j", "2",
                      "--report-json", str(tmp / "r.json")], cwd=repo, env=env, capture_output=True, text=True, timeout=900)
  doc = json.loads((tmp / "r.json").read_text()) if (tmp / "r.json").exists() else {}
  return r.returncode, doc, r.stdout + r.stderr

RENAME_STEP = '''
@step(1, "the SINK op renamed ROOTS")
def _v1_to_v2(doc: dict) -> dict:
  return rename_ops(doc, {"SINK": "ROOTS"})
'''

VIEWS_STEP = '''
@step(1, "a shape tracker argument is {\\"st\\": {\\"views\\": [...]}}")
def _v1_to_v2(doc: dict) -> dict:
  def walk(a):
    if isinstance(a, dict) and len(a) == 1 and isinstance(a.get("st"), list): return {"st": {"views": [walk(x) for x in a["st"]]}}
    if isinstance(a, dict) and len(a) == 1 and isinstance(a.get("t"), list): return {"t": [walk(x) for x in a["t"]]}
    return a
  return {**doc, "nodes": [[n[0], n[1], n[2], walk(n[3])] for n in doc["nodes"]]}
'''

def _rename_sink(repo: Path) -> None:
  for p in [*(repo / "tinysched").rglob("*.py"), *(repo / "replay").rglob("*.py")]:
    if "Ops.SINK" in (t := p.read_text()): p.write_text(t.replace("Ops.SINK", "Ops.ROOTS"))
  _edit(repo / "tinysched/ops.py", r"\bSINK = auto\(\)", "ROOTS = auto()")

def _views_layout(repo: Path) -> None:
  enc = repo / "replay/store/encode.py"
  _edit(enc, re.escape('return {"st": [self.arg(v) for v in x.views]}'), 'return {"st": {"views": [self.arg(v) for v in x.views]}}')
  _edit(enc, re.escape('if tag == "st" and type(v) is list:'),
        'if tag == "st" and type(v) is dict and type(v.get("views")) is list:\n        v = v["views"]')
  _edit(enc, re.escape('if tag == "st" and type(v) is list and 1 <= len(v) <= MAX_DIMS:'),
        'if tag == "st" and type(v) is dict and type(v.get("views")) is list and 1 <= len(v["views"]) <= MAX_DIMS:\n        v = v["views"]')

@pytest.mark.slow
@pytest.mark.parametrize("refactor, step_code", [(_rename_sink, RENAME_STEP), (_views_layout, VIEWS_STEP)], ids=["rename-op", "arg-layout"])
def test_a_refactor_with_its_step_replays_the_baseline_identical(tmp_path, refactor, step_code):
  repo = _copy(tmp_path)
  refactor(repo)
  _bump(repo, "", "")
  # without the step: incompatible, and the message names the step to write
  code, doc, out = _check(repo, tmp_path)
  assert code == 2 and doc.get("summary", {}).get("incompatible"), out[-3000:]
  assert "no upgrade step from 1 to 2" in json.dumps(doc.get("results")), out[-2000:]
  # with it: every capture identical, every kernel run equivalent against the reference
  (repo / "replay/store/upgrade.py").write_text((repo / "replay/store/upgrade.py").read_text() + step_code)
  code, doc, out = _check(repo, tmp_path)
  s = doc["summary"]
  assert code == 0 and s["identical"] == s["total"] > 0 and set(s["exec"]) <= {"equivalent", "skipped"}, out[-3000:]

def _upgrade(repo: Path, tmp: Path, pause: str | None = None) -> subprocess.CompletedProcess | subprocess.Popen:
  env = {k: v for k, v in os.environ.items() if not k.startswith(("TINYSCHED_CAPTURE", "REPLAY_PAUSE"))}
  env.update(PYTHONPATH=str(repo), TINYSCHED_CACHE=str(tmp / "cache"))
  cmd = [sys.executable, "-m", "replay.cli", "upgrade", STORE]
  if pause is None: return subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=300)
  return subprocess.Popen(cmd, cwd=repo, env={**env, "REPLAY_PAUSE_AT": pause}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

@pytest.mark.slow
def test_replay_upgrade_rewrites_a_store_atomically_and_keeps_its_verdicts(tmp_path):
  repo = _copy(tmp_path)
  _rename_sink(repo)
  _bump(repo, "", RENAME_STEP)
  code, through_chain, out = _check(repo, tmp_path)
  assert code == 0, out[-3000:]
  before = (repo / STORE).read_bytes()
  shutil.copy(repo / STORE, tmp_path / "v1.db")  # the store as written before the refactor, for `replay diff` below
  # SIGKILL at each step: the old store is left whole (byte-identical) and the temporary copy is cleaned by the next run
  for step in ("upgrade:copied", "upgrade:rewritten", "upgrade:verified"):
    p = _upgrade(repo, tmp_path, step)
    assert p.stderr.readline().strip() == f"REPLAY-PAUSED {step}"
    p.kill(); p.wait()
    assert (repo / STORE).read_bytes() == before, step
  r = _upgrade(repo, tmp_path)
  assert r.returncode == 0 and "rewritten in version 2" in r.stdout, r.stdout + r.stderr
  assert not list((repo / "captures").glob(".*.tmp*"))
  # the upgraded store: every payload of version 2, and the same verdicts as replaying the old one through the chain
  again = _upgrade(repo, tmp_path)
  assert "nothing to do" in again.stdout and "version 1" not in again.stdout, again.stdout
  code, upgraded, out = _check(repo, tmp_path)
  assert code == 0, out[-3000:]
  verdicts = lambda doc: sorted((r["level"], r["outcome"], (r.get("exec") or {}).get("verdict")) for r in doc["results"])
  assert verdicts(upgraded) == verdicts(through_chain)
  # `replay diff` across the refactor: the version-1 store and the upgraded one pair row by row and nothing changed
  env = {k: v for k, v in os.environ.items() if not k.startswith("TINYSCHED_CAPTURE")}
  d = subprocess.run([sys.executable, "-m", "replay.cli", "diff", str(tmp_path / "v1.db"), STORE, "--exec-all",
                      "--report-json", str(tmp_path / "d.json")],
                     cwd=repo, env={**env, "PYTHONPATH": str(repo)}, capture_output=True, text=True, timeout=300)
  dj = json.loads((tmp_path / "d.json").read_text())
  ds = dj["summary"]
  assert d.returncode == 0 and ds["identical"] == ds["total"] == len(upgraded["results"]), d.stdout[-2000:] + d.stderr[-2000:]
  # and run old vs new: the same input written in two versions is one input, not "the front end changed"
  assert ds["exec"].get("equivalent") and not any("front end" in ((r.get("exec") or {}).get("reason") or "") for r in dj["results"]), ds
  import sqlite3
  log = json.loads(sqlite3.connect(repo / STORE).execute("SELECT value FROM meta WHERE key='format_upgrades'").fetchone()[0])
  assert log[-1]["to"] == 2 and log[-1]["keys"]  # old -> new keys kept for whoever follows a row across versions

def test_a_step_that_splits_an_op_renumbers_every_reference():
  # e.g. a refactor that splits EXP2(x) into two ops: one node becomes two, and every later index moves by one
  from tinysched import Tensor
  from tinysched.schedule import create_schedule_with_vars
  x = Tensor.arange(6).float().reshape(2, 3)
  docs = [json.loads(E.encode_graph([si.ast])) for si in create_schedule_with_vars([(x + 1).exp().sum(1).lazydata])[0]]
  doc = next(d for d in docs if any(n[0] == "EXP2" for n in d["nodes"]))
  assert sum(n[0] == "EXP2" for n in doc["nodes"]) == 1
  def split(n):  # EXP2(x) -> NEG(NEG(x)) (any two ops): two nodes for one, the first referred to as {"new": 0}
    return [["NEG", n[1], n[2], None], ["NEG", n[1], [{"new": 0}], None]] if n[0] == "EXP2" else None
  out = U.replace_nodes(doc, split)
  assert len(out["nodes"]) == len(doc["nodes"]) + 1 and not any(n[0] == "EXP2" for n in out["nodes"])
  roots = E.parse(E.canonical_bytes(out)).roots()  # it decodes: every reference points at the node it meant, earlier
  ops = [u.op.name for u in roots[0].toposort()]
  assert ops.count("NEG") >= 2 and "EXP2" not in ops
  # kept nodes are the same graph: a step that replaces nothing gives back the document
  assert E.canonical_bytes(U.replace_nodes(doc, lambda n: None)) == E.canonical_bytes(doc)
