"""What a capture is at rest: the canonical JSON encoding of UOp graphs (`encode`) and the SQLite store (`sqlite`)."""
