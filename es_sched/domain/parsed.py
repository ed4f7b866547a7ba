"""Definitions parsed once and shared by every workflow that folds the same documents.

Every workflow of a definition starts from the same workflow document and the same TaskDef
documents; parsing is deterministic and its results are immutable (frozen ``WorkflowDef``,
``TaskDef``; a mapping of them nobody changes), so sharing one result is indistinguishable from
parsing again, and costs no memory per workflow. The caches are bounded (512 entries each, the
oldest dropped first): a deployment folds far fewer distinct definitions than that at a time.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from es_sched.domain.definitions import (
    Resources,
    TaskDef,
    WorkflowDef,
    parse_task_def,
    parse_workflow,
)

_CACHE_SIZE = 512
_WORKFLOWS: OrderedDict[bytes, tuple[WorkflowDef | None, list[str]]] = OrderedDict()
_BY_IDENTITY: dict[int, tuple[Mapping[str, Any], WorkflowDef | None, list[str]]] = {}
_TASKDEFS: OrderedDict[bytes, dict[str, TaskDef]] = OrderedDict()
_RESOURCES: dict[int, tuple[Resources, dict[str, Any]]] = {}


def parse_workflow_cached(doc: Mapping[str, Any]) -> tuple[WorkflowDef | None, list[str]]:
    """``parse_workflow`` memoised on the document's canonical JSON."""
    same = _BY_IDENTITY.get(id(doc))
    if same is not None and same[0] is doc:  # the very same document object: no hashing at all
        return same[1], list(same[2])
    key = orjson.dumps(doc, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS, default=str)
    hit = _WORKFLOWS.get(key)
    if hit is not None:
        _WORKFLOWS.move_to_end(key)
        _remember(doc, hit)
        return hit[0], list(hit[1])
    parsed = parse_workflow(doc)
    _WORKFLOWS[key] = parsed
    if len(_WORKFLOWS) > _CACHE_SIZE:
        _WORKFLOWS.popitem(last=False)
    _remember(doc, parsed)
    return parsed[0], list(parsed[1])


def _remember(doc: Mapping[str, Any], parsed: tuple[WorkflowDef | None, list[str]]) -> None:
    _BY_IDENTITY[id(doc)] = (doc, parsed[0], parsed[1])  # held: its id is not reused meanwhile
    if len(_BY_IDENTITY) > _CACHE_SIZE:
        _BY_IDENTITY.pop(next(iter(_BY_IDENTITY)))


def taskdefs_by_name(docs: Sequence[Any]) -> Mapping[str, TaskDef]:
    """A workflow's task definitions by name, as the fold and a snapshot's bundle read them (a
    document that is none is left out: validation refused it before any start).

    Memoised on the documents' JSON in their own key order, so only byte-equal documents share
    a result and each ``TaskDef.raw`` is the document as its workflow sent it. Unshared, every
    started workflow would parse its TaskDefs again and keep its own copy in the decider's
    memory for as long as the state is held
    (``bench/results/archive/decider_memory_shared_defs.json``)."""
    try:
        key = orjson.dumps(docs)  # str keys and JSON values only, as every event carries
    except TypeError:  # anything else is parsed for this caller alone
        return _by_name(docs)
    hit = _TASKDEFS.get(key)
    if hit is None:
        hit = _TASKDEFS[key] = _by_name(docs)
        if len(_TASKDEFS) > _CACHE_SIZE:
            _TASKDEFS.popitem(last=False)
    return hit


def _by_name(docs: Sequence[Any]) -> dict[str, TaskDef]:
    parsed = (parse_task_def(doc)[0] for doc in docs)
    return {td.name: td for td in parsed if td is not None}


def resources_dict(resources: Resources) -> dict[str, Any]:
    """``resources.as_dict()``, one dict per ``Resources`` object: a worker task's declared
    resources come from its TaskDef (shared above) or are none (``NO_RESOURCES``), so every
    task scheduled from the same settings carries the same dict in its ``TaskScheduled`` and
    its state, where nothing changes it in place. Keyed by identity, as values alone would
    confuse ``0.0`` with ``-0.0``. Unshared, a kept workflow would hold a copy per task
    (``bench/results/archive/decider_memory_resources.json``)."""
    same = _RESOURCES.get(id(resources))
    if same is not None and same[0] is resources:
        return same[1]
    made = resources.as_dict()
    _RESOURCES[id(resources)] = (resources, made)  # held: its id is not reused meanwhile
    if len(_RESOURCES) > _CACHE_SIZE:
        _RESOURCES.pop(next(iter(_RESOURCES)))
    return made
