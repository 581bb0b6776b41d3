"""Small utilities of tinysched/helpers.py: the disk caches' writes and their size limit."""

def test_write_atomic_writes_whole_and_leaves_nothing_on_failure(tmp_path, monkeypatch):
  import os
  from tinysched.helpers import write_atomic
  target = tmp_path / "sub" / "entry.bin"
  assert write_atomic(target, b"first") and target.read_bytes() == b"first"
  assert write_atomic(target, b"second") and target.read_bytes() == b"second"
  def full(*a): raise OSError(28, "No space left on device")
  monkeypatch.setattr(os, "replace", full)
  assert not write_atomic(target, b"third")
  assert target.read_bytes() == b"second" and sorted(p.name for p in target.parent.iterdir()) == ["entry.bin"]
  # planted: the temporary file kept on failure (unlink does nothing) is seen
  monkeypatch.setattr(os, "unlink", lambda p: None)
  assert not write_atomic(target, b"fourth")
  assert sorted(p.name for p in target.parent.iterdir()) != ["entry.bin"]

def _fill(folder, n: int, size: int) -> None:
  import os
  folder.mkdir(parents=True, exist_ok=True)
  for i in range(n):
    (f := folder / f"e{i:02d}").write_bytes(b"x" * size)
    os.utime(f, (1_000_000 + i, 1_000_000 + i))  # e00 oldest

def test_prune_cache_deletes_the_oldest_down_to_three_quarters(tmp_path):
  from tinysched.helpers import prune_cache
  _fill(tmp_path, 10, 100)
  (tmp_path / ".tmp-writing").write_bytes(b"y" * 1000)  # another process's write in flight: never counted or deleted
  assert prune_cache(tmp_path, 2000) == 0 and len(list(tmp_path.iterdir())) == 11  # under the limit: nothing
  assert prune_cache(tmp_path, 500) == 7
  assert sorted(p.name for p in tmp_path.iterdir()) == [".tmp-writing", "e07", "e08", "e09"]
  assert prune_cache(tmp_path, 0) == 0  # 0: no limit

def test_cache_writes_stay_under_the_limit(tmp_path, monkeypatch):
  import tinysched.helpers as H
  monkeypatch.setenv("TINYSCHED_CACHE_MB", str(1000 / 2**20))  # 1000 bytes
  monkeypatch.setattr(H, "_written", {})
  _fill(tmp_path / "programs", 30, 100)  # what earlier processes left: 3000 bytes
  assert H.write_cache_entry(tmp_path / "programs" / "new", b"z" * 100)
  assert sum(p.stat().st_size for p in (tmp_path / "programs").iterdir()) <= 1000 + 100
  assert (tmp_path / "programs" / "new").exists()
  # a long-lived process keeps it bounded: every quarter of the limit written, the folder is pruned again
  for i in range(40): H.write_cache_entry(tmp_path / "programs" / f"later{i:02d}", b"w" * 100)
  assert sum(p.stat().st_size for p in (tmp_path / "programs").iterdir()) <= 1000 + 300
  # planted: writes that never prune
  monkeypatch.setattr(H, "_written", {})
  monkeypatch.setattr(H, "prune_cache", lambda folder, limit: 0)
  _fill(tmp_path / "opencl", 30, 100)
  H.write_cache_entry(tmp_path / "opencl" / "new", b"z" * 100)
  assert sum(p.stat().st_size for p in (tmp_path / "opencl").iterdir()) > 1000 + 100

def test_a_bad_cache_limit_is_a_clear_error(monkeypatch):
  import pytest
  from tinysched.helpers import cache_limit_bytes
  for bad in ("lots", "nan", "-5", ""):
    monkeypatch.setenv("TINYSCHED_CACHE_MB", bad)
    with pytest.raises(ValueError, match=r"TINYSCHED_CACHE_MB must be a number of megabytes \(0 or inf: no limit\), got"): cache_limit_bytes()
  for value, limit in (("0", 0), ("inf", 0), ("1e400", 0), ("0.0000001", 1), ("1", 2**20), ("1024", 2**30)):
    monkeypatch.setenv("TINYSCHED_CACHE_MB", value)
    assert cache_limit_bytes() == limit, value

def test_a_limit_changed_to_a_bad_value_later_does_not_fail_a_write(tmp_path, monkeypatch):
  import tinysched.helpers as H
  monkeypatch.setattr(H, "_written", {})
  monkeypatch.setenv("TINYSCHED_CACHE_MB", "lots")
  assert H.write_cache_entry(tmp_path / "programs" / "e", b"x") and (tmp_path / "programs" / "e").read_bytes() == b"x"
