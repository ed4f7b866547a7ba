"""``es-sched stack up | down | status``: one entry point over local processes or compose.

``up`` is idempotent: a service of ours that is already running is only probed, and a healthy
service of somebody else's on the configured endpoint is used as it is ("external") and never
touched. ``down`` stops exactly the processes whose PID files this state folder holds. ``up``
also makes sure ffmpeg and ffprobe are installed (``es_sched.stack.ffmpeg``) for the media
handlers that workers on this machine run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Literal

from es_sched.errors import StackError
from es_sched.settings import Settings
from es_sched.stack import compose, probes
from es_sched.stack import process as proc
from es_sched.stack.base import LocalService
from es_sched.stack.ffmpeg import ensure_ffmpeg
from es_sched.stack.kafka import LocalKafka
from es_sched.stack.opensearch import LocalOpenSearch
from es_sched.stack.postgres import LocalPostgres

Role = Literal["kafka", "postgres", "search"]
ROLES: tuple[Role, ...] = ("kafka", "postgres", "search")
Managed = Literal["local", "docker", "external", "stopped"]
Report = Callable[[str, str], None]


@dataclass(frozen=True)
class ServiceStatus:
    role: Role
    service: str
    endpoint: str
    healthy: bool
    detail: str
    managed: Managed
    pid: int | None = None
    memory_mb: float | None = None
    log: str | None = None

    @property
    def key(self) -> str:
        """The role, or the node's name for Kafka nodes past the first (``kafka-2``...)."""
        return self.service if self.role == "kafka" else self.role

    def as_json(self) -> dict[str, object]:
        return asdict(self)


def _quiet(_role: str, _message: str) -> None:
    return None


