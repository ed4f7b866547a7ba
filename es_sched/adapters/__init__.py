"""Adapters: the edges of es-sched that talk to engines, brokers and databases."""
