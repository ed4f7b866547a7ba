"""The one serialization boundary: every record that crosses a process boundary is encoded and
decoded here, against a JSON Schema (draft 2020-12) in ``schemas/`` with an example each.

Families (``schemas/<family>/<type>.v<N>.json``) and their modules:

- ``events``, ``commands`` (``codec``): event <-> envelope <-> bytes, decider inputs; older
  ``schema_version``s are upcast (``upcasters``) so the fold only ever sees current versions.
  Events read back from the log, which only the decider writes, decode in one typed pass
  (``logged``); readers that pick a few event types read a field or two of each event
  without decoding it (``partial``).
- ``records`` (``records``): ready, timer and retry records the decider writes for the
  dispatcher, the timer service and the retry relay.
- ``wire`` (``wire``): dispatcher <-> worker records (assignment, cancel, worker_status,
  progress), the classes both sides use.
- ``definitions`` (``definitions``): workflow definitions and TaskDefs on the definitions topic.
- ``config`` (``config``): the dispatcher's run-time settings on the config topic.
- decider snapshots (``snapshots``), guarded by ``snapshot_version`` (older ones upcast), and
  the changelog's other records, definition bundles and ended markers (``changelog``, ADR 18).

Every decoder validates (a compiled check, ``compiled``; jsonschema explains a refusal) and
raises ``SchemaError`` with the reason; times are read by one parser, ``codec.parse_time``.
Encoders take typed values built by es-sched and do not validate again.
"""

from es_sched.serialization import config, definitions, records, wire
from es_sched.serialization.codec import (
    decode_event,
    decode_input,
    encode_event,
    encode_input,
    event_from_dict,
    event_to_dict,
    input_from_dict,
    input_to_dict,
    parse_time,
)
from es_sched.serialization.definitions import decode_definition, encode_definition
from es_sched.serialization.logged import decode_logged_event
from es_sched.serialization.partial import decode_task_end, decode_workflow_end
from es_sched.serialization.records import (
    decode_ready,
    decode_retry,
    decode_timer,
    encode_ready,
    encode_retry,
    encode_timer,
)
from es_sched.serialization.schemas import SchemaCatalog, schema_dir

__all__ = [
    "SchemaCatalog",
    "config",
    "decode_definition",
    "decode_event",
    "decode_input",
    "decode_logged_event",
    "decode_ready",
    "decode_retry",
    "decode_task_end",
    "decode_timer",
    "decode_workflow_end",
    "definitions",
    "encode_definition",
    "encode_event",
    "encode_input",
    "encode_ready",
    "encode_retry",
    "encode_timer",
    "event_from_dict",
    "event_to_dict",
    "input_from_dict",
    "input_to_dict",
    "parse_time",
    "records",
    "schema_dir",
    "wire",
]
