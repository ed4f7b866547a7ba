"""``es-sched demo``: ``command.py`` is the CLI and its live board, ``pipeline.py`` the run."""
