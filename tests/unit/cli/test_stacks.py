"""``es_sched.cli.stacks``: a thread's stack names the call it waits in; SIGUSR1 logs them."""

from __future__ import annotations

import logging
import os
import signal
import threading

import pytest

from es_sched.cli import stacks


def test_a_waiting_thread_is_shown_by_name_at_the_call_it_waits_in() -> None:
    release = threading.Event()

    def parked_here() -> None:
        release.wait(30)

    t = threading.Thread(target=parked_here, name="parked")
    t.start()
    try:
        shown = stacks.format_stacks({"parked"})
    finally:
        release.set()
        t.join()
    assert shown.startswith('Thread "parked" (daemon=False):')
    assert "in parked_here" in shown and "release.wait(30)" in shown
    assert "MainThread" not in shown  # only the names asked for


def test_sigusr1_logs_every_thread_and_the_process_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    before = signal.getsignal(signal.SIGUSR1)
    try:
        stacks.install()
        with caplog.at_level(logging.WARNING, logger="es_sched.stacks"):
            os.kill(os.getpid(), signal.SIGUSR1)  # handled in this (the main) thread
            logged = [r.getMessage() for r in caplog.records]
    finally:
        signal.signal(signal.SIGUSR1, before)
    assert len(logged) == 1 and logged[0].startswith(f"{stacks.MARKER} (SIGUSR1):")
    assert 'Thread "MainThread"' in logged[0] and "test_sigusr1_logs_every_thread" in logged[0]
