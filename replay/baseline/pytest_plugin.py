"""pytest plugin: replay capture stores as tests, and capture a test run (the `pytest11` entry point `replay.baseline.pytest_plugin`).

  pytest tests/ --replay-capture tests.db   record every scheduler/codegen call of the run, labelled with the
                                            test's node id (deduplicated by key: a store of what the tests exercise)

  pytest --replay captures/                 every *.db under captures/ (or pass .db files; repeatable)
  pytest --replay captures/ -n 4            with pytest-xdist
  pytest --replay captures/ -k "mlp and kernel" --junitxml replay.xml

One test item per (store, capture label, level), named `replay[<store>::<label>::<level>]` (`-` for an
unlabelled capture), in a fixed order (store path, label, level). Each item replays its captures through the
current code (replay.check.pool.check with level/label filters, one process) and fails with the grouped report
when anything changed, errored or could not be decoded. Items share nothing, so any subset runs in any
worker. With `--replay` and no test paths on the command line, only the replay items are collected
(not the configured testpaths); `pytest tests --replay captures/` runs both. `-p no:replay.baseline.pytest_plugin`
disables it. The entry point is named like the module, so `-p replay.baseline.pytest_plugin` next to autoloading
registers it once instead of failing with "already registered".

The entry point loads this module into every pytest session of every project that installs replay, most of which use
neither option: its module level imports only what pytest_addoption and pytest_configure need, and the hooks import
the rest when an option asks for it. (The `replay` package itself still imports the recorder, and so tinysched, for
`replay.capture`.)
"""
from __future__ import annotations
from pathlib import Path
from typing import Any, Iterator
import pytest

ROOTS = pytest.StashKey[list]()
CAPTURE = pytest.StashKey[object]()

def pytest_addoption(parser: pytest.Parser) -> None:
  g = parser.getgroup("replay", "process replay (tinysched capture stores as tests)")
  g.addoption("--replay", action="append", default=[], metavar="PATH",
              help="replay capture stores as tests: a folder (its *.db files) or .db files; repeatable")
  g.addoption("--replay-capture", metavar="DB", default=None,
              help="capture every scheduler and codegen call of this test run into DB, labelled with the test's node id")
  g.addoption("--replay-capture-levels", metavar="LEVELS", default="kernel,schedule,program",
              help="levels for --replay-capture (comma-separated; default: all)")

def _capture_levels(config: pytest.Config) -> tuple[str, ...]:
  from replay.levels import LEVELS  # at use (see the module docstring): only --replay-capture asks
  levels = tuple(x.strip() for x in config.getoption("replay_capture_levels").split(",") if x.strip())
  if bad := [x for x in levels if x not in LEVELS]:
    raise pytest.UsageError(f"--replay-capture-levels: unknown level(s) {bad}; choose from {', '.join(LEVELS)}")
  return levels

def pytest_sessionstart(session: pytest.Session) -> None:
  """--replay-capture: one capture run per test process (xdist workers each write their own run into the same store,
  which takes concurrent writers); the controller of an xdist run runs no tests and captures nothing."""
  config = session.config
  if not (db := config.getoption("replay_capture")): return
  levels = _capture_levels(config)
  if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"): return
  # at use (see the module docstring): only --replay-capture records
  from replay.record import recorder
  from replay.store.sqlite import StoreError  # (as above)
  try: c = recorder.start(db, label="", levels=levels)
  except (StoreError, OSError, ValueError, RuntimeError) as e:
    raise pytest.UsageError(f"--replay-capture {db}: cannot capture there: {e}") from None
  c.yields = True  # a test that captures on its own pauses this capture for its duration
  # a test that patches a scheduler or codegen rule (to plant a bug, or to count calls) makes outputs no baseline may
  # hold: while the rules differ from the session's, nothing is captured (counted in `dropped`)
  import tinysched.schedule  # noqa: F401 (at use, as above; the fingerprint covers the facade once it is imported)
  from tinysched.scheduling.kernel_ast import rules_fingerprint, same_rules  # (at use, as above)
  fp = rules_fingerprint()
  c.accept = lambda: same_rules(fp, rules_fingerprint())
  config.stash[CAPTURE] = c

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item):
  if item.config.stash.get(CAPTURE, None) is None:
    yield
    return
  from replay.record import recorder  # at use (see the module docstring): only --replay-capture records
  recorder.relabel(item.nodeid)
  try: yield
  finally: recorder.relabel("")

def pytest_sessionfinish(session: pytest.Session) -> None:
  if session.config.stash.get(CAPTURE, None) is None: return
  from replay.record import recorder  # at use (see the module docstring): only --replay-capture records
  recorder.stop()
  session.config.stash[CAPTURE] = None
  if recorder.FAILURES and session.exitstatus == 0:
    # the tests ran on (capture never breaks them) but the store is incomplete: the run that asked for it must not pass
    session.exitstatus = pytest.ExitCode.INTERNAL_ERROR

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
    from replay.levels import LEVELS  # at use (see the module docstring): only --replay collects stores
    from replay.store.sqlite import Store, StoreError  # (as above)
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
    from replay import check  # (at use: a plain pytest run that never collects stores does not import the replay pipeline)
    from replay.report import text as R  # (as above)
    rep = check.run(check.Selection((str(self.path),), level=self.level, label=self.label or None), check.Options(jobs=1))
    if not self.label: rep.results = [r for r in rep.results if not r.label]  # the store filter cannot select "no label"
    for outcome, n in rep.counts().items(): self.user_properties.append((outcome, n))
    if rep.exit_code() != 0: raise ReplayFailure(R.terminal(rep, verbose=True))

  def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style=None) -> str:
    if isinstance(excinfo.value, ReplayFailure): return excinfo.value.text
    return str(super().repr_failure(excinfo))

  def reportinfo(self) -> tuple[Path, int | None, str]:
    return self.path, None, f"{self.path.name}: {self.label or '-'} {self.level} captures"
