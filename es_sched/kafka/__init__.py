"""The Kafka adapter: topic names and bootstrap, client configuration, dead letters, registry.

Every confluent-kafka client of es-sched is configured here, so delivery guarantees are set in
one place: idempotent producers with ``acks=all`` and the Java-compatible ``murmur2``
partitioner (so upstream Java producers and es-sched agree on a workflow's partition), and
``read_committed`` consumers that never auto-commit.
"""
