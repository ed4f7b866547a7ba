"""The dispatcher's pure core: which ready task goes next, and to which worker.

Like ``es_sched.domain`` it does no I/O and never reads the clock: ``now`` is passed in. The
dispatcher role (``es_sched.dispatch.dispatcher``) feeds it ready tasks, worker status and
config events and turns its decisions into assignments.
"""
