"""What the media handler tests share: a ``TaskContext`` whose reporter records progress (no
broker: the SDK's Kafka side is covered by test_worker_sdk) and a ``Toolkit`` over a folder."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from es_sched.serialization import wire
from es_sched.settings import MediaSettings
from es_sched.workers import TaskContext
from es_sched.workers.media import Toolkit
from es_sched.workers.reports import Reporter

JSON = dict[str, Any]
SECRET = "test-secret"


def make_kit(out: Path) -> Toolkit:
    settings = MediaSettings(
        output_dir=out, callback_secret=SECRET, callback_backoff_s=0.05, kill_grace_s=3.0
    )
    return Toolkit.create(settings)


@dataclass
class Progress:
    calls: list[tuple[float, str]] = field(default_factory=list)

    def progress(self, a: wire.Assignment, worker_id: str, seq: int, pct: float, msg: str) -> None:
        self.calls.append((pct, msg))


def context(
    task_type: str, attempt: int = 1, gpu_index: int | None = None, **res: Any
) -> TaskContext:
    a = wire.Assignment(
        worker_id="w-test",
        workflow_id="wf-media",
        task_id=f"task-{task_type}-{attempt}",
        task_type=task_type,
        attempt=attempt,
        lease_epoch=1,
        lease_token="tok",
        lease_expires_at="2030-01-01T00:00:00+00:00",
        input={},
        gpu=gpu_index,
        resources=res,
    )
    return TaskContext(a, "w-test", cast(Reporter, Progress()))


def progress_of(ctx: TaskContext) -> list[float]:
    return [pct for pct, _ in cast(Progress, ctx._reporter).calls]
