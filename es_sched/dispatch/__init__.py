"""Dispatch: which ready task goes next, to which worker, under which lease.

``core/`` is the pure part (queues, limits, placement, leases, preemption): no I/O, never reads
the clock. Beside it, the dispatcher role (``dispatcher.py``) feeds the core from Kafka and turns
its decisions into assignments; ``records.py`` maps Kafka records to the core's objects and
``config.py`` parses the run-time config records.
"""
