"""The report files a check writes: Markdown (a PR comment or job summary), JSON, JUnit XML and the HTML page."""
from __future__ import annotations
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable
from replay.errors import HintedError
from replay.check.results import Report
from replay.report import drawing, html as H, text as R

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
  (replay commits); otherwise drawn here. Raises ReportWriteError."""
  def write(path: str, make: Callable[[], Any]) -> None:
    try: text = make()
    except OSError as e: raise ReportWriteError(f"cannot make the report {path}: {e}") from None
    try: Path(path).write_text(text, encoding="utf-8")
    except OSError as e: raise ReportWriteError(f"cannot write the report {path}: {e.strerror or e}",
                                                "name a file in a folder you can write") from None
  if paths.md: write(paths.md, lambda: R.markdown(rep, html_name=Path(paths.html).name if paths.html else None))
  if paths.json:
    try: R.write_json(rep, paths.json)
    except OSError as e: raise ReportWriteError(f"cannot write the report {paths.json}: {e.strerror or e}",
                                                "name a file in a folder you can write") from None
  if paths.junit: write(paths.junit, lambda: R.junit(rep))
  if paths.html: write(paths.html, lambda: H.render(rep, drawings if drawings is not None else html_drawings(rep)))
