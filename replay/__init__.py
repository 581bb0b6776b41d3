"""replay: capture what tinysched's scheduler and code generator do, replay it on new code, and diff."""
