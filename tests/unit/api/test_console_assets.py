"""The vendored htmx is the file its table names (version and hash), and the base page loads it."""

from __future__ import annotations

import hashlib
import re

from es_sched.api.ui.render import HERE


def test_vendored_htmx_matches_its_recorded_hash() -> None:
    table = (HERE / "static" / "VENDORED.md").read_text()
    [(name, digest)] = re.findall(r"\| `(htmx-[\d.]+\.min\.js)` \|.*?\| `([0-9a-f]{64})` \|", table)
    data = (HERE / "static" / name).read_bytes()
    assert hashlib.sha256(data).hexdigest() == digest
    assert f'src="/ui/static/{name}"' in (HERE / "templates" / "base.html").read_text()
