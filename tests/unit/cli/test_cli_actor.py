"""The CLI's control commands say who acted: ``cli:<OS user>`` reaches the command client."""

from __future__ import annotations

import getpass
from typing import Any

import pytest
from click.testing import CliRunner

from es_sched.cli import commands
from es_sched.commands import Submitted


class FakeClient:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def __enter__(self) -> FakeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def __getattr__(self, verb: str) -> Any:
        def send(wf_id: str, *args: Any, **kwargs: Any) -> Submitted:
            self.calls.append((verb, kwargs))
            return Submitted(wf_id, "cmd-1")

        return send


@pytest.mark.parametrize(
    "argv",
    [
        ["cancel", "wf-1"],
        ["terminate", "wf-1"],
        ["retry", "wf-1"],
        ["pause", "wf-1"],
        ["resume", "wf-1"],
        ["signal", "wf-1"],
        ["restart", "wf-1"],
        ["rerun", "wf-1", "--from-task", "encode"],
    ],
)
def test_control_commands_send_the_os_user_as_actor(
    argv: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeClient()
    monkeypatch.setattr(commands, "_client", lambda: fake)
    monkeypatch.setattr(getpass, "getuser", lambda: "alice")
    command = getattr(commands, argv[0])
    result = CliRunner().invoke(command, argv[1:])
    assert result.exit_code == 0, result.output
    assert fake.calls == [(argv[0], {"actor": "cli:alice"})]


def test_without_a_user_name_the_actor_is_still_named(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_user() -> str:
        raise KeyError("uid not found")

    monkeypatch.setattr(getpass, "getuser", no_user)
    assert commands.actor() == "cli:unknown"


class SubmitClient(FakeClient):
    def submit_many(self, name: str, inputs: list[Any], *args: Any, **kw: Any) -> Any:
        self.calls.append(("submit_many", kw))
        return [Submitted("wf-1", "cmd-1")]

    def token(self, wf_id: str) -> None:
        return None


@pytest.mark.parametrize(
    ("extra", "expected"), [([], None), (["--correlation-id", "order-7"], "order-7")]
)
def test_submit_sends_a_correlation_id_only_when_given(
    extra: list[str], expected: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = SubmitClient()
    monkeypatch.setattr(commands, "_client", lambda: fake)
    result = CliRunner().invoke(commands.submit, ["wf", "--input", "{}", *extra])
    assert result.exit_code == 0, result.output
    assert fake.calls[0][1]["correlation_id"] == expected


def test_submit_refuses_priority_9() -> None:
    result = CliRunner().invoke(commands.submit, ["wf", "--input", "{}", "--priority", "9"])
    assert result.exit_code == 2 and "0<=x<=8" in result.output
