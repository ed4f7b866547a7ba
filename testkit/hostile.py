"""Hostile inputs for the decider's topics, drawn by hypothesis from the JSON Schemas in
``schemas/commands/`` (ADR 75): the campaign of ``tests/integration/test_hostile_inputs.py``
and ``bench/fuzz.py``.

Each input starts as the schema's own example (``schemas/examples/commands/``), aimed at a
target that cannot be legitimately changed by it (a workflow id nobody started, or a
``Victim``'s leased task with a lease the input forges), then one mutation is drawn:

- ``missing``: a required field dropped; ``wrong_type``: a field given a value of another
  JSON type than its schema's; ``huge_string``: a string field far over its ``maxLength``;
  ``deep``: an object field nested hundreds to thousands of levels; ``version``: a
  ``schema_version`` no schema has; ``extra``: a field the schema does not allow;
  ``unknown_type``: a ``type`` on no allow-list;
- ``forged``: ids and lease tokens made up (another worker, epoch, token or attempt of a
  victim's task; an unknown task; a start whose workflow id its command id does not give);
  ``injection``: SQL, markup and path strings in the ids;
- ``oversize``: a record over the command cap, the 300 KB StartWorkflow among them, which
  would start a workflow were it under the cap; ``wrong_key``: a record under another
  workflow's key; ``undecodable``: bytes that are not a JSON object (invalid UTF-8, truncated,
  NaN, arrays, scalars).

Every one must be refused with a reason: a dead letter naming its origin, ``workflow.rejected``
or ``task.completion_rejected`` caused by its ``input_id``. None may start, end or move a
workflow. Draws are derandomized: the same ``n`` gives the same inputs.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from es_sched.domain.commands import INPUT_TYPES
from es_sched.domain.ids import workflow_id_for_command
from testkit import ROOT

JSON = dict[str, Any]
SCHEMAS, EXAMPLES = ROOT / "schemas" / "commands", ROOT / "schemas" / "examples" / "commands"
COMMANDS, RESULTS = "commands", "task-results"  # which input topic an input goes to
MUTATIONS = (
    "missing",
    "wrong_type",
    "huge_string",
    "deep",
    "version",
    "extra",
    "unknown_type",
    "forged",
    "injection",
    "oversize",
    "wrong_key",
    "undecodable",
)
INJECTIONS = (
    "'; DROP TABLE workflows; --",
    "<script>alert(1)</script>",
    "../../../../etc/passwd",
    "${jndi:ldap://127.0.0.1/a}",
    "\u0000nul",
    "\u202eevil",
)
UNDECODABLE = (
    b"\xff\xfe\xfd",
    b'{"type": "workflow.cancel", "input_id": ',
    b"[]",
    b'"workflow.cancel"',
    b"42",
    b"null",
    b'{"type": "workflow.cancel", "x": NaN}',
    b'{"type": "workflow.cancel", "x": 1e400}',
    b'{"a": "\\ud800"}',
)
OF_TYPE: dict[str, Any] = {
    "string": "text",
    "integer": 7,
    "number": 1.5,
    "boolean": True,
    "object": {"k": "v"},
    "array": [1, 2],
    "null": None,
}


@dataclass(frozen=True)
class Victim:
    """A running workflow whose task ``task_id`` is leased (attempt, worker, epoch, token) and
    will stay so: hostile reports aim at it and must leave it as it is."""

    workflow_id: str
    task_id: str
    attempt: int
    worker_id: str
    lease_epoch: int
    lease_token: str


@dataclass(frozen=True)
class Hostile:
    """One input to produce: ``value`` under ``key`` to the ``topic`` input topic."""

    n: int
    mutation: str
    itype: str  # the schema it was drawn from
    topic: str  # COMMANDS or RESULTS
    key: str
    value: bytes
    input_id: str | None  # None when the record has no readable id


def schemas() -> dict[str, tuple[JSON, JSON]]:
    """``type.vN`` -> (schema, example) of every input the decider reads."""
    out = {}
    for path in sorted(SCHEMAS.glob("*.json")):
        itype = path.stem.rsplit(".v", 1)[0]
        if itype in INPUT_TYPES:
            out[path.stem] = (
                json.loads(path.read_text()),
                json.loads((EXAMPLES / path.name).read_text()),
            )
    return out


def topic_of(itype: str) -> str:
    return RESULTS if itype.startswith(("worker.", "dispatcher.")) else COMMANDS


def _base(itype: str, example: JSON, n: int, victim: Victim | None) -> JSON:
    """The example aimed at its target, valid but for the target: a start of a workflow
    nobody defined, a control command of an unknown workflow, a report forging ``victim``'s
    lease (a wrong token) or of an unknown workflow."""
    doc = dict(example)
    doc["input_id"] = f"fuzz-{n}"
    if itype == "workflow.start":
        for k in ("definition", "taskdefs", "subworkflow_definitions"):
            doc.pop(k, None)
        doc["name"] = f"fuzz_nobody_{n}"
        doc["workflow_id"] = workflow_id_for_command(doc["input_id"])
    elif victim is not None and "task_id" in doc and itype.startswith("worker."):
        doc.update(
            workflow_id=victim.workflow_id,
            task_id=victim.task_id,
            attempt=victim.attempt,
            worker_id=victim.worker_id,
            lease_epoch=victim.lease_epoch,
            lease_token=f"forged-{n}",
        )
    else:
        doc["workflow_id"] = f"fuzz-nobody-{uuid.UUID(int=n)}"
    return doc


def _wrong(prop: JSON, draw: Callable[[Any], Any]) -> Any:
    allowed = prop.get("type", [])
    allowed = {allowed} if isinstance(allowed, str) else set(allowed)
    if "const" in prop:
        return draw(st.sampled_from([v for v in OF_TYPE.values() if v != prop["const"]]))
    other = sorted(set(OF_TYPE) - allowed - ({"number"} if "integer" in allowed else set()))
    return OF_TYPE[draw(st.sampled_from(other or ["array"]))]


DEEP = "\u0000deep"  # stands for the nested document until the bytes are written


def _nested(depth: int) -> str:
    """An object nested ``depth`` levels, as JSON text (no encoder recurses that deep)."""
    return '{"d":' * depth + '"bottom"' + "}" * depth


def draw_one(
    draw: Callable[[Any], Any],
    n: int,
    table: dict[str, tuple[JSON, JSON]],
    victims: list[Victim],
    cap: int,
    legit_name: str,
) -> Hostile:
    name = draw(st.sampled_from(sorted(table)))
    schema, example = table[name]
    itype = name.rsplit(".v", 1)[0]
    mutation = draw(st.sampled_from(MUTATIONS))
    victim = draw(st.sampled_from(victims)) if victims and draw(st.booleans()) else None
    doc = _base(itype, example, n, victim)
    key = doc["workflow_id"]
    props: JSON = schema.get("properties", {})
    value: bytes | None = None
    depth = 0
    if mutation == "missing":
        doc.pop(draw(st.sampled_from(sorted(schema["required"]))), None)
    elif mutation == "wrong_type":
        field = draw(st.sampled_from(sorted(set(props) - {"input_id", "workflow_id"})))
        doc[field] = _wrong(props[field], draw)
    elif mutation == "huge_string":
        fields = sorted(f for f, p in props.items() if p.get("type") == "string")
        field = draw(st.sampled_from(fields))
        limit = props[field].get("maxLength", 1000)
        doc[field] = "x" * draw(st.integers(limit + 1, min(10 * limit + 1, cap // 2)))
        key = str(doc.get("workflow_id", key))
    elif mutation == "deep":
        objects = sorted(f for f, p in props.items() if p.get("type") == "object") or ["extra"]
        doc[draw(st.sampled_from(objects))] = DEEP
        depth = draw(st.integers(300, 3000))
    elif mutation == "version":
        doc["schema_version"] = draw(st.sampled_from([0, -1, 99, 2**40, "1", 1.5]))
    elif mutation == "extra":
        doc[draw(st.sampled_from(["__proto__", "admin", "lease_token_2", "$where"]))] = "x"
    elif mutation == "unknown_type":
        doc["type"] = draw(
            st.sampled_from(["workflow.nuke", "", "WORKFLOW.START", "task.completed"])
        )
    elif mutation == "forged":
        doc, key = _forged(draw, itype, doc, victim, n)
    elif mutation == "injection":
        text = draw(st.sampled_from(INJECTIONS))
        doc["input_id"] = f"fuzz-{n}-{text}"
        if victim is None and itype != "workflow.start":
            doc["workflow_id"] = key = f"fuzz-{n}-{text}"
    elif mutation == "oversize":
        pad = {"blob": "x" * (cap + draw(st.integers(1, cap)))}
        if itype == "workflow.start" and draw(st.booleans()):
            # The 300 KB start of a defined workflow: it would start were it under the cap.
            doc.update(name=legit_name, version=None, input=pad)
        else:
            doc["output" if "output" in props else "input" if "input" in props else "pad"] = pad
    elif mutation == "wrong_key":
        key = f"fuzz-other-{n}"
    elif mutation == "undecodable":
        value = draw(st.sampled_from(UNDECODABLE))
    if value is None:
        text = json.dumps(doc, ensure_ascii=False)
        if mutation == "deep":
            text = text.replace(json.dumps(DEEP), _nested(depth))
        value = text.encode("utf-8", "surrogatepass")
    input_id = doc.get("input_id") if mutation != "undecodable" else None
    readable = input_id if isinstance(input_id, str) else None
    return Hostile(n, mutation, name, topic_of(itype), str(key), value, readable)


def _forged(
    draw: Callable[[Any], Any], itype: str, doc: JSON, victim: Victim | None, n: int
) -> tuple[JSON, str]:
    if itype == "workflow.start":  # a workflow id of the sender's choosing: one it may not
        doc["workflow_id"] = f"chosen-{n}"
        return doc, doc["workflow_id"]
    if victim is not None and itype.startswith("worker."):
        which = draw(st.sampled_from(["worker_id", "lease_epoch", "attempt", "task_id", "token"]))
        if which == "worker_id":
            doc.update(worker_id=f"intruder-{n}", lease_token=victim.lease_token)
        elif which == "lease_epoch":
            doc.update(lease_epoch=victim.lease_epoch + draw(st.integers(1, 5)))
            doc["lease_token"] = victim.lease_token
        elif which == "attempt":
            doc.update(attempt=victim.attempt + draw(st.integers(1, 5)))
            doc["lease_token"] = victim.lease_token
        elif which == "task_id":
            doc["task_id"] = f"forged-task-{n}"
        return doc, doc["workflow_id"]
    doc["workflow_id"] = str(uuid.UUID(int=2**64 + n))  # a well-formed id nobody started
    return doc, doc["workflow_id"]


def campaign(n: int, victims: list[Victim], cap: int, legit_name: str) -> list[Hostile]:
    """``n`` hostile inputs, the same ones for the same arguments, and the 300 KB start."""
    table = schemas()
    out = drawn(n, lambda draw, i: draw_one(draw, i, table, victims, cap, legit_name))
    return [*out, oversize_start(len(out), legit_name)]


T = TypeVar("T")


def drawn(n: int, one: Callable[[Callable[[Any], Any], int], T]) -> list[T]:
    """``n`` values of ``one(draw, index)``, drawn by hypothesis, derandomized (the same
    ``n`` gives the same values; hypothesis's own search picks the variety)."""
    out: list[T] = []

    @settings(
        max_examples=n,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(st.data())
    def collect(data: st.DataObject) -> None:
        out.append(one(data.draw, len(out)))

    collect()
    return out


def oversize_start(n: int, legit_name: str, size: int = 300_000) -> Hostile:
    """The case of issue 52: a well-formed StartWorkflow of a defined workflow, under its own
    key, that would start were it not over the command cap."""
    example = schemas()["workflow.start.v1"][1]
    doc = {k: v for k, v in example.items() if k not in ("definition", "taskdefs")}
    doc.update(input_id=f"fuzz-{n}", name=legit_name, version=None, input={"blob": "x" * size})
    doc.update(subworkflow_definitions=[], workflow_id=workflow_id_for_command(doc["input_id"]))
    value = json.dumps(doc).encode()
    return Hostile(
        n, "oversize", "workflow.start.v1", COMMANDS, doc["workflow_id"], value, doc["input_id"]
    )


# -- through the HTTP API ------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    """One hostile HTTP request; every one must be answered 4xx with a reason."""

    n: int
    mutation: str
    method: str
    path: str
    body: bytes | None


HTTP_MUTATIONS = (
    "missing",
    "wrong_type",
    "huge_string",
    "deep",
    "oversize",
    "unsupported",
    "forged",
    "undecodable",
)
UNKNOWN_VERSION = 9999  # no definition of the legitimate name has it


def _bodies(victims: list[Victim], legit_name: str) -> dict[str, tuple[str, JSON, JSON]]:
    """path -> (model, its JSON Schema, a body the route would refuse only for its target):
    a start of a version nobody pushed; a task update forging a victim's worker."""
    from es_sched.api.conductor.models import StartWorkflowRequest  # noqa: PLC0415
    from es_sched.api.conductor.tasks import TaskResult  # noqa: PLC0415
    from es_sched.api.native.models import SubmitRequest  # noqa: PLC0415

    start = {"name": legit_name, "version": UNKNOWN_VERSION, "input": {"n": 1}}
    v = victims[0]
    result = {
        "workflowInstanceId": v.workflow_id,
        "taskId": v.task_id,
        "status": "COMPLETED",
        "outputData": {"forged": True},
        "workerId": "intruder",
    }
    return {
        "/api/workflow": ("StartWorkflowRequest", StartWorkflowRequest.model_json_schema(), start),
        "/api/v1/workflows": ("SubmitRequest", SubmitRequest.model_json_schema(), start),
        "/api/tasks": ("TaskResult", TaskResult.model_json_schema(), result),
    }


CONTROL = (
    ("PUT", "/api/workflow/{}/pause"),
    ("PUT", "/api/workflow/{}/resume"),
    ("DELETE", "/api/workflow/{}"),
    ("POST", "/api/workflow/{}/retry"),
    ("POST", "/api/workflow/{}/restart"),
    ("POST", "/api/workflow/{}/rerun"),
)


def _http_one(
    draw: Callable[[Any], Any],
    n: int,
    bodies: dict[str, tuple[str, JSON, JSON]],
    victims: list[Victim],
    cap: int,
) -> Request:
    mutation = draw(st.sampled_from(HTTP_MUTATIONS))
    if mutation == "forged":  # an operation on a workflow nobody started, under a made-up id
        method, path = draw(st.sampled_from(CONTROL))
        forged = draw(st.sampled_from([str(uuid.UUID(int=2**65 + n)), *INJECTIONS[:3]]))
        return Request(n, mutation, method, path.format(forged.replace("/", "%2F")), b"{}")
    path = draw(st.sampled_from(sorted(bodies)))
    _, schema, base = bodies[path]
    doc, props = dict(base), schema.get("properties", {})
    if path == "/api/tasks":
        doc["taskId"] = draw(st.sampled_from([v.task_id for v in victims] + [f"forged-{n}"]))
    fixed = {"version"}  # the unknown version is what refuses a well-formed start
    if mutation == "missing":
        doc.pop(draw(st.sampled_from(sorted(set(schema.get("required", [])) - fixed))), None)
    elif mutation == "wrong_type":
        field = draw(st.sampled_from(sorted(set(props) - fixed)))
        doc[field] = _wrong(_flat(props[field]), draw)
    elif mutation == "huge_string":
        doc[draw(st.sampled_from(["name", "correlationId", "workflowInstanceId"]))] = "x" * (
            draw(st.integers(cap // 4, cap * 2))
        )
    elif mutation == "deep":
        doc["input" if "input" in doc else "outputData"] = DEEP
    elif mutation == "oversize":  # a start of the latest version, over the command cap
        doc.update(version=None, input={"blob": "x" * (cap + draw(st.integers(1, cap)))})
        if path == "/api/tasks":
            doc["outputData"] = doc.pop("input")
    elif mutation == "unsupported":
        field, value = draw(
            st.sampled_from(
                [
                    ("taskToDomain", {"*": "gpu"}),
                    ("workflowDef", {"name": "x", "tasks": []}),
                    ("idempotencyStrategy", "FAIL"),
                    ("priority", 1000),
                    ("status", "SKIPPED"),
                ]
            )
        )
        doc[field] = value
        if field == "idempotencyStrategy":
            doc["idempotencyKey"] = f"k-{n}"
    if mutation == "undecodable":
        return Request(n, mutation, "POST", path, draw(st.sampled_from(UNDECODABLE)))
    text = json.dumps(doc, ensure_ascii=False)
    if mutation == "deep":
        text = text.replace(json.dumps(DEEP), _nested(draw(st.integers(300, 3000))))
    return Request(n, mutation, "POST", path, text.encode("utf-8", "surrogatepass"))


def _flat(prop: JSON) -> JSON:
    """A pydantic property's allowed types (``anyOf`` of an optional field) as one ``type``."""
    if "anyOf" in prop:
        return {"type": [t.get("type", "object") for t in prop["anyOf"]]}
    return prop


def http_campaign(n: int, victims: list[Victim], cap: int, legit_name: str) -> list[Request]:
    """``n`` hostile requests, the same ones for the same arguments."""
    bodies = _bodies(victims, legit_name)
    return drawn(n, lambda draw, i: _http_one(draw, i, bodies, victims, cap))
