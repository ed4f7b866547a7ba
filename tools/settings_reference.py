"""Print the settings reference, docs/settings.md, from the settings classes of es_sched.settings.

    .venv/bin/python tools/settings_reference.py > docs/settings.md    (or: make docs)

One section per settings class, in the order of ``es_sched.settings.Settings``; one row per
field: its environment variable (the class's ``ES_SCHED_`` prefix and the field's name), type
and bounds, default, and description. The description is the field's ``description`` when it
has one, else its comment in the source (the comment on its line, else the comment lines right
above it). An entry of ``NOTES`` below goes before that comment: it says what the field is
where the source says nothing, or only why its default is what it is. A note for a variable
no class has any more is an error, so the notes cannot outlive their settings.

tests/unit/tools/test_settings_reference.py checks that the committed page equals this output, so a
change to a setting without the page regenerated fails the unit tests.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import io
import json
import sys
import textwrap
import tokenize
import types
import typing
from pathlib import Path
from typing import Any, Literal, Union

import annotated_types
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings

from es_sched import settings as source

# What a field is, for the fields whose source has no ``description`` and whose comment (if any)
# does not say it. A ``description`` in the source replaces the note.
NOTES: dict[str, str] = {
    "ES_SCHED_KAFKA_BOOTSTRAP_SERVERS": "The brokers, as `host:port[,host:port...]`.",
    "ES_SCHED_KAFKA_TOPIC_PREFIX": (
        "The first part of every topic name (`<prefix>.commands`, `<prefix>.events`, ...) and "
        "of the roles' consumer groups and transactional ids: one prefix is one independent "
        "es-sched system on the cluster."
    ),
    "ES_SCHED_KAFKA_MIN_INSYNC_REPLICAS": (
        "`min.insync.replicas` of every topic es-sched creates, at most the replication "
        "factor; unset: the cluster's default. When set, also a requirement, as "
        "`ES_SCHED_KAFKA_REPLICATION_FACTOR` is."
    ),
    "ES_SCHED_PG_URL": (
        "The read-model database, as a SQLAlchemy URL with the psycopg 3 driver "
        "(`postgresql+psycopg://user:password@host:port/database`)."
    ),
    "ES_SCHED_PG_SCHEMA_NAME": (
        "The PostgreSQL schema of the read models; the API keeps its keys in `<schema>_auth` "
        "and HTTP workers' leases in `<schema>_gateway`."
    ),
    "ES_SCHED_SEARCH_URL": "Elasticsearch or OpenSearch, as `http(s)://host:port`.",
    "ES_SCHED_SEARCH_FLAVOR": (
        "Which client speaks to the search URL: `opensearch` (OpenSearch 2) or "
        "`elasticsearch` (Elasticsearch 8)."
    ),
    "ES_SCHED_SEARCH_INDEX_PREFIX": (
        "The first part of the search indices' names: `<index prefix>-<topic prefix>-workflows` "
        "and `-tasks` (aliases)."
    ),
    "ES_SCHED_STACK_MODE": (
        "How `es-sched stack` runs the services: `local` (processes under the state folder), "
        "`docker` (`docker compose`), or `auto`: `docker` when a Docker engine answers, else "
        "`local`. A running stack keeps the mode it was started in."
    ),
    "ES_SCHED_STACK_STATE_DIR": (
        "Where the local services keep their data, logs (`logs/*.log`) and PID files."
    ),
    "ES_SCHED_STACK_CACHE_DIR": (
        "Where downloaded jars are kept (Kafka, OpenSearch); unset: `<state dir>/cache`."
    ),
    "ES_SCHED_STACK_KAFKA_CONTROLLER_PORT": (
        "The local Kafka's KRaft controller port (the broker's port comes from "
        "`ES_SCHED_KAFKA_BOOTSTRAP_SERVERS`)."
    ),
    "ES_SCHED_STACK_KAFKA_HEAP": "JVM heap of each local Kafka node.",
    "ES_SCHED_STACK_SEARCH_HEAP": "JVM heap of the local OpenSearch.",
    "ES_SCHED_STACK_READY_TIMEOUT_S": "How long `stack up` waits for the services to be ready.",
    "ES_SCHED_STACK_COMPOSE_FILE": "The compose file `stack up` uses in `docker` mode.",
    "ES_SCHED_RUN_BATCH_MAX_RECORDS": (
        "Inputs in one decider transaction at first; it grows up to "
        "`ES_SCHED_RUN_BATCH_CEILING_RECORDS` while polls come back full."
    ),
    "ES_SCHED_RUN_METRICS_PORT": (
        "The port of the Prometheus `/metrics` endpoint of `es-sched run` (its "
        "`--metrics-port` wins)."
    ),
    "ES_SCHED_RUN_BATCH_BUDGET_MS": (
        "A decider batch grows only while one batch (decide, produce, commit) takes at most "
        "half of this; see `ES_SCHED_RUN_BATCH_CEILING_RECORDS`."
    ),
    "ES_SCHED_RUN_TRANSACTION_TIMEOUT_MS": (
        "`transaction.timeout.ms` of the decider's, timer service's and retry relay's "
        "transactional producers: the broker aborts a transaction left open longer."
    ),
    "ES_SCHED_RUN_COMMAND_MAX_BYTES": (
        "The largest command: the command client (CLI, API) refuses a larger one before it is "
        "produced, and the decider sends one it reads to the dead letters."
    ),
    "ES_SCHED_RUN_RETRY_TIERS_S": (
        "The retry topics' delays in seconds, increasing (`<prefix>.retry-5s`, ...): a retry "
        "waits on the smallest tier at least as long as its delay."
    ),
    "ES_SCHED_RUN_RETRY_RELEASE_PER_S": (
        "The most retries per second the retry relay releases (a token bucket)."
    ),
    "ES_SCHED_DISPATCH_HEARTBEAT_S": (
        "How often workers report their status; a lease lasts `ES_SCHED_DISPATCH_LEASE_K` "
        "heartbeats."
    ),
    "ES_SCHED_DISPATCH_SUSPECT_AFTER_S": "A worker silent this long gets no new task.",
    "ES_SCHED_DISPATCH_DEAD_AFTER_S": (
        "A worker silent this long is dead: its leases are taken back and its tasks queued "
        "again at the head."
    ),
    "ES_SCHED_DISPATCH_AGING_S": (
        "A waiting task rises one priority level per this many seconds in its queue (0: no aging)."
    ),
    "ES_SCHED_DISPATCH_PREEMPT_AFTER_S": (
        "A task of priority 5 to 8 running this long may be preempted to make room for a task "
        "of priority 0 or 1 that fits nowhere else; it is queued again at the head."
    ),
    "ES_SCHED_DISPATCH_POLICY": (
        "Placement in pools without a `config set-policy`: `binpack` (tightest fit) or "
        "`spread` (loosest)."
    ),
    "ES_SCHED_DISPATCH_ASSIGNMENT_PARTITIONS": (
        "Partitions of each pool's assignments topic; a worker reads the one its id maps to."
    ),
    "ES_SCHED_DISPATCH_TICK_MS": (
        "The longest a dispatcher tick waits for input before it expires leases and dispatches."
    ),
    "ES_SCHED_MEDIA_OUTPUT_DIR": "Where the media handlers write their outputs.",
    "ES_SCHED_MEDIA_CALLBACK_ATTEMPTS": "Attempts of the signed callback POST.",
    "ES_SCHED_MEDIA_CALLBACK_BACKOFF_S": "The wait after a failed callback POST.",
    "ES_SCHED_MEDIA_CALLBACK_TIMEOUT_S": "Timeout of one callback POST.",
    "ES_SCHED_MEDIA_HLS_SEGMENT_S": "HLS segment length (a task's `segment_s` input wins).",
    "ES_SCHED_API_HOST": "The address `es-sched api` listens on.",
    "ES_SCHED_API_PORT": "The port `es-sched api` listens on.",
    "ES_SCHED_API_TOKEN_TTL_S": (
        "Lifetime of the tokens `POST /api/token` issues, and of the console's log-in cookie."
    ),
    "ES_SCHED_API_LONG_POLL_MAX_MS": (
        "The longest a Conductor task poll waits for a task, whatever its `timeout` asks."
    ),
    "ES_SCHED_API_READ_YOUR_WRITES_TIMEOUT_S": (
        "The longest a write through the API waits for its effect to be visible (the "
        "decider's verdict in the read model, a definition in the registry) before it answers "
        "503 with its token, and the longest a read with `?after=TOKEN` waits for the read "
        "model to hold that command's events (ADR 56)."
    ),
    "ES_SCHED_API_CONSOLE_BULK_MAX": (
        "The most workflows one console bulk action on everything matching the filter may touch."
    ),
    "ES_SCHED_API_CONSOLE_COUNT_MAX": (
        'The console\'s per-status counts stop this many rows past the page and show "N+".'
    ),
    "ES_SCHED_API_PG_MAX_OVERFLOW": (
        "Connections beyond `ES_SCHED_API_PG_POOL_SIZE` the pool may open under load (each "
        "closed on return)."
    ),
}

TOOL_COMMENTS = ("noqa", "type:", "pragma", "fmt:")

HEADER = """\
# Settings reference

