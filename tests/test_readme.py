"""The README's promises, checked: it opens with the two commands, stays short, links only to files that exist, and
its Python API example runs as printed."""
from __future__ import annotations
import re, subprocess, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()

def test_opens_with_the_two_commands():
  first = re.search(r"```bash\n(.*?)```", README, re.S)
  assert first is not None and README.index(first.group(0)) < 600
  assert [ln.split("#")[0].strip() for ln in first.group(1).strip().splitlines()] == ["bash scripts/replay.sh", "bash scripts/test.sh"]

def test_short_enough_to_read_in_ten_minutes():
  assert len(README.splitlines()) <= 300

def test_every_linked_file_exists():
  links = re.findall(r"\]\(((?!https?:|#)[^)#]+)", README)
  assert links and [p for p in links if not (ROOT / p).exists()] == []

def test_the_python_api_example_runs():
  block = re.search(r"## Python API\n.*?```python\n(.*?)```", README, re.S)
  assert block is not None
  r = subprocess.run([sys.executable, "-c", block.group(1)], cwd=ROOT, capture_output=True, text=True, timeout=600)
  assert r.returncode == 0, r.stderr[-3000:]
  lines = r.stdout.splitlines()
  assert lines[0].startswith("{'identical': ") and "'changed': 0" in lines[0] and lines[1] == "0"
  assert "('kernel', 'schedule', 'program', 'model')" in r.stdout and "SINK" in lines and "NO_SUCH_DEVICE" in lines[-1]
