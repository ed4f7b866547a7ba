"""The pure workflow core of es-sched.

Contract: modules in this package import only the standard library and each other. They do no
I/O, never read the clock and draw no random numbers; the shell passes ``now`` and new ids in.
The import-linter contract in ``pyproject.toml`` enforces this.
"""
