"""Recording: the hook tinysched calls while a program runs, written into a store (`recorder`)."""
