"""The one serialization boundary: event <-> envelope dict <-> bytes, and commands likewise.

Everything that crosses a process boundary goes through here: JSON Schema validation against
``schemas/``, upcasting of older ``schema_version``s, and the mapping of stable type strings to
domain classes. The fold only ever sees current versions.
"""

from es_sched.serialization.codec import (
    decode_event,
    decode_input,
    decode_logged_event,
    encode_event,
    encode_input,
    event_from_dict,
    event_to_dict,
    input_from_dict,
    input_to_dict,
)
from es_sched.serialization.schemas import SchemaCatalog, schema_dir

__all__ = [
    "SchemaCatalog",
    "decode_event",
    "decode_input",
    "decode_logged_event",
    "encode_event",
    "encode_input",
    "event_from_dict",
    "event_to_dict",
    "input_from_dict",
    "input_to_dict",
    "schema_dir",
]
