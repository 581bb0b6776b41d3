"""Report files written whole: a reader (a CI parser, a browser) sees the previous file or the new one, never a part of
one, and a write that fails leaves the previous file as it was."""
from __future__ import annotations
import os, secrets

def write_atomic(path: str | os.PathLike, text: str) -> None:
  """Write `text` (UTF-8; a lone surrogate, which no renderer should let through, as its `\\udcff` escape rather than a
  crash) to `path`, atomically: a temporary file in the same folder, flushed to disk, then renamed over `path`.
  A link is written through, like open() would. Raises OSError; the temporary file is gone then."""
  target = os.path.realpath(path)
  data = text.encode("utf-8", "backslashreplace")
  tmp = os.path.join(os.path.dirname(target), f".{os.path.basename(target)}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
  fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)  # mode: the umask's, as open() gives
  try:
    with os.fdopen(fd, "wb") as f:
      f.write(data)
      f.flush()
      os.fsync(f.fileno())  # the data is on disk before the name points at it
    os.replace(tmp, target)
  except BaseException:
    try: os.unlink(tmp)
    except OSError: pass
    raise
