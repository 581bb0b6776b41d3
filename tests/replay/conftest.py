"""Fixtures of the replay tests."""
import pytest
from tests.replay.changes import workload, capture_store

@pytest.fixture(scope="module")
def db(tmp_path_factory):
  """`workload`'s store."""
  return capture_store(tmp_path_factory.mktemp("replay") / "base.db", workload, "unit")
