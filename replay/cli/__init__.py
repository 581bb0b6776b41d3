"""The `replay` command line: a thin click layer over the library."""
from replay.cli.app import main
__all__ = ["main"]
