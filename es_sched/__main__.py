"""``python -m es_sched``: the ``es-sched`` command line, as the console script runs it."""

from es_sched.cli.entry import console

console()
