"""The console's definition editor and TaskDefs page (issue 50 item 6).

An operator pastes or edits a workflow definition (JSON), and before anything is written:

- **Check** lists every problem the push would refuse (the definition schema and
  ``domain.validation``, the same ``definition_problems`` the command client runs), each beside
  the task it names;
- **Simulate** runs the new version on a chosen input through ``es_sched.simulate`` (the
  ``es-sched defs simulate`` engine: the real decider, a scripted worker that completes every
  task unless the script says otherwise, a virtual clock) with the registered definitions and
  TaskDefs it may call, and shows the run task by task;
- **Push** registers it on the definitions topic (``CommandClient.push_documents``, all or
  nothing), which needs the role the Conductor metadata API needs to register one (admin, ADR
  25), so the console never grants what the API refuses.

Nothing here keeps state: each request carries the document; a refusal is a 400 with every
problem, which the page shows where the answer would have gone.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import HTMLResponse

from es_sched.api.auth import Principal, require
from es_sched.api.errors import ApiError
from es_sched.api.roles import grants
from es_sched.api.services import Services, services
from es_sched.api.ui import panels
from es_sched.api.ui.diagram import default_input, diagram
from es_sched.api.ui.render import templates
from es_sched.commands.files import Documents
from es_sched.commands.prepare import definition_problems
from es_sched.domain.definitions import DefinitionError
from es_sched.errors import DomainError, SchemaError
from es_sched.serialization.schemas import default_catalog
from es_sched.simulate import Simulation

router = APIRouter(prefix="/ui", include_in_schema=False)
VIEWER = require("viewer")
OPERATOR = require("operator")
ADMIN = require("admin")  # as /api/metadata's registration
SVC = Depends(services)
DOCUMENT_MAX = 1_000_000  # characters of a pasted definition
NEW = {
    "name": "my.workflow",
    "version": 1,
    "schemaVersion": 2,
    "ownerEmail": "me@example.com",
    "inputParameters": ["x"],
    "tasks": [
        {
            "name": "my.task",
            "taskReferenceName": "first",
            "type": "SIMPLE",
            "inputParameters": {"x": "${workflow.input.x}"},
        }
    ],
}


def _json(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ApiError(400, f"the {what} is not JSON: {exc}") from None


def _document(text: str) -> dict[str, Any]:
    doc = _json(text, "definition")
    if not isinstance(doc, dict):
        raise ApiError(400, "the definition must be one JSON object (a workflow definition)")
    return doc


def _problems(svc: Services, doc: dict[str, Any]) -> list[str]:
    """What a push would refuse, as the command client checks it (its TaskDefs: the registered
    ones, which a push of a definition alone is checked against too)."""
    _, taskdefs = svc.commands.get().definitions()
    docs = Documents(workflows=[doc], taskdefs=list(taskdefs.values()))
    label = f"{doc.get('name')} v{doc.get('version', 1)} (None): "
    return [p.removeprefix(label) for p in definition_problems(docs, default_catalog())]


@router.get("/taskdefs", response_class=HTMLResponse)
def taskdefs_page(request: Request, svc: Services = SVC, who: Principal = VIEWER) -> HTMLResponse:
    """Every registered TaskDef: retries, timeouts, rate and concurrency limits, and the rest."""
    _, taskdefs = svc.commands.get().definitions()
    rows = [taskdefs[name] for name in sorted(taskdefs)]
    return templates.TemplateResponse(
        request,
        "ops_taskdefs.html",
        {"who": who, "rows": rows, "dumps": lambda v: json.dumps(v, indent=2, sort_keys=True)},
    )


@router.get("/definitions/edit", response_class=HTMLResponse)
def editor_page(
    request: Request,
    name: str | None = None,
    version: int | None = None,
    svc: Services = SVC,
    who: Principal = OPERATOR,
) -> HTMLResponse:
    """The editor, holding ``name``'s chosen version (latest by default) as the next version,
    or a new definition's skeleton."""
    found, _ = svc.commands.get().definitions()
    doc: dict[str, Any] = dict(NEW)
    if name is not None:
        versions = sorted(v for n, v in found if n == name)
        if not versions:
            raise ApiError(404, f"no definition {name!r}")
        base = found[(name, version if version in versions else versions[-1])]
        doc = {**base, "version": versions[-1] + 1}
    return templates.TemplateResponse(
        request,
        "ops_editor.html",
        {
            "who": who,
            "text": json.dumps(doc, indent=2),
            "input": json.dumps(default_input(doc), indent=2),
            "may_push": grants(who.role, "admin"),
        },
    )


