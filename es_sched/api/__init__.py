"""The HTTP API and console (issue 14, ADR 23): Conductor-compatible REST under ``/api``, the
native API under ``/api/v1``, the console under ``/ui``.

An adapter like the CLI: reads go to the read models (PostgreSQL, the search store) and every
answer says which offsets it reflects; writes are commands on the commands topic carrying who
sent them, answered once the read model shows the decider's verdict (``api.writes``, ADR 56);
HTTP workers are served by the API process's gateway worker, which the dispatcher
places tasks on like any other worker. ``create_app`` builds the application from ``Services``
that ``es_sched.bootstrap.api_services`` wires.
"""
