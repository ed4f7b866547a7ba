"""The worker SDK: ``Worker`` serves one pool's assignments with registered task handlers.

See ``es_sched.workers.sdk`` for the contract (reports, cancellation, shutdown) and
``es_sched.workers.capacity`` for what a worker announces about its machine.
"""

from es_sched.workers.capacity import Capacity, discover
from es_sched.workers.sdk import HostFault, TaskCancelled, TaskContext, TaskFailure, Worker

__all__ = [
    "Capacity",
    "HostFault",
    "TaskCancelled",
    "TaskContext",
    "TaskFailure",
    "Worker",
    "discover",
]
