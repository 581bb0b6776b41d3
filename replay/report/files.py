"""The report files a check writes: Markdown (a PR comment or job summary), JSON, JUnit XML and the HTML page.

Each file is written whole or not at all: rendered first, then written to a temporary file beside it and renamed over
it (os.replace), so a renderer that raises, a full disk or a kill leaves the previous file as it was (a CI step never
posts half a comment or parses a truncated XML file) and no temporary file behind.
"""
from __future__ import annotations
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable
from replay.errors import HintedError
from replay.check.results import Report
from replay.report import drawing, html as H, text as R
from replay.report.atomic import write_atomic

@dataclass(frozen=True)
class ReportPaths:
  md: str | None = None
  json: str | None = None
  junit: str | None = None
  html: str | None = None
  def given(self) -> list[str]: return [p for p in (self.md, self.json, self.junit, self.html) if p]

class ReportWriteError(HintedError):
  """A report file that cannot be made or written (exit 2)."""

def html_drawings(rep: Report) -> dict:
  """The AST drawings of a report's HTML page (replay.report.drawing), made while the stores are there to read."""
  return drawing.draw_results([m for g in R.ordered_groups(rep) for m in g["members"]])

def write_reports(rep: Report, paths: ReportPaths, drawings: dict | None = None) -> None:
  """Write the report files `paths` names. `drawings`: made by html_drawings(rep) when the stores may be gone by now
  (replay commits); otherwise drawn here. All are rendered before any is written, so a renderer that fails changes no
  file. Raises ReportWriteError."""
  makers: list[tuple[str, Callable[[], Any]]] = []
  if paths.md: makers.append((paths.md, lambda: R.markdown(rep, html_name=Path(paths.html).name if paths.html else None)))
  if paths.json: makers.append((paths.json, lambda: R.json_text(rep)))
  if paths.junit: makers.append((paths.junit, lambda: R.junit(rep)))
  if paths.html: makers.append((paths.html, lambda: H.render(rep, drawings if drawings is not None else html_drawings(rep))))
  texts: list[tuple[str, str]] = []
  for path, make in makers:
    try: texts.append((path, make()))
    except OSError as e: raise ReportWriteError(f"cannot make the report {path}: {e}") from None
    except Exception as e:  # noqa: BLE001 (a renderer's bug must not exit 1, the code for "changes found")
      raise ReportWriteError(f"cannot make the report {path}: {type(e).__name__}: {e}",
                             "a bug in the report renderer: the replay result is the exit code and the terminal summary") from e
  for path, text in texts:
    try: write_atomic(path, text)
    except OSError as e: raise ReportWriteError(f"cannot write the report {path}: {e.strerror or e}",
                                                "name a file in a folder you can write") from None
