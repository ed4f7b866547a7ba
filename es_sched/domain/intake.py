"""What the decider accepts as an input: the one rule the decider applies before deciding and
the audit checker applies when it asks which inputs had to be answered (ADR 75).

A record on the commands or task-results topic is refused, before any ``decide``, when

- it is empty, or larger than the command cap (``ES_SCHED_RUN_COMMAND_MAX_BYTES``): judged on
  its size alone, so an oversize record is never decoded (``record_refusal``);
- it nests objects and arrays deeper than ``MAX_DEPTH`` (judged on the bytes, so the
  decoder's recursion limit, which depends on where it runs, never decides);
- a string in it holds a NUL character: PostgreSQL stores none, in text or jsonb, so one such
  id or value refused outside any history stopped the PostgreSQL projector at its event
  (found by the hostile input campaign); judged on the bytes, without decoding;
- it does not decode (the serialization boundary says so: not this module's rule);
- it sits under a key that is not its workflow id: its workflow's partition would not hold it
  in order with the rest of that workflow's inputs (``input_refusal``);
- it is a StartWorkflow whose workflow id is neither uuid5 of its command id
  (``ids.workflow_id_for_command``: one command, one workflow) nor a child's
  start (``effects.child_start_id``).

A refused record goes to the dead letters with the reason and its origin; it belongs to no
workflow, so no invariant expects ``workflow.started`` or ``workflow.rejected`` for it. Every
other input is accepted and is answered inside a history or by a refusal event (ADR 11).
Both sides read the cap from the same setting, so a checker run with the deployment's settings
judges a record as its decider did.
"""

from __future__ import annotations

from itertools import accumulate

from es_sched.domain import commands as c
from es_sched.domain.effects import child_start_id
from es_sched.domain.ids import workflow_id_for_command


def record_refusal(data: bytes, cap: int) -> str | None:
    """Why the record ``data`` is refused before it is decoded, or None."""
    if not data:
        return "empty record"
    if len(data) > cap:
        return f"record is {len(data)} bytes, over the cap of {cap} bytes"
    if _holds_nul(data):
        return NUL_REASON
    depth = nesting(data)
    if depth > MAX_DEPTH:
        return f"record is nested {depth} levels deep, over the limit of {MAX_DEPTH}"
    return None


# How deep a record may nest. The JSON decoder's own limit is the interpreter's recursion limit
# less the stack in use where it runs, so a record near it decoded in the decider and failed in
# the audit reader (the hostile input campaign at full scale: I5 "caused by an input not in the
# input topics"). A fixed limit far below it judges every record the same everywhere.
MAX_DEPTH = 100
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'"[]{}')
_STEP = [0] * 256
_STEP[ord("[")] = _STEP[ord("{")] = 1
_STEP[ord("]")] = _STEP[ord("}")] = -1


def nesting(data: bytes) -> int:
    """The deepest nesting of objects and arrays in the JSON text ``data``, not counting
    brackets inside strings; found without decoding, and only counted bracket by bracket when
    there are more brackets than the limit (a record with fewer cannot be deeper)."""
    if data.count(b"{") + data.count(b"[") <= MAX_DEPTH:
        return 0  # not measured: it cannot be over the limit
    # Escaped backslashes, then escaped quotes, go first: every quote left opens or closes a
    # string. Of the rest only quotes and brackets are kept, and the strings' brackets dropped.
    plain = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    structure = plain.translate(None, _NOT_STRUCTURE)
    brackets = b"".join(structure.split(b'"')[0::2])  # every other part is inside a string
    # +1 for an opening bracket, -1 for a closing one; the deepest is the largest running sum
    # (every step runs in C: a definition-sized record costs as little as decoding it).
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0)


NUL_REASON = (
    "a string holds a NUL character (\\u0000), which no read model can store "
    "(PostgreSQL text and jsonb refuse it)"
)
_NUL = b"\\u0000"  # JSON spells NUL only so: a control character must be escaped in a string
_BACKSLASH = 0x5C


def _holds_nul(data: bytes) -> bool:
    """Whether the JSON text ``data`` has a NUL in a string: an escape ``\\u0000`` not itself
    escaped (an odd run of backslashes ends at its own), without decoding the record."""
    at = data.find(_NUL)
    while at != -1:
        start = at
        while start > 0 and data[start - 1] == _BACKSLASH:
            start -= 1
        if (at - start) % 2 == 0:
            return True
        at = data.find(_NUL, at + 1)
    return False


def input_refusal(key: str, inp: c.Input) -> str | None:
    """Why a decoded input under record key ``key`` is refused before it is decided, or None."""
    if key != inp.workflow_id:
        return f"record key {key!r} is not its workflow_id {inp.workflow_id!r}"
    if isinstance(inp, c.StartWorkflow) and not start_id_accepted(inp):
        return (
            "a StartWorkflow's workflow_id must be uuid5 of its command_id "
            "(es_sched.domain.ids.workflow_id_for_command): one command, one workflow"
        )
    return None


def start_id_accepted(inp: c.StartWorkflow) -> bool:
    """A start's workflow id follows from its command id, or it is a child's start."""
    wf = inp.workflow_id
    return wf == workflow_id_for_command(inp.input_id) or inp.input_id == child_start_id(wf)
