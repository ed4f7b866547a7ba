"""How much load the heavy tests put through the system: one setting for the whole suite.

``ES_SCHED_TEST_SCALE`` (validated once, like every es-sched setting):

- ``ci``, the default, what ``make test`` and CI run: each heavy test still keeps enough
  workflows in flight that its fault lands mid-work (a few hundred), and the suite stays
  within its budget on a 2-core machine.
- ``full``, what ``make test-full`` runs: the loads the tests were written with (1,000+
  workflows in flight at each fault, a thousand-workflow run, a 2,000-branch fork).

A test asks ``pick(ci=..., full=...)`` for its figure, so both figures stand side by side in
the test that uses them.
"""

from __future__ import annotations

from functools import cache
from typing import Literal, TypeVar

from pydantic_settings import BaseSettings, SettingsConfigDict

T = TypeVar("T")


class ScaleSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ES_SCHED_TEST_")

    scale: Literal["ci", "full"] = "ci"


@cache
def scale() -> Literal["ci", "full"]:
    return ScaleSettings().scale


def pick(ci: T, full: T) -> T:
    """``ci`` or ``full``, as ``ES_SCHED_TEST_SCALE`` says."""
    return full if scale() == "full" else ci
