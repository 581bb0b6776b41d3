"""`replay suite`: the same suite captured twice, in separate processes, gives identical capture key sets."""
import pytest
from click.testing import CliRunner
from replay.cli.app import main as cli
from replay.store.sqlite import Store
from tinysched.models.suite import available

MODELS = [m for m in ("gpt2_tiny", "mlp_digits") if available(m) is None]

def keys(db):
  s = Store(db, readonly=True)
  try: return {(r["label"], r["level"], r["input_key"], r["output_key"]) for r in s.captures()}
  finally: s.close()

@pytest.mark.skipif(not MODELS, reason="no suite model can run here")
def test_suite_twice_same_keys(tmp_path):
  sets = []
  for i in range(2):
    db = tmp_path / f"s{i}.db"
    r = CliRunner().invoke(cli, ["suite", "--models", ",".join(MODELS), "--db", str(db), "--levels", "kernel,schedule"])
    assert r.exit_code == 0, r.output
    sets.append(keys(db))
  assert sets[0] == sets[1] and len(sets[0]) > 10
  assert {lb for lb, *_ in sets[0]} == set(MODELS)
