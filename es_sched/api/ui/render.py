"""The console's one Jinja2 environment and its static files (vendored htmx, one stylesheet).

Every page template extends ``base.html`` (navigation, the lag notice block, htmx); pages are
rendered on the server and htmx swaps fragments the server renders, so there is no build step.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from es_sched.api.correlation import given

HERE = Path(__file__).parent
templates = Jinja2Templates(directory=HERE / "templates")
static = StaticFiles(directory=HERE / "static")


def clock(when: datetime, date: bool = False) -> str:
    """``HH:MM:SS`` of ``when`` (with ``YYYY-MM-DD `` before it when ``date``), in its zone:
    the list's times, twice per row (strftime called from a template was 11% of the list
    page's samples)."""
    time = "%02d:%02d:%02d" % (when.hour, when.minute, when.second)  # noqa: UP031 - fastest
    return f"{when.year:04d}-{when.month:02d}-{when.day:02d} {time}" if date else time


templates.env.filters["clock"] = clock
templates.env.filters["correlation"] = given
