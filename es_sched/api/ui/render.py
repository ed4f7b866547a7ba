"""The console's one Jinja2 environment and its static files (vendored htmx, one stylesheet).

Every page template extends ``base.html`` (navigation, the lag notice block, htmx); pages are
rendered on the server and htmx swaps fragments the server renders, so there is no build step.
"""

from __future__ import annotations

from pathlib import Path

from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

HERE = Path(__file__).parent
templates = Jinja2Templates(directory=HERE / "templates")
static = StaticFiles(directory=HERE / "static")
