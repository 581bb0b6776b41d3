
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
