"""The stats contract: size classes every role computes alike, proposals read at the boundary."""

from __future__ import annotations

import pytest

from es_sched.domain.learned import FailureRate, RunStats, parse, size_class, to_record

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("task_input", "resources", "expected"),
    [
        ({"height": 720, "codec": "h264"}, {"inputs": {"duration_s": 42.0}}, "h720-d60-h264"),
        ({"height": 1000, "codec": "h265"}, {"inputs": {"duration_s": 5}}, "h1080-d10-h265"),
        ({"height": 4320, "codec": "h264"}, None, "h2160-d?-h264"),
        ({"height": 480, "codec": "h264", "duration_s": 4000}, {}, "h480-d1800+-h264"),
        ({"height": 720}, None, "any"),
        ({"height": True, "codec": "h264"}, None, "any"),
        ({"text": "hello"}, None, "any"),
    ],
)
def test_size_class(
    task_input: dict[str, object], resources: dict[str, object] | None, expected: str
) -> None:
    assert size_class(task_input, resources) == expected


def test_records_round_trip_and_unknown_kinds_are_ignored() -> None:
    run = RunStats("t", "any", "2026-12-07T10:00:00+00:00", 20, 1.0, 2.0, 3.0, 0.1, 0.2, 1, 0.05)
    rate = FailureRate("version", "t", "1.0.0", "2026-12-07T10:00:00+00:00", 10, 1, 0.1)
    assert parse(to_record(run)) == run
    assert parse(to_record(rate)) == rate
    assert run.key == "runtime|t|any" and rate.key == "version|t|1.0.0"
    assert parse({"kind": "someday", "x": 1}) is None


@pytest.mark.parametrize(
    ("field", "value"), [("samples", "20"), ("run_p95_s", None), ("samples", 2.5)]
)
def test_a_malformed_record_is_refused_with_the_field_named(field: str, value: object) -> None:
    run = RunStats("t", "any", "2026-12-07T10:00:00+00:00", 20, 1.0, 2.0, 3.0, 0.1, 0.2, 1, 0.05)
    record = {**to_record(run), field: value}
    with pytest.raises(ValueError, match=field):
        parse(record)
