"""Config records of the dispatcher: parsing, validation and folding into the core."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from click.testing import CliRunner

from es_sched.cli.config import config
from es_sched.dispatch import config as dc
from es_sched.dispatch.core.engine import DispatchCore
from es_sched.dispatch.core.limits import Rate
from es_sched.errors import SchemaError

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _apply(core: DispatchCore, key: str, value: dict[str, object] | None) -> None:
    dc.apply(core, dc.parse(key, dc.encode(value)))


def test_keys_split_into_kind_and_subject() -> None:
    assert dc.parse("rate:type:media.probe", b'{"rate": 5}') == dc.ConfigChange(
        "rate:type", "media.probe", {"rate": 5}
    )
    assert dc.parse("rate:tenant:acme", None) == dc.ConfigChange("rate:tenant", "acme", None)
    assert dc.parse("ban-version:1.2.3", b"{}").subject == "1.2.3"
    assert dc.parse("pool:a:b", b'{"pool": "gpu"}').subject == "a:b"  # colons in names are fine
    assert dc.key_for("policy", "gpu") == "policy:gpu"
    assert dc.rate_key("acme", tenant=True) == "rate:tenant:acme"


@pytest.mark.parametrize(
    ("key", "raw"),
    [
        ("nonsense:x", b"{}"),
        ("rate:type:", b'{"rate": 1}'),
        ("rate:type:t", b"not json"),
        ("rate:type:t", b"[1]"),
        ("rate:type:t", b'{"rate": 0}'),
        ("rate:type:t", b'{"rate": true}'),
        ("rate:tenant:x", b'{"rate": 2, "burst": 0.5}'),
        ("concurrency:t", b'{"limit": -1}'),
        ("concurrency:t", b'{"limit": 1.5}'),
        ("pool:t", b'{"pool": ""}'),
        ("policy:p", b'{"policy": "random"}'),
    ],
)
def test_malformed_records_are_schema_errors(key: str, raw: bytes) -> None:
    with pytest.raises(SchemaError):
        dc.parse(key, raw)


def test_changes_fold_into_the_core_and_tombstones_undo_them() -> None:
    core = DispatchCore()
    _apply(core, "rate:type:t", {"rate": 2, "burst": 3})
    _apply(core, "rate:tenant:acme", {"rate": 1})
    _apply(core, "concurrency:t", {"limit": 4})
    _apply(core, "ban-version:v1", {})
    _apply(core, "pool:t", {"pool": "gpu"})
    _apply(core, "policy:gpu", {"policy": "spread"})
    _apply(core, "rate:key:cdn", {"rate": 4, "burst": 2})
    assert core.limits.rates == {
        ("type", "t"): Rate(3, 1.5),  # a bucket of 3 refilled at 2/s: 3 starts per 1.5 s
        ("tenant", "acme"): Rate(1, 1.0),
        ("key", "cdn"): Rate(2, 0.5),
    }
    assert core.limits.concurrency == {"t": 4}
    assert core.fleet.banned_versions == {"v1"}
    assert core.pools == {"t": "gpu"}
    assert core.policies["gpu"] == "spread"
    for key in (
        "rate:type:t",
        "rate:tenant:acme",
        "rate:key:cdn",
        "concurrency:t",
        "ban-version:v1",
        "pool:t",
    ):
        _apply(core, key, None)
    dc.apply(core, dc.parse("policy:gpu", None), default_policy="binpack")
    policies: dict[str, str] = dict(core.policies)
    assert not core.limits.rates
    assert not core.limits.concurrency and not core.fleet.banned_versions
    assert not core.pools and policies["gpu"] == "binpack"


def test_a_rate_limit_from_config_refuses_beyond_the_burst() -> None:
    core = DispatchCore()
    _apply(core, "rate:type:t", {"rate": 1, "burst": 2})
    assert [core.limits.admit("t", None, NOW) for _ in range(3)] == [None, None, "type_rate"]


def test_cli_refuses_bad_input_before_touching_kafka() -> None:
    runner = CliRunner()
    both = runner.invoke(config, ["set-rate", "--type", "t", "--tenant", "x", "5"])
    assert both.exit_code == 2 and "exactly one of --type, --tenant and --key" in both.output
    neither = runner.invoke(config, ["set-rate", "5"])
    assert neither.exit_code == 2
    policy = runner.invoke(config, ["set-policy", "gpu", "random"])
    assert policy.exit_code == 2 and "binpack" in policy.output
    negative = runner.invoke(config, ["set-concurrency", "t", "-1"])
    assert negative.exit_code == 2
    no_weight = runner.invoke(config, ["set-tenant", "acme", "--weight", "0"])
    assert no_weight.exit_code == 2 and "--weight" in no_weight.output
    negative_quota = runner.invoke(config, ["set-tenant", "acme", "--quota", "-1"])
    assert negative_quota.exit_code == 2 and "--quota" in negative_quota.output
    zero_rate = runner.invoke(config, ["set-rate", "--type", "t", "0"])
    assert isinstance(zero_rate.exception, SchemaError)
