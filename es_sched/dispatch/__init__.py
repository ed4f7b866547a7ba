"""Dispatch: which ready task goes next, to which worker, under which lease.

``core/`` is the pure part (queues, limits, placement, leases, preemption): no I/O, never reads
the clock. Beside it, the dispatcher role (``dispatcher.py``: the tick, and what it does with
each input) feeds the core from Kafka and turns its decisions into assignments; ``readers/``
has one reader per input topic (its consumer, position and decoding), ``output.py`` writes;
``journal.py`` keeps leases across restarts (ADR 14); ``ready_offsets.py`` is the ready topic's
commit point; ``records.py`` maps Kafka records to the core's objects and ``config.py`` folds
the run-time config records into the core.
"""
