"""What every locally managed service has in common.

A ``LocalService`` knows how to install its artifacts, prepare its configuration and data, start
one detached process, probe readiness and stop exactly that process. All its files live under
``<state_dir>/<name>/``, its log under ``<state_dir>/logs/`` and its PID file under
``<state_dir>/pids/``.
"""

from __future__ import annotations

import hashlib
import shutil
from abc import ABC, abstractmethod
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from es_sched.errors import StackError
from es_sched.settings import Settings
from es_sched.stack import process
from es_sched.stack.probes import Probe

LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
MAVEN_DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def is_local(self) -> bool:
        return self.host in LOOPBACK


class LocalService(ABC):
    name: str

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.state_dir = settings.stack.resolved_state_dir
        self.cache_dir = settings.stack.resolved_cache_dir
        self.home = self.state_dir / self.name
        self.log_file = self.state_dir / "logs" / f"{self.name}.log"
        self.owned = process.OwnedProcess(self.state_dir / "pids" / f"{self.name}.pid", self.marker)

    @property
    @abstractmethod
    def endpoint(self) -> Endpoint: ...

    @property
    @abstractmethod
    def display_endpoint(self) -> str:
        """The endpoint as clients configure it (a URL or host:port)."""

    @property
    @abstractmethod
    def marker(self) -> str:
        """A string unique to this state folder found in the service's command line."""

    @abstractmethod
    def install(self) -> None:
        """Fetch whatever the service needs to run; a no-op when it is already there."""

    @abstractmethod
    def start(self) -> int:
        """Prepare data and configuration, start the process, return its PID."""

    @abstractmethod
    def probe(self) -> Probe: ...

    def server_probe(self) -> Probe:
        """Readiness of the server itself, before ``after_ready`` has set it up for clients."""
        return self.probe()

    def after_ready(self) -> None:  # noqa: B027 - optional hook, most services need nothing
        """Runs once the server is ready (e.g. create roles and databases)."""

    def stop(self) -> int | None:
        return self.owned.stop()


def resource_text(name: str) -> str:
    return resources.files("es_sched.stack").joinpath("resources", name).read_text()


def maven_copy_dependencies(pom_resource: str, target: Path) -> Path:
    """Resolve a POM's runtime dependencies from Maven Central into ``target/lib``.

    The POM's hash is stored beside the jars, so a second call with the same POM does nothing;
    Maven's own ``~/.m2`` cache makes a re-download after a POM change cheap.
    """
    pom = resource_text(pom_resource)
    digest = hashlib.sha256(pom.encode()).hexdigest()
    lib, stamp = target / "lib", target / "pom.sha256"
    if lib.is_dir() and stamp.is_file() and stamp.read_text().strip() == digest:
        return lib
    if shutil.which("mvn") is None or shutil.which("java") is None:
        raise StackError(
            "java and mvn are needed to assemble the local Kafka and OpenSearch; "
            "install them (Debian: apt-get install -y openjdk-17-jre-headless maven)"
        )
    target.mkdir(parents=True, exist_ok=True)
    pom_file, staging = target / "pom.xml", target / "lib.partial"
    pom_file.write_text(pom)
    shutil.rmtree(staging, ignore_errors=True)
    process.run(
        [
            "mvn",
            "-B",
            "-q",
            "-f",
            str(pom_file),
            f"{MAVEN_DEPENDENCY_PLUGIN}:copy-dependencies",
            f"-DoutputDirectory={staging}",
            "-DincludeScope=runtime",
        ],
        what=f"maven copy-dependencies for {pom_resource}",
    )
    shutil.rmtree(lib, ignore_errors=True)
    staging.rename(lib)
    stamp.write_text(digest + "\n")
    return lib


def java_command(heap: str, classpath: Path, main: str, *args: str) -> list[str]:
    java = shutil.which("java")
    if java is None:
        raise StackError("java (17 or newer) is not on PATH")
    return [
        java,
        f"-Xms{heap}",
        f"-Xmx{heap}",
        "-XX:+UseG1GC",
        "-XX:MaxGCPauseMillis=20",
        "-Djava.awt.headless=true",
        "-cp",
        f"{classpath}/*",
        main,
        *args,
    ]
