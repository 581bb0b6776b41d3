"""Reports of a check: terminal, Markdown, JSON, JUnit, HTML, drawings, and `show`/`stats` text."""
