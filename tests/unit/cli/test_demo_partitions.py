"""`es-sched demo` on a local stack whose demo topics an earlier run made (ADR 53): their
partition count cannot change, so the demo keeps it unless the user chose one."""

from __future__ import annotations

import pytest

from es_sched.cli.demo.command import kept_partitions
from es_sched.settings import load_settings


@pytest.fixture
def unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ES_SCHED_KAFKA_PARTITIONS", raising=False)


@pytest.mark.usefixtures("unset")
def test_topics_of_the_old_default_are_kept() -> None:
    settings = load_settings()
    assert settings.kafka.partitions == 4
    assert kept_partitions(settings, 12) == 12


@pytest.mark.usefixtures("unset")
def test_no_topics_or_topics_of_the_configured_count_change_nothing() -> None:
    settings = load_settings()
    assert kept_partitions(settings, None) is None
    assert kept_partitions(settings, settings.kafka.partitions) is None


def test_a_count_the_user_chose_is_never_overridden(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ES_SCHED_KAFKA_PARTITIONS", "6")
    settings = load_settings()
    assert kept_partitions(settings, 12) is None  # the roles then refuse 12 naming both counts
