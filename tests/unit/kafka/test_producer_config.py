"""The producer configuration: what each kind of producer is promised."""

from __future__ import annotations

from es_sched.kafka.clients import producer_config
from es_sched.kafka.connection import KafkaConnection


def test_a_transactional_producer_retries_concurrent_transactions_quickly() -> None:
    # librdkafka's default retry.backoff.ms (100) would make every transaction that follows a
    # commit wait 100 ms on CONCURRENT_TRANSACTIONS (KAFKA-5477).
    config = producer_config(KafkaConnection.plaintext("127.0.0.1:9092"), "es.decider.0")
    assert config["transactional.id"] == "es.decider.0"
    assert config["retry.backoff.ms"] <= 20


def test_a_plain_producer_keeps_librdkafkas_backoff_and_extra_settings_win() -> None:
    assert "retry.backoff.ms" not in producer_config(KafkaConnection.plaintext("127.0.0.1:9092"))
    config = producer_config(
        KafkaConnection.plaintext("127.0.0.1:9092"), "t", **{"retry.backoff.ms": 50}
    )
    assert config["retry.backoff.ms"] == 50
    assert config["enable.idempotence"] is True and config["acks"] == "all"
