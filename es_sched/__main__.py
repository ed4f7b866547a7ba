"""``python -m es_sched``: the ``es-sched`` command line.

``run`` takes a short path: only ``es_sched.cli.run`` and the roles it starts are imported, not
the other commands (the audit, projection, search and PostgreSQL clients, rich tables), which
took most of a restarted role's start-up, 1.2-1.4 s before its first log line (ADR 21).
"""

import sys

if sys.argv[1:2] == ["run"]:
    from es_sched.cli.entry import invoke
    from es_sched.cli.run import run

    sys.argv[1:2] = []
    invoke(run, "es-sched run")
else:
    from es_sched.cli.main import main

    main()