<!-- Generated by tools/settings_reference.py from es_sched/settings.py; do not edit by hand.
     Regenerate: .venv/bin/python tools/settings_reference.py > docs/settings.md (or make docs). -->

Every setting is an environment variable with the `ES_SCHED_` prefix. A process reads and
validates them once at start-up (`es_sched.settings.load_settings`); a bad value stops it with
a `ConfigError` that names the variable. The defaults work against the local stack that
`es-sched stack up` starts; [operations.md](operations.md) says which ones point es-sched at
existing services."""


@dataclasses.dataclass(frozen=True)
class Row:
    variable: str
    kind: str
    default: str
    description: str


def settings_classes() -> list[type[BaseSettings]]:
    """The classes of ``Settings``' fields, in its order."""
    hints = typing.get_type_hints(source.Settings)
    found: list[type[BaseSettings]] = []
    for f in dataclasses.fields(source.Settings):
        cls = hints[f.name]
        if not (isinstance(cls, type) and issubclass(cls, BaseSettings)):
            raise TypeError(f"Settings.{f.name} is not a settings class: {cls!r}")
        found.append(cls)
    return found


def prefix_of(cls: type[BaseSettings]) -> str:
    return str(cls.model_config.get("env_prefix", ""))


def source_comments(cls: type) -> dict[str, str]:
    """Field name -> its comment in the class's source: on its line, else right above it."""
    text = textwrap.dedent(inspect.getsource(cls))
    lines = text.splitlines()
    comments = {
        tok.start[0]: tok.string.lstrip("#").strip()
        for tok in tokenize.generate_tokens(io.StringIO(text).readline)
        if tok.type == tokenize.COMMENT and not tok.string.lstrip("# ").startswith(TOOL_COMMENTS)
    }
    klass = ast.parse(text).body[0]
    assert isinstance(klass, ast.ClassDef)
    found: dict[str, str] = {}
    for node in klass.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        end = node.end_lineno or node.lineno
        inline = [comments[n] for n in range(node.lineno, end + 1) if n in comments]
        above: list[str] = []
        n = node.lineno - 1
        while n >= 1 and lines[n - 1].lstrip().startswith("#"):
            above.insert(0, comments[n])
            n -= 1
        words = " ".join(inline or above).strip()
        if words:
            found[node.target.id] = words
    return found


