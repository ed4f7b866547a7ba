"""es-sched: an event-sourced DAG task scheduler for media pipelines over Apache Kafka."""

__version__ = "0.1.0"
