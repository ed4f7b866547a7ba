"""PostgreSQL's two roles (ADR 73): ``es-sched stack up`` on a PRIVATE PostgreSQL (own state
folder under the test's tmp, own port 19290; the install cache is the shared stack's) creates
the writer of ``ES_SCHED_PG_URL`` and the read-only role of ``ES_SCHED_PG_READ_URL``. A schema
the writer makes afterwards, as a projector makes each read model's, is readable by the
read-only role, which the server refuses any write: the refusal is PostgreSQL's
insufficient-privilege error, which proves it came from the grants."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from es_sched.settings import PostgresSettings, load_settings
from testkit.cli import es_sched

pytestmark = pytest.mark.integration
PORT = 19290
WRITER = f"postgresql+psycopg://es_sched:writer-pw@127.0.0.1:{PORT}/es_sched"
READER = f"postgresql+psycopg://es_reader:reader-pw@127.0.0.1:{PORT}/es_sched"


@pytest.fixture(scope="module")
def pg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresSettings]:
    state: Path = tmp_path_factory.mktemp("private-pg")
    env = {
        "ES_SCHED_STACK_STATE_DIR": str(state),
        "ES_SCHED_STACK_CACHE_DIR": str(load_settings().stack.resolved_cache_dir),
        "ES_SCHED_STACK_MODE": "local",
        "ES_SCHED_PG_URL": WRITER,
        "ES_SCHED_PG_READ_URL": READER,
    }
    up = es_sched("stack", "up", "--only", "postgres", env=env)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        yield PostgresSettings(url=WRITER, read_url=READER)
    finally:
        down = es_sched("stack", "down", "--only", "postgres", env=env)
        assert down.returncode == 0, down.stdout + down.stderr


def test_the_reader_reads_what_the_writer_makes_and_writes_nothing(pg: PostgresSettings) -> None:
    with psycopg.connect(pg.libpq_dsn, autocommit=True) as writer:
        writer.execute("CREATE SCHEMA made_later")
        writer.execute("CREATE TABLE made_later.workflows (id text PRIMARY KEY)")
        writer.execute("INSERT INTO made_later.workflows VALUES ('wf-1')")
    with psycopg.connect(pg.for_reading().libpq_dsn, autocommit=True) as reader:
        row = reader.execute("SELECT id FROM made_later.workflows").fetchone()
        assert row == ("wf-1",)
        for statement in (
            "INSERT INTO made_later.workflows VALUES ('wf-2')",
            "DELETE FROM made_later.workflows",
            "CREATE TABLE made_later.other (id text)",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                reader.execute(statement)
    with psycopg.connect(pg.libpq_dsn) as writer:
        rows = writer.execute("SELECT count(*) FROM made_later.workflows").fetchone()
        assert rows == (1,)  # the refused writes changed nothing
