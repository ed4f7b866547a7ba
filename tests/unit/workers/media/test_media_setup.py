"""Setting media up: installing ffmpeg, media settings, and `es-sched worker --media`."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from es_sched.cli.worker import worker
from es_sched.errors import ConfigError, StackError
from es_sched.settings import load_settings
from es_sched.stack import ffmpeg
from es_sched.workers.media import proc


def test_ensure_ffmpeg_is_one_lookup_when_present(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("shutil.which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(
        "es_sched.stack.process.run", lambda *a, **k: pytest.fail("nothing to install")
    )
    assert ffmpeg.ensure_ffmpeg() == "/usr/bin/ffmpeg"


def test_ensure_ffmpeg_names_the_command_when_it_cannot_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("shutil.which", lambda name: None)
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    with pytest.raises(StackError) as caught:
        ffmpeg.ensure_ffmpeg()
    message = str(caught.value)
    assert "ffmpeg and ffprobe not found" in message
    assert "apt-get install -y -q --no-install-recommends ffmpeg" in message


def test_ensure_ffmpeg_installs_with_apt_as_root(monkeypatch: pytest.MonkeyPatch) -> None:
    installed: list[str] = []
    ran: list[list[str]] = []
    monkeypatch.setattr(
        "shutil.which",
        lambda name: f"/usr/bin/{name}" if installed or name == "apt-get" else None,
    )
    monkeypatch.setattr("os.geteuid", lambda: 0)

    def run(argv: list[str], what: str) -> str:
        ran.append(argv)
        if "install" in argv:
            installed.append("ffmpeg")
        return ""

    monkeypatch.setattr("es_sched.stack.process.run", run)
    assert ffmpeg.ensure_ffmpeg() == "/usr/bin/ffmpeg"
    assert ran == [["apt-get", "update", "-q"], ffmpeg.INSTALL]
    assert ffmpeg.INSTALL[-2:] == ["--no-install-recommends", "ffmpeg"]


def test_handlers_name_a_missing_binary(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("shutil.which", lambda name: None)
    with pytest.raises(ConfigError, match="ffprobe is not on PATH"):
        proc.tool("ffprobe")


def test_media_settings_read_their_prefix(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ES_SCHED_MEDIA_OUTPUT_DIR", str(tmp_path))
    monkeypatch.setenv("ES_SCHED_MEDIA_CALLBACK_SECRET", "s")
    monkeypatch.setenv("ES_SCHED_MEDIA_MAX_CPU", "4")
    s = load_settings().media
    assert (s.resolved_output_dir, s.callback_secret, s.max_cpu) == (tmp_path, "s", 4.0)
    assert "callback_secret" not in repr(s)  # the secret stays out of logs
    monkeypatch.setenv("ES_SCHED_MEDIA_MAX_CPU", "-1")
    with pytest.raises(ConfigError, match="ES_SCHED_MEDIA_MAX_CPU"):
        load_settings()


def test_worker_cli_takes_noop_or_media(monkeypatch: pytest.MonkeyPatch) -> None:
    neither = CliRunner().invoke(worker, [])
    assert neither.exit_code == 2 and "choose --noop (with --types) or --media" in neither.output
    both = CliRunner().invoke(worker, ["--noop", "--media", "--types", "a"])
    assert both.exit_code == 2
    monkeypatch.delenv("ES_SCHED_MEDIA_CALLBACK_SECRET", raising=False)
    unsigned = CliRunner().invoke(worker, ["--media"])
    assert isinstance(unsigned.exception, ConfigError)
    assert "ES_SCHED_MEDIA_CALLBACK_SECRET" in str(unsigned.exception)
