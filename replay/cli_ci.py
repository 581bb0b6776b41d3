"""CI commands of the `replay` CLI: commits, accept, gate (registered on the main group)."""
from __future__ import annotations
import click

def register(main: click.Group) -> None:
  """Add the CI commands to `main`."""
