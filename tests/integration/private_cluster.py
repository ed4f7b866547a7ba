"""A private three-node Kafka cluster a test may kill, driven by the ``es-sched stack`` CLI.

``es-sched stack up --only kafka --kafka-brokers 3`` with its own state folder (under the
test's tmp) and its own ports (bootstrap 19130/19132/19134, controllers 19131/19133/19135):
never the shared broker at 127.0.0.1:9092. The operator's commands are the test's: ``up``
starts the cluster (and, later, exactly the nodes that are missing), ``status --json`` names
the nodes' pids and health, ``down`` stops what this state folder started. ``kill`` is a real
kill -9 of one node's JVM. The jar cache is the shared stack's, so nothing is downloaded.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient

from es_sched.settings import load_settings
from es_sched.stack import process
from testkit.cli import es_sched

NODES = ("kafka", "kafka-2", "kafka-3")  # node ids 1, 2, 3


class PrivateCluster:
    def __init__(self, state_dir: Path, port: int = 19130, controller_port: int = 19131) -> None:
        self.vars = {
            "ES_SCHED_STACK_STATE_DIR": str(state_dir),
            "ES_SCHED_STACK_CACHE_DIR": str(load_settings().stack.resolved_cache_dir),
            "ES_SCHED_STACK_MODE": "local",
            "ES_SCHED_KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{port}",
            "ES_SCHED_STACK_KAFKA_CONTROLLER_PORT": str(controller_port),
            "ES_SCHED_STACK_KAFKA_HEAP": "384m",  # three JVMs beside the shared stack
        }
        self.bootstrap = ",".join(f"127.0.0.1:{port + 2 * i}" for i in range(len(NODES)))

    def cli(self, *args: str) -> tuple[int, str, str]:
        done = es_sched("stack", *args, "--only", "kafka", env=self.vars)
        return done.returncode, done.stdout, done.stderr

    def up(self, *extra: str) -> tuple[str, float]:
        """``stack up``; its stderr (what it started) and the seconds it took."""
        started = time.monotonic()
        code, out, err = self.cli("up", *extra)
        assert code == 0, out + err
        return err, time.monotonic() - started

    def status(self) -> dict[str, Any]:
        _code, out, _err = self.cli("status", "--json")
        doc: dict[str, Any] = json.loads(out)
        return doc

    def pid(self, node: str) -> int:
        pid = self.status()[node]["pid"]
        assert isinstance(pid, int), f"{node} has no pid: {self.status()}"
        return pid

    def kill(self, node: str) -> int:
        """kill -9 of one node's JVM; returns its pid once the process is gone."""
        pid = self.pid(node)
        os.kill(pid, signal.SIGKILL)
        assert process.wait_exit(pid, 30), f"{node} pid {pid} survived SIGKILL"
        return pid

    def down(self) -> str:
        code, out, err = self.cli("down")
        assert code == 0, out + err
        return err

    def metadata(self, via: str | None = None) -> Any:
        admin = AdminClient({"bootstrap.servers": via or self.bootstrap, "log_level": 0})
        return admin.list_topics(timeout=10)
