"""One class per capture level (kernel, schedule, program, model), found by name in a registry.

    from replay import levels
    levels.get("kernel").replay_output(data)   # the current code on a stored kernel-level input
    levels.LEVELS                              # ("kernel", "schedule", "program", "model"), in replay order

A level records what tinysched's capture hook hands it, decodes and replays a stored row, describes a change and
names its rules, and builds the execution check's job (replay/levels/base.py says what each method does). Nothing
outside this package asks which level a row is: adding a level is adding a module here with one registered class.
"""
from replay.levels.base import Change, Level, RowWriter, get, names, register
from replay.levels import kernel, schedule, program, model  # noqa: F401 (importing a level's module registers its class)

LEVELS: tuple[str, ...] = names()
HOOKED: tuple[str, ...] = tuple(n for n in LEVELS if get(n).hooked)  # what a capture records by default
__all__ = ["Change", "Level", "RowWriter", "LEVELS", "HOOKED", "get", "names", "register"]