def type_text(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is Literal:
        return " or ".join(f"`{a}`" for a in args)
    if origin in (Union, types.UnionType):
        present = [type_text(a) for a in args if a is not type(None)]
        return " or ".join(present) + " (optional)"
    if origin is dict:
        return "JSON object"
    if annotation is Path:
        return "path"
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation)


def bounds_text(info: FieldInfo) -> str:
    low = high = ""
    parts: list[str] = []
    for m in info.metadata:
        if isinstance(m, annotated_types.Ge):
            low = f">= {m.ge}"
        elif isinstance(m, annotated_types.Gt):
            low = f"> {m.gt}"
        elif isinstance(m, annotated_types.Le):
            high = f"<= {m.le}"
        elif isinstance(m, annotated_types.Lt):
            high = f"< {m.lt}"
        elif getattr(m, "pattern", None):
            parts.append(f"matching `{m.pattern}`")
    if low.startswith(">=") and high.startswith("<="):
        parts.insert(0, f"{low[3:]} to {high[3:]}")
    else:
        parts[:0] = [b for b in (low, high) if b]
    return ", ".join(parts)


def default_text(info: FieldInfo) -> str:
    value = info.get_default(call_default_factory=True)
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, dict):
        return f"`{json.dumps(value)}`"
    if value == "":
        return "empty"
    return f"`{value}`"


def sentence(text: str) -> str:
    """Capitalised, ending with a full stop."""
    text = text[:1].upper() + text[1:]
    return text if text.endswith(".") else text + "."


def cell(text: str) -> str:
    """Markdown table cell: reST literals as Markdown ones, pipes escaped."""
    return text.replace("``", "`").replace("|", "\\|")


def rows(cls: type[BaseSettings]) -> list[Row]:
    prefix = prefix_of(cls)
    comments = source_comments(cls)
    out: list[Row] = []
    for name, info in cls.model_fields.items():
        variable = f"{prefix}{name.upper()}"
        told = [NOTES.get(variable, ""), comments.get(name, "")]
        description = info.description or " ".join(sentence(t) for t in told if t)
        kind = type_text(info.annotation)
        bounds = bounds_text(info)
        out.append(
            Row(
                variable,
                f"{kind}, {bounds}" if bounds else kind,
                default_text(info),
                description,
            )
        )
    return out


def heading(cls: type[BaseSettings]) -> str:
    name = cls.__name__.removesuffix("Settings")
    return name.upper() if len(name) <= 3 else name


def render() -> str:
    classes = settings_classes()
    known = {f"{prefix_of(c)}{n.upper()}" for c in classes for n in c.model_fields}
    stale = sorted(set(NOTES) - known)
    if stale:
        raise SystemExit(f"NOTES name variables no settings class has: {', '.join(stale)}")
    parts = [HEADER]
    parts.append(
        "Sections: " + ", ".join(f"[{heading(c)}](#{heading(c).lower()})" for c in classes) + "."
    )
    for cls in classes:
        doc = " ".join((inspect.getdoc(cls) or "").split())
        parts.append(f"## {heading(cls)}\n\n{cell(doc)}")
        table = ["| variable | type | default | description |", "|---|---|---|---|"]
        table += [
            f"| `{r.variable}` | {cell(r.kind)} | {cell(r.default)} | {cell(r.description)} |"
            for r in rows(cls)
        ]
        parts.append("\n".join(table))
    return "\n\n".join(parts) + "\n"


def main() -> None:
    sys.stdout.write(render())


if __name__ == "__main__":
    main()
