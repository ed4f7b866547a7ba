"""The dispatcher's readers: one per input topic, each owning its consumer and its position.

A reader reads its topic, decodes each record (a poison one goes to the dead-letter topic, or
for events, which only the decider writes, to the log) and hands the dispatcher what the record
means; the dispatcher (``es_sched.dispatch.dispatcher``) decides what to do with it. The
readers' ``poll`` and ``catch_up`` take the records from the broker at once and decode them one
at a time as the dispatcher iterates, so each record is decoded just before it is applied.

- ``ready.ReadyReader``: ``ready``, in the dispatchers' consumer group; hands ``Arrival``s
  (a task and where it was read). Owns the ready offsets: committed only when the dispatcher
  says its records are delivered, never past a task still waiting.
- ``worker_status.StatusReader``: ``worker-status``, whole, no group; hands ``Report``s,
  ``Progress`` and ``WorkerLeft``.
- ``config.ConfigReader``: ``config``, whole, no group; hands ``ConfigChange``s.
- ``events.EventReader``: ``events``, from its end, no group; hands ``TaskEnd``s.

The three group-less readers (``kafka.tail.Tail``) commit nothing: their position is in memory,
advances as they poll and restarts with the process (at the beginning, or for events the end).
"""
