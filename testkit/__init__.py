"""Helpers every test suite (and the benchmarks) share; each is written once, here.

- ``wait``: ``wait_until`` a fact holds (the timeout names the fact), ``wait_for_log``.
- ``net``: ``free_port``, and ``scrape``/``metric`` for a Prometheus endpoint.
- ``settings``: ``BOOTSTRAP``, ``unique_name``, and ``Settings`` for a private topic prefix,
  PostgreSQL schema and search index prefix (``private_vars`` for child processes,
  ``settings_with`` for this one: the same variables, so both see the same settings).
- ``kafka``: ``read_to_end`` and ``Reader`` for a topic, and the autouse fixture that deletes
  the topics a test created.
- ``golden``: the recorded histories under ``tests/fixtures/golden``.
- ``cli``: ``es_sched(*args)``, the command line as a child process.
- ``peak``: ``Peak``, how much work ran at once.
- ``procs``: a process's ``children`` and their ``cmdline`` (``/proc``).

``ROOT`` is the checkout the tests run from.
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
