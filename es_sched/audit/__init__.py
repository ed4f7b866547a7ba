"""The invariant checker (``es-sched audit check``): Jepsen-style checks over the recorded log.

``log`` holds what a checker reads (events and inputs, each with its topic, partition and
offset), ``invariants`` the checks over the log alone (I1 no lost work, I2 contiguous seq
without duplicates, I3 one accepted outcome per attempt, from the live lease), ``determinism``
the replay of ``decide`` over the recorded inputs (I5), ``check`` runs them all, and ``read``
is the one adapter that fills a ``Log`` from the topics. I4 (read models equal the fold) is
``projections.replay``'s verify, joined in by the command line. The checks do no I/O, so the
fault tests and the command line run the same rules over the same records.
"""
