"""A broker slow or away while the dispatcher starts is waited out, not a failed role: the
config and worker-status catch-up is retried until it succeeds or the role is stopped."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from es_sched.dispatch.dispatcher import Dispatcher
from es_sched.dispatch.readers.config import ConfigReader
from es_sched.dispatch.readers.worker_status import StatusReader
from es_sched.errors import InfrastructureError
from es_sched.kafka import partition_ends
from es_sched.kafka.connection import KafkaConnection
from es_sched.kafka.tail import Tail
from testkit.settings import private_vars, settings_with
from tests.unit.dispatch.fakes import T0, FakeOutput


class FlakyTail:
    """``catch_up`` fails ``failures`` times, then returns nothing."""

    def __init__(self, failures: int) -> None:
        self.failures, self.calls = failures, 0

    def catch_up(self) -> list[Any]:
        self.calls += 1
        if self.calls <= self.failures:
            raise InfrastructureError("catching up with config: Timed out")
        return []


def dispatcher(config: FlakyTail, status: FlakyTail, stop: threading.Event) -> Dispatcher:
    d = Dispatcher(settings_with(private_vars("p")), clock=lambda: T0, token=lambda: "tok")
    d.config = ConfigReader(config, FakeOutput())  # type: ignore[arg-type]
    d.status = StatusReader(status, FakeOutput())  # type: ignore[arg-type]
    d._stop = stop
    return d


def test_the_startup_catch_up_is_retried_after_a_broker_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("es_sched.dispatch.dispatcher.RESUME_RETRY_S", 0.0)
    config, status = FlakyTail(2), FlakyTail(0)
    assert dispatcher(config, status, threading.Event())._catch_up_views() is True
    assert (config.calls, status.calls) == (3, 1)


def test_stopping_the_role_ends_the_wait() -> None:
    stop = threading.Event()
    stop.set()
    assert dispatcher(FlakyTail(1), FlakyTail(0), stop)._catch_up_views() is False


class TimingOut:
    def get_watermark_offsets(self, *_: Any, **__: Any) -> tuple[int, int]:
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "Failed to get watermark offsets"))

    def close(self) -> None:
        pass


def test_a_tail_translates_a_driver_timeout_into_infrastructure_trouble(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(partition_ends, "consumer", lambda *_a, **_k: TimingOut())
    tail = Tail.__new__(Tail)
    tail.topic, tail.partitions, tail._bootstrap, tail._ends = (
        "t.config",
        [0],
        KafkaConnection.plaintext("unused"),
        None,
    )
    tail.consumer = TimingOut()  # type: ignore[assignment]
    with pytest.raises(InfrastructureError, match=r"catching up with t\.config"):
        tail.catch_up()
