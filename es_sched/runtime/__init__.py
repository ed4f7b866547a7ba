"""The long-running roles of ``es-sched run``: decider, timers and retry relay."""
