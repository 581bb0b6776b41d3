"""replay: capture what tinysched's scheduler and code generator do, replay it on new code, and diff."""
from replay.record.recorder import capture, start, stop
from replay.store.encode import IncompatibleCapture
__all__ = ["capture", "start", "stop", "IncompatibleCapture"]
