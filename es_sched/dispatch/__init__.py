"""Dispatch: which ready task goes next, to which worker, under which lease.

``core/`` is the pure part (queues, limits, placement, leases, preemption): no I/O, never reads
the clock. Beside it, the dispatcher role (``dispatcher.py``: the tick; ``inputs.py`` reads the
topics, ``output.py`` writes) feeds the core from Kafka and turns its decisions into
assignments; ``journal.py`` keeps leases across restarts (ADR 14); ``records.py`` maps Kafka
records to the core's objects and ``config.py`` parses the run-time config records.
"""
