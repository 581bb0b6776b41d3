"""Fixtures of the replay tests."""
import sqlite3
import pytest
import replay
from tests.replay.changes import workload

@pytest.fixture(scope="module")
def db(tmp_path_factory):
  """A store holding `workload`'s captures at every level, in rollback-journal mode (a plain file to copy and hash)."""
  p = tmp_path_factory.mktemp("replay") / "base.db"
  with replay.capture(p, label="unit"): workload()
  c = sqlite3.connect(p); c.execute("PRAGMA journal_mode=DELETE"); c.close()
  return p