@router.post("/definitions/check", response_class=HTMLResponse)
def check(
    request: Request,
    definition: Annotated[str, Form(max_length=DOCUMENT_MAX)],
    svc: Services = SVC,
    who: Principal = OPERATOR,
) -> HTMLResponse:
    doc = _document(definition)
    problems = _problems(svc, doc)
    return _checked(request, doc, problems)


def _checked(request: Request, doc: dict[str, Any], problems: list[str]) -> HTMLResponse:
    by_task = panels.problems_by_task(problems)
    tasks = panels.task_refs(doc)
    graph = diagram(doc) if not problems else None
    return templates.TemplateResponse(
        request,
        "_editor_check.html",
        {"doc": doc, "problems": problems, "by_task": by_task, "tasks": tasks, "svg": graph},
    )


@router.post("/definitions/simulate", response_class=HTMLResponse)
def simulate(
    request: Request,
    definition: Annotated[str, Form(max_length=DOCUMENT_MAX)],
    input: Annotated[str, Form(max_length=DOCUMENT_MAX)] = "{}",
    script: Annotated[str, Form(max_length=DOCUMENT_MAX)] = "[]",
    svc: Services = SVC,
    who: Principal = OPERATOR,
) -> HTMLResponse:
    """The new version run on ``input`` by the simulator, or its problems (nothing runs then)."""
    doc = _document(definition)
    workflow_input = _json(input, "input")
    actions = _json(script, "script")
    if not isinstance(workflow_input, dict):
        raise ApiError(400, "the input must be a JSON object")
    if not isinstance(actions, list):
        raise ApiError(400, "the script must be a JSON list of worker actions")
    problems = _problems(svc, doc)
    if problems:
        return _checked(request, doc, problems)
    found, taskdefs = svc.commands.get().definitions()
    others = [d for (n, _), d in found.items() if n != doc.get("name")]
    scripts = svc.scripts.get() if svc.scripts is not None else None
    sim = Simulation([doc, *others], list(taskdefs.values()), actions, scripts=scripts)
    try:
        result = sim.run(doc, workflow_input, detail=True)
    except (DomainError, SchemaError) as exc:
        raise ApiError(400, f"the simulation stopped: {exc}") from None
    return templates.TemplateResponse(
        request,
        "_editor_simulated.html",
        {"doc": doc, "result": result, "dumps": lambda v: json.dumps(v, sort_keys=True)},
    )


@router.post("/definitions/push", response_class=HTMLResponse)
def push(
    request: Request,
    definition: Annotated[str, Form(max_length=DOCUMENT_MAX)],
    svc: Services = SVC,
    who: Principal = ADMIN,
) -> HTMLResponse:
    """Register the definition (all or nothing); its problems refuse it, each by its task."""
    doc = _document(definition)
    problems = _problems(svc, doc)
    if problems:
        raise ApiError(400, f"not pushed, {len(problems)} problem(s): " + "; ".join(problems))
    try:
        keys = svc.commands.get().push_documents(Documents(workflows=[doc]))
    except DefinitionError as exc:
        raise ApiError(400, "not pushed: " + "; ".join(exc.problems)) from None
    return templates.TemplateResponse(
        request, "_editor_pushed.html", {"doc": doc, "keys": keys, "by": who.name}
    )
