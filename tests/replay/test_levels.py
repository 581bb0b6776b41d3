"""Capture levels are classes in a registry: a new level is one registered class, and the recorder, the check, the
reports and accept handle its rows with no other edit (the point of replay/levels/)."""
from __future__ import annotations
import json
from typing import Any
import pytest
from replay import levels
from replay.check import Options, Selection, run
from replay.levels.base import REGISTRY, Change, Level, RowWriter
from replay.levels import astdiff as D
from replay.record.recorder import Capturer
from replay.report import text as R, html as H
from replay.store.encode import IncompatibleCapture, key_of
from replay.store.sqlite import Store

class WordsLevel(Level):
  """A toy capture point: a list of words in, the words sorted out (what "the code under test" does to them)."""
  name = "words"
  rank = 9
  graph_output = False
  output_words = "sorted words"
  reverse = False  # the planted change: sort the other way

  def identity(self, inputs: Any, output: Any) -> tuple[Any, Any]: return ("words", tuple(inputs)), list(inputs)
  def write(self, w: RowWriter, inputs: Any, output: Any, info: dict | None, label: str) -> None:
    w.add(self.name, w.graph(json.dumps(inputs).encode(), "words"), w.graph(json.dumps(output).encode(), "words"), label,
          node_count=len(inputs), kernel_count=0)
  def decode_input(self, data: bytes) -> Any:
    try: words = json.loads(data)
    except ValueError as e: raise IncompatibleCapture(f"not JSON ({e})") from None
    if not isinstance(words, list): raise IncompatibleCapture("a words input is a list")
    return words
  def run(self, inputs: Any, full: dict | None = None, memo: Any = None, reoptimize: bool = False, host: dict | None = None) -> tuple[Any, bytes]:
    out = sorted(inputs, reverse=type(self).reverse)
    return out, json.dumps(out).encode()
  def decode_output(self, data: bytes) -> Any: return json.loads(data)
  def diff(self, old: Any, new: Any, names: tuple[str, str] = ("stored", "current"), prefix: str = "") -> Change:
    return Change(prefix + "words: order changed", D.text_diff("\n".join(old), "\n".join(new), *names))
  def input_text(self, inputs: Any, graph_text: Any) -> str: return " ".join(inputs)

@pytest.fixture
def words_level(monkeypatch):
  monkeypatch.setitem(REGISTRY, "words", WordsLevel())
  monkeypatch.setattr(WordsLevel, "reverse", False)
  yield WordsLevel

@pytest.fixture
def words_db(tmp_path, words_level):
  db = tmp_path / "words.db"
  cap = Capturer(db, label="toy", levels=("words",))
  for ws in (["b", "a", "c"], ["z", "y"], ["b", "a", "c"]):  # the repeat is dropped
    out, _ = levels.get("words").run(ws)
    cap("words", ws, out)
  cap.close()
  return db

def test_the_registry_names_the_four_levels_in_order():
  assert levels.LEVELS == ("kernel", "schedule", "program", "model")
  assert [levels.get(n).rank for n in levels.LEVELS] == [0, 1, 2, 3]
  assert levels.HOOKED == ("kernel", "schedule", "program")  # the model level is recorded by its own runner
  with pytest.raises(IncompatibleCapture, match="level is 'bogus', not a capture level"): levels.get("bogus")

def test_a_new_level_is_one_class(words_db, words_level):
  rep = run(Selection((str(words_db),)))
  assert rep.counts()["identical"] == 2 and rep.exit_code() == 0, R.terminal(rep, verbose=True)
  words_level.reverse = True  # plant: the code under test sorts the other way
  rep = run(Selection((str(words_db),)))
  assert rep.counts()["changed"] == 2 and rep.exit_code() == 1
  assert [g["signature"] for g in rep.groups()] == ["words: order changed"]
  r = rep.results[0]
  assert r.level == "words" and "-c" in (r.text_diff or "") and "+c" in (r.text_diff or "")  # (c moved: a line out, a line in)
  # every report renders it, through the level's words
  assert "words: order changed" in R.terminal(rep, verbose=True) and "words: order changed" in R.markdown(rep)
  assert "sorted words, stored vs current" in H.render(rep, {})

def test_accept_and_exec_ask_the_level(words_db, words_level):
  from replay.baseline.accept import Row, accept_rows
  words_level.reverse = True
  s = Store(words_db, readonly=True)
  try: rows = [Row(str(words_db), r) for r in s.captures()]
  finally: s.close()
  res = accept_rows(rows, "the toy sorts backwards now", log=lambda s: None)
  assert len(res.accepted) == 2
  assert run(Selection((str(words_db),))).exit_code() == 0
  # a level without an execution job says so: skipped, with the level's reason, never a crash
  words_level.reverse = False
  rep = run(Selection((str(words_db),)), Options(exec="changed", device="NUMPY"))
  assert {r.exec["verdict"] for r in rep.results} == {"skipped"}
  assert "no execution check at words level" in rep.results[0].exec["reason"]

def test_rows_of_an_unknown_level_are_incompatible(words_db, monkeypatch):
  monkeypatch.delitem(REGISTRY, "words")
  rep = run(Selection((str(words_db),)))
  assert rep.counts()["incompatible"] == 2 and rep.exit_code() == 2
  assert "level is 'words', not a capture level of this code" in rep.results[0].reason

def test_key_of_is_the_content_hash():
  assert key_of(b"x") == "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881"

def test_an_accept_without_the_new_payload_changes_nothing(words_db, words_level, monkeypatch):
  # plant: a level whose accept summary forgets the payload; the store refuses rather than point a row at nothing
  from replay.baseline.accept import AcceptError, Row, accept_rows
  monkeypatch.setattr(WordsLevel, "output_summary", lambda self, out, data, key: {}, raising=False)
  words_level.reverse = True
  s = Store(words_db, readonly=True)
  try: rows = [Row(str(words_db), r) for r in s.captures()]
  finally: s.close()
  with pytest.raises((AcceptError, Exception), match="no payload for the new output"): accept_rows(rows, "x", log=lambda s: None)
  words_level.reverse = False
  assert run(Selection((str(words_db),))).exit_code() == 0  # the store is as it was
