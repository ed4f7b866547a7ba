"""The media handlers blame their host only for the host's faults (ADR 58): a full or
read-only volume, a tool that will not start; a missing source stays the input's fault."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from es_sched.workers import HostFault, TaskFailure
from es_sched.workers.media import files
from es_sched.workers.media.proc import run_quick

pytestmark = pytest.mark.unit


def test_a_full_or_read_only_volume_is_a_host_fault_and_other_errors_are_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail_with(code: int) -> None:
        def mkdir(*_: object, **__: object) -> None:
            raise OSError(code, "scripted")

        monkeypatch.setattr(Path, "mkdir", mkdir)

    fail_with(errno.EROFS)
    with pytest.raises(HostFault, match="writing"):
        files.write_atomically(tmp_path / "out" / "a.json", b"{}")
    fail_with(errno.EACCES)
    with pytest.raises(OSError) as raised:
        files.write_atomically(tmp_path / "out" / "a.json", b"{}")
    assert not isinstance(raised.value, HostFault)


def test_a_tool_that_will_not_start_is_a_host_fault(tmp_path: Path) -> None:
    with pytest.raises(HostFault, match="could not"):
        run_quick([str(tmp_path / "no-such-ffmpeg"), "-version"])


def test_a_missing_source_is_the_inputs_fault(tmp_path: Path) -> None:
    with pytest.raises(TaskFailure) as raised:
        files.open_ref(f"file://{tmp_path}/gone.mp4", what="source_uri")
    assert not raised.value.retryable and not isinstance(raised.value, HostFault)