class Stack:
    def __init__(
        self, settings: Settings, only: Iterable[Role] = ROLES, kafka_brokers: int | None = None
    ) -> None:
        self.settings = settings
        self.roles = tuple(only)
        self.mode_file = settings.stack.resolved_state_dir / "stack-mode"
        self.brokers_file = settings.stack.resolved_state_dir / "kafka-brokers"
        n = self._brokers(kafka_brokers)
        kafka_nodes = [LocalKafka(settings, i, n) for i in range(1, n + 1)]
        self.nodes: dict[Role, list[LocalService]] = {
            "kafka": list(kafka_nodes),
            "postgres": [LocalPostgres(settings)],
            "search": [LocalOpenSearch(settings)],
        }

    def _brokers(self, wanted: int | None) -> int:
        """The size of the local Kafka: the one this state folder was formatted as (recorded by
        ``up``), else ``wanted`` (``--kafka-brokers``), else the setting. A formatted cluster
        is never resized: its nodes know their controller quorum (ADR 20)."""
        recorded = None
        if self.brokers_file.exists():
            recorded = int(self.brokers_file.read_text().strip())
        elif (self.settings.stack.resolved_state_dir / "kafka" / "data").exists():
            recorded = 1  # a single node formatted before the size was recorded
        size = wanted or recorded or self.settings.stack.kafka_brokers
        if recorded is not None and size != recorded:
            raise StackError(
                f"the local Kafka in {self.settings.stack.resolved_state_dir} was formatted with "
                f"{recorded} broker(s), not {size}; `es-sched stack down` and remove its kafka* "
                "folders to change the size"
            )
        return size

    def _services(self) -> list[tuple[Role, LocalService]]:
        return [(role, svc) for role in self.roles for svc in self.nodes[role]]

    # -- mode ---------------------------------------------------------------------------------
    def mode(self) -> Literal["local", "docker"]:
        """The mode of a running stack if there is one, else the configured or detected one."""
        if self.mode_file.exists():
            recorded = self.mode_file.read_text().strip()
            if recorded in ("local", "docker"):
                return "docker" if recorded == "docker" else "local"
        wanted = self.settings.stack.mode
        if wanted == "auto":
            return "docker" if compose.engine_available() else "local"
        return wanted

    # -- up -----------------------------------------------------------------------------------
    def up(self, report: Report = _quiet) -> list[ServiceStatus]:
        ensure_ffmpeg(report)  # the media handlers' tools; one PATH lookup when present
        mode = self.mode()
        self.mode_file.parent.mkdir(parents=True, exist_ok=True)
        self.mode_file.write_text(mode + "\n")
        if mode == "docker":
            report("stack", "docker compose up (engine found)")
            compose.up(self.settings)
            return self.status()
        if "kafka" in self.roles:
            self.brokers_file.write_text(f"{len(self.nodes['kafka'])}\n")
        pending: dict[LocalService, float] = {}
        to_start: list[LocalService] = []
        for role, svc in self._services():
            if not svc.endpoint.is_local:
                report(role, f"external endpoint {svc.display_endpoint}: not managed here")
            elif svc.owned.pid() is not None:
                pending[svc] = time.monotonic()
            elif not probes.port_open(svc.endpoint.host, svc.endpoint.port):
                report(svc.name, "installing")
                svc.install()
                to_start.append(svc)
            elif svc.probe().healthy:
                report(role, f"a healthy service already answers on {svc.endpoint}: using it")
            else:
                raise StackError(
                    f"{svc.endpoint} is taken by a process es-sched did not start and that does "
                    f"not answer as {svc.name}; free the port or change the endpoint setting"
                )
        for svc in to_start:  # all nodes of a cluster start before any can be ready (quorum)
            pid = svc.start()
            report(svc.name, f"started pid {pid}, waiting for readiness")
            pending[svc] = time.monotonic()
        self._wait_ready(pending, set(to_start), report)
        return self._settled()

    def _settled(self) -> list[ServiceStatus]:
        """Every service of ours healthy at once, or the status at the deadline. Each was ready when
        it was probed, but a node already running can see a cluster in flux after it: with two
        of three nodes restarted, the survivor listed 2 of 3 brokers for a moment after both
        were ready (a fresh-clone CI run of test_cluster read its status then and failed)."""
        deadline = time.monotonic() + self.settings.stack.ready_timeout_s
        while True:
            statuses = self.status()
            ours = [s for s in statuses if s.managed == "local"]
            if all(s.healthy for s in ours) or time.monotonic() > deadline:
                return statuses
            time.sleep(0.5)

    def _wait_ready(
        self, pending: dict[LocalService, float], started: set[LocalService], report: Report
    ) -> None:
        deadline = time.monotonic() + self.settings.stack.ready_timeout_s
        while pending:
            for svc in list(pending):
                if svc.owned.pid() is None:
                    raise StackError(
                        f"{svc.name} exited during start-up; log {svc.log_file}:\n"
                        f"{proc.tail(svc.log_file)}"
                    )
                if not svc.probe().healthy:
                    if not svc.server_probe().healthy:
                        continue
                    svc.after_ready()  # e.g. the role and database clients log in with
                    probe = svc.probe()
                    if not probe.healthy:
                        raise StackError(f"{svc.name} is up but clients fail: {probe.detail}")
                took = time.monotonic() - pending.pop(svc)
                report(svc.name, f"ready in {took:.1f}s" if svc in started else "already running")
            if pending and time.monotonic() > deadline:
                names = ", ".join(svc.name for svc in pending)
                logs = "; ".join(str(svc.log_file) for svc in pending)
                raise StackError(
                    f"{names} not ready after {self.settings.stack.ready_timeout_s:.0f}s "
                    f"(ES_SCHED_STACK_READY_TIMEOUT_S); see {logs}"
                )
            if pending:
                time.sleep(0.5)

    # -- down ---------------------------------------------------------------------------------
    def down(self, report: Report = _quiet) -> None:
        if self.mode() == "docker":
            compose.down(self.settings)
            report("stack", "docker compose down")
        else:
            # All at once: the last node of a cluster, stopped alone, has no controller quorum
            # left to finish its controlled shutdown and would wait out the stop timeout.
            services = [svc for _role, svc in self._services()]
            with ThreadPoolExecutor(max_workers=max(1, len(services))) as pool:
                pids = list(pool.map(lambda svc: svc.stop(), services))
            for svc, pid in zip(services, pids, strict=True):
                report(svc.name, f"stopped pid {pid}" if pid else "not running (nothing of ours)")
        if set(self.roles) == set(ROLES):
            self.mode_file.unlink(missing_ok=True)

    # -- status -------------------------------------------------------------------------------
    def status(self) -> list[ServiceStatus]:
        docker = self.mode_file.exists() and self.mode() == "docker"
        result = []
        for role, svc in self._services():
            probe = svc.probe()
            pid = None if docker else svc.owned.pid()
            managed: Managed
            if docker:
                managed = "docker"
            elif pid is not None:
                managed = "local"
            else:
                managed = "external" if probe.healthy else "stopped"
            service = (
                compose.search_service(self.settings)
                if role == "search" and docker
                else ("opensearch" if role == "search" else svc.name)
            )
            result.append(
                ServiceStatus(
                    role=role,
                    service=service,
                    endpoint=svc.display_endpoint,
                    healthy=probe.healthy,
                    detail=probe.detail,
                    managed=managed,
                    pid=pid,
                    memory_mb=proc.tree_memory_mb(pid) if pid else None,
                    log=str(svc.log_file) if pid else None,
                )
            )
        return result
