"""The ``es-sched`` command line: ``main.py`` is the root group, one module per command group."""
