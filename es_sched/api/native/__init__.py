"""See the package docstring of ``es_sched.api``."""
