"""pytest plugin: replay capture stores as tests (the `pytest11` entry point `replay.pytest_plugin`).

  pytest --replay captures/                 every *.db under captures/ (or pass .db files; repeatable)
  pytest --replay captures/ -n 4            with pytest-xdist
  pytest --replay captures/ -k "mlp and kernel" --junitxml replay.xml

One test item per (store, capture label, level), named `replay[<store>::<label>::<level>]` (`-` for an
unlabelled capture), in a fixed order (store path, label, level). Each item replays its captures through the
current code (replay.check.check with level/label filters, one process) and fails with the grouped report
when anything changed, errored or could not be decoded. Items share nothing, so any subset runs in any
worker. With `--replay` and no test paths on the command line, only the replay items are collected
(not the configured testpaths); `pytest tests --replay captures/` runs both. `-p no:replay.pytest_plugin`
disables it. The entry point is named like the module, so `-p replay.pytest_plugin` next to autoloading
registers it once instead of failing with "already registered".
"""
from __future__ import annotations
from pathlib import Path
from typing import Any, Iterator
import pytest

ROOTS = pytest.StashKey[list]()

def pytest_addoption(parser: pytest.Parser) -> None:
  g = parser.getgroup("replay", "process replay (tinysched capture stores as tests)")
  g.addoption("--replay", action="append", default=[], metavar="PATH",
              help="replay capture stores as tests: a folder (its *.db files) or .db files; repeatable")

def pytest_configure(config: pytest.Config) -> None:
  paths = [Path(p) for p in config.getoption("replay") or []]
  config.stash[ROOTS] = [p.resolve() for p in paths]
  if not paths: return
  if missing := [str(p) for p in paths if not p.exists()]:
    raise pytest.UsageError(f"--replay {missing[0]}: no such file or directory (pass a folder of capture stores or .db files)")
  # the stores become collection arguments; without explicit test paths they replace the configured testpaths
  src = getattr(pytest.Config, "ArgsSource", None)
  explicit = src is None or getattr(config, "args_source", None) == src.ARGS
  args = list(config.args) if explicit else []
  for p in config.stash[ROOTS]:
    if str(p) not in args: args.append(str(p))
  config.args[:] = args

def _wanted(config: pytest.Config, path: Path) -> bool:
  roots = config.stash.get(ROOTS, [])
  if not roots or path.suffix != ".db": return False
  p = path.resolve()
  return any(p == r or r in p.parents for r in roots)

def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
  if _wanted(parent.config, file_path): return ReplayStore.from_parent(parent, path=file_path)
  return None

class ReplayStore(pytest.File):
  """One capture store: an item per (label, level) it holds."""
  def collect(self) -> Iterator[pytest.Item]:
    from replay.store import Store, StoreError, LEVELS
    try: store = Store(self.path, readonly=True)
    except StoreError as e: raise self.CollectError(f"{e}") from None
    try: pairs = store.conn.execute("SELECT DISTINCT coalesce(label, ''), level FROM captures").fetchall()
    finally: store.close()
    rank = {lv: i for i, lv in enumerate(LEVELS)}
    for label, level in sorted(pairs, key=lambda p: (p[0], rank.get(p[1], len(LEVELS)), p[1])):
      yield ReplayItem.from_parent(self, name=f"replay[{self.path.name}::{label or '-'}::{level}]", label=label, level=level)

class ReplayFailure(Exception):
  def __init__(self, text: str):
    super().__init__(text)
    self.text = text

class ReplayItem(pytest.Item):
  def __init__(self, *, label: str, level: str, **kw: Any):
    super().__init__(**kw)
    self.label, self.level = label, level

  def runtest(self) -> None:
    from replay.check import check
    from replay import report as R
    rep = check([str(self.path)], level=self.level, label=self.label or None, jobs=1)
    if not self.label: rep.results = [r for r in rep.results if not r.label]  # the store filter cannot select "no label"
    for outcome, n in rep.counts().items(): self.user_properties.append((outcome, n))
    if rep.exit_code() != 0: raise ReplayFailure(R.terminal(rep, verbose=True))

  def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style=None) -> str:
    if isinstance(excinfo.value, ReplayFailure): return excinfo.value.text
    return str(super().repr_failure(excinfo))

  def reportinfo(self) -> tuple[Path, int | None, str]:
    return self.path, None, f"{self.path.name}: {self.label or '-'} {self.level} captures"
