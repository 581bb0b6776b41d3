"""Stored text made safe for each output it reaches: the terminal, JUnit XML, Markdown.

A store may be crafted (or written by a buggy recorder): any label, key, level, message, diff or traceback can hold
control characters, ANSI escape sequences, lone surrogates (a payload's JSON can spell them), or Markdown and HTML
syntax. Every renderer passes such text through the function here for its output, so a value can neither act on the
reader's terminal, make a CI parser reject the XML, nor end a table cell, code span or `<details>` block.

Escaped characters show as Python spells them (`\\x1b`, `\\x9b`, `\\udcff`), the way the store's invalid UTF-8 is
shown too (replay.store.sqlite decodes it with backslashreplace: `\\xff`). A backslash itself is left as it is, so the
escapes are idempotent; a value that spells `\\x1b` literally looks like one that held ESC, which is fine for display.
(The HTML report escapes with html.escape: control characters are inert in an HTML page.)
"""
from __future__ import annotations
import re
from typing import Any
from xml.sax.saxutils import escape as _xml_escape, quoteattr as _xml_quoteattr

# C0 controls but tab and newline (CR included: it overwrites a line), DEL, C1 (0x9b is an 8-bit CSI), lone surrogates
# (not encodable as UTF-8: they would crash the write), and U+FFFE/U+FFFF (not allowed in XML 1.0). ESC is among them,
# so an ANSI escape sequence loses the byte that makes it act and shows as text.
# The bidirectional embedding/override/isolate controls too (U+202A-202E, U+2066-2069): they reorder what is shown
# ("Trojan Source"), so a label could display as another.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff\ufffe\uffff]")
_CONTROL_OR_NEWLINE = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff\ufffe\uffff]")  # one line: \n too

_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}

def _visible(m: re.Match) -> str:
  ch = m.group()
  if (short := _SHORT.get(ch)) is not None: return short
  return f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}"

def visible(s: Any) -> str:
  """`s` as text with every control character, lone surrogate and XML non-character escaped; newline and tab kept."""
  return _CONTROL.sub(_visible, str(s))

def terminal(s: Any) -> str:
  """Text for a terminal (stdout or stderr), several lines allowed: nothing in it can move the cursor, change colours,
  set the window title or fail to encode."""
  return visible(s)

def terminal_line(s: Any) -> str:
  """One field of one terminal line (a label, a key): also its newlines escaped, so a value cannot forge a line."""
  return _CONTROL_OR_NEWLINE.sub(_visible, str(s))

# *** JUnit XML 1.0 (character references do not help: &#27; is as illegal as the character) ***

def xml_text(s: Any) -> str:
  """Element content: well-formed XML whatever `s` holds (`]]>` included: `>` is escaped)."""
  return _xml_escape(visible(s))

def xml_attr(s: Any) -> str:
  """An attribute value with its quotes; newlines and tabs as character references (kept, not normalized away)."""
  return _xml_quoteattr(visible(s))

# *** Markdown (GitHub flavoured: PR comments and job summaries) ***

# characters that can end a table cell (|), start or end a code span (`), open HTML or an entity (< > &), make a link
# ([ ]) or bold text (*), or escape our own delimiters (\); as numeric character references, which GitHub renders as
# the plain character both in Markdown text and inside an HTML block such as the <summary> line. (`_` is left: inside
# identifiers GitHub never reads it as emphasis, and `values_changed` stays readable in the raw text.)
_MD_SPECIAL = {c: f"&#{ord(c)};" for c in "&<>|`[]*\\"}
_MD_SPECIAL_RE = re.compile("[" + re.escape("".join(_MD_SPECIAL)) + "]")

def _one_line(s: Any, width: int | None) -> str:
  """Whitespace runs (newlines, U+2028 and the like included) as one space, cut to `width` characters."""
  t = " ".join(str(s).split())
  return t if width is None or len(t) <= width else t[:width - 1] + "…"

def md_text(s: Any, width: int | None = None) -> str:
  """Plain inline text (a table cell, a list item, the <summary> line): one line, shown as it is, never markup."""
  return _MD_SPECIAL_RE.sub(lambda m: _MD_SPECIAL[m.group()], terminal_line(_one_line(s, width)))

def md_code(s: Any, width: int | None = 300, table: bool = True) -> str:
  """The inside of a single-backtick code span: one line, backticks as ', and `|` escaped when in a table (GitHub
  splits cells before it parses code spans)."""
  t = terminal_line(_one_line(s, width)).replace("`", "'")
  return t.replace("|", "\\|") if table else t

def md_block(s: Any) -> str:
  """The inside of a ``` fenced code block: lines kept, control characters shown, no ``` that could close the fence."""
  return visible(s).replace("```", "'''")
