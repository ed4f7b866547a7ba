"""A private single-node Kafka a test may kill: own ports, own state folder, shared jar cache.

Built from the same ``LocalKafka`` that ``es-sched stack up`` uses (as the private-stack test in
tests/e2e/test_stack_cli.py and bench/stack_up.py do), but started and watched here so the test
holds the broker's pid: ``kill()`` is a real kill -9, ``start()`` after it restarts the broker on
the same data (log recovery included).
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from es_sched.settings import (
    DispatchSettings,
    KafkaSettings,
    PostgresSettings,
    RuntimeSettings,
    SearchSettings,
    Settings,
    StackSettings,
    load_settings,
)
from es_sched.stack import probes, process
from es_sched.stack.kafka import LocalKafka
from testkit.settings import kafka_connection


class PrivateKafka:
    def __init__(self, state_dir: Path, port: int, controller_port: int) -> None:
        self.bootstrap = f"127.0.0.1:{port}"
        shared_cache = load_settings().stack.resolved_cache_dir
        settings = Settings(
            kafka=KafkaSettings(bootstrap_servers=self.bootstrap),
            postgres=PostgresSettings(),
            search=SearchSettings(),
            stack=StackSettings(
                mode="local",
                state_dir=state_dir,
                cache_dir=shared_cache,
                kafka_controller_port=controller_port,
            ),
            runtime=RuntimeSettings(),
            dispatch=DispatchSettings(),
        )
        self.service = LocalKafka(settings)
        self.pid: int | None = None

    @property
    def log_file(self) -> Path:
        return self.service.log_file

    def start(self, timeout_s: float = 180.0) -> float:
        """Start the broker and wait until it answers; the seconds that took."""
        if probes.port_open("127.0.0.1", int(self.bootstrap.rpartition(":")[2])):
            raise AssertionError(f"{self.bootstrap} is taken: cannot run a private broker there")
        started = time.monotonic()
        self.pid = self.service.start()
        while not probes.kafka(kafka_connection(self.bootstrap)).healthy:
            if not Path(f"/proc/{self.pid}").exists():
                raise AssertionError(f"private Kafka exited:\n{process.tail(self.log_file)}")
            if time.monotonic() - started > timeout_s:
                self.stop()
                raise AssertionError(f"private Kafka not ready after {timeout_s:.0f}s")
            time.sleep(0.5)
        return time.monotonic() - started

    def kill(self) -> int:
        """kill -9 and wait until the process is gone; the pid that was killed."""
        pid = self.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        assert process.wait_exit(pid, 30), f"broker pid {pid} survived SIGKILL"
        self.pid = None
        return pid

    def stop(self) -> None:
        if self.pid is not None:
            os.kill(self.pid, signal.SIGTERM)
            if not process.wait_exit(self.pid, 60):
                os.kill(self.pid, signal.SIGKILL)
                process.wait_exit(self.pid, 10)
            self.pid = None


def private_kafka(state_dir: Path, port: int, controller_port: int) -> Iterator[PrivateKafka]:
    """A fixture's body: a started ``PrivateKafka``, stopped afterwards even if a test left it
    SIGSTOPped (a stopped JVM does not handle SIGTERM); skipped without java and mvn."""
    if shutil.which("java") is None or shutil.which("mvn") is None:
        pytest.skip("a private broker needs java and mvn (the local stack's Kafka build)")
    broker = PrivateKafka(state_dir, port, controller_port)
    try:
        broker.start()
        yield broker
    finally:
        if broker.pid is not None and Path(f"/proc/{broker.pid}").exists():
            os.kill(broker.pid, signal.SIGCONT)
        broker.stop()


def process_state(pid: int) -> str:
    """The process state letter of ``/proc/<pid>/stat`` (R, S, T stopped, Z, ...)."""
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
