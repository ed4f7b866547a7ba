"""PostgreSQL from Debian's packages, as a private cluster inside the state folder.

The server binaries come from apt (``postgresql``, installed on first use when running as root);
the cluster itself is initialised with ``initdb`` under ``<state_dir>/postgres/data`` and run by
``pg_ctl`` without systemd, listening on loopback only. When es-sched runs as root the server runs
as the ``postgres`` system user, because PostgreSQL refuses to run as root.
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
from pathlib import Path

import psycopg
from psycopg import sql

from es_sched.errors import StackError
from es_sched.stack import probes
from es_sched.stack import process as proc
from es_sched.stack.base import Endpoint, LocalService
from es_sched.stack.probes import Probe

PG_ROOT = Path("/usr/lib/postgresql")


def find_bin_dir(root: Path = PG_ROOT) -> Path | None:
    """The newest installed server's bin directory (Debian keeps one per major version)."""
    found = [p.parent for p in root.glob("*/bin/pg_ctl")]
    return max(found, key=lambda p: int(p.parent.name)) if found else None


class LocalPostgres(LocalService):
    name = "postgres"

    @property
    def endpoint(self) -> Endpoint:
        return Endpoint(self.settings.postgres.host, self.settings.postgres.port)

    @property
    def display_endpoint(self) -> str:
        pg = self.settings.postgres
        return f"postgresql://{pg.user}@{pg.host}:{pg.port}/{pg.database}"

    @property
    def data_dir(self) -> Path:
        return self.home / "data"

    @property
    def socket_dir(self) -> Path:
        return self.home / "run"

    @property
    def marker(self) -> str:
        return str(self.data_dir)

    def _as_server_user(self, argv: list[str]) -> list[str]:
        return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv

    def install(self) -> None:
        if find_bin_dir() is not None:
            return
        if os.geteuid() != 0:
            raise StackError(
                "PostgreSQL server binaries are missing; run `apt-get install -y postgresql` "
                "as root, or point ES_SCHED_PG_URL at an existing server"
            )
        proc.run(["apt-get", "update", "-q"], what="apt-get update")
        proc.run(
            ["apt-get", "install", "-y", "-q", "--no-install-recommends", "postgresql"],
            what="apt-get install postgresql",
        )
        if find_bin_dir() is None:
            raise StackError(f"apt installed postgresql but no pg_ctl is under {PG_ROOT}")

    def _give_to_server_user(self) -> None:
        """Let the ``postgres`` user own its files and reach them through our folders."""
        if os.geteuid() != 0:
            return
        for path in (self.home, self.log_file):
            shutil.chown(path, "postgres", "postgres")
        for sub in self.home.rglob("*"):
            shutil.chown(sub, "postgres", "postgres")
        # A clone under a 0700 folder (mktemp -d) would hide the data directory from the
        # server user: grant traverse-only permission (o+x, no listing) on each ancestor.
        for ancestor in self.home.parents:
            mode = ancestor.stat().st_mode
            if not mode & stat.S_IXOTH:
                ancestor.chmod(mode | stat.S_IXOTH)

    def start(self) -> int:
        bin_dir = find_bin_dir()
        if bin_dir is None:
            raise StackError("PostgreSQL server binaries are missing (run `es-sched stack up`)")
        self.socket_dir.mkdir(parents=True, exist_ok=True)
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        self.log_file.touch()
        fresh = not (self.data_dir / "PG_VERSION").exists()
        if fresh:
            self.data_dir.mkdir(parents=True, exist_ok=True)
        self._give_to_server_user()
        if fresh:
            proc.run(
                self._as_server_user(
                    [
                        str(bin_dir / "initdb"),
                        "-D",
                        str(self.data_dir),
                        "-U",
                        "postgres",
                        "-E",
                        "UTF8",
                        "--locale=C",
                        "--auth-local=trust",
                        "--auth-host=scram-sha-256",
                    ]
                ),
                what="initdb",
            )
        options = (
            f"-c listen_addresses={self.endpoint.host} -p {self.endpoint.port} "
            f"-c unix_socket_directories={self.socket_dir}"
        )
        proc.run(
            self._as_server_user(
                [
                    str(bin_dir / "pg_ctl"),
                    "-D",
                    str(self.data_dir),
                    "-l",
                    str(self.log_file),
                    "-w",
                    "-t",
                    "60",
                    "-o",
                    options,
                    "start",
                ]
            ),
            what=f"pg_ctl start (log: {self.log_file})",
        )
        pid = int((self.data_dir / "postmaster.pid").read_text().splitlines()[0])
        self.owned.record(pid)
        return pid

    def _superuser(self) -> psycopg.Connection[tuple[object, ...]]:
        return psycopg.connect(
            host=str(self.socket_dir),
            port=self.endpoint.port,
            user="postgres",
            dbname="postgres",
            autocommit=True,
            connect_timeout=3,
        )

    def server_probe(self) -> Probe:
        try:
            with self._superuser() as conn:
                conn.execute("SELECT 1")
        except psycopg.Error as exc:
            return Probe(False, str(exc).strip().splitlines()[0] if str(exc).strip() else "down")
        return Probe(True, "server accepts connections")

    def after_ready(self) -> None:
        """Create the es-sched role and database named in ES_SCHED_PG_URL, once."""
        pg = self.settings.postgres
        try:
            with self._superuser() as conn:
                _login_role(conn, pg.user, pg.password)
                db = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (pg.database,))
                if db.fetchone() is None:
                    conn.execute(
                        sql.SQL("CREATE DATABASE {} OWNER {}").format(
                            sql.Identifier(pg.database), sql.Identifier(pg.user)
                        )
                    )
        except psycopg.Error as exc:
            raise StackError(f"creating the es-sched role and database failed: {exc}") from exc
        if pg.read_url:
            self._reader()

    def _reader(self) -> None:
        """The read-only role of ``ES_SCHED_PG_READ_URL`` (ADR 73): it may read every table
        the writer has made or will make (default privileges: the projector makes each test's
        and each rebuild's schema at run time), and write nothing."""
        pg, read = self.settings.postgres, self.settings.postgres.for_reading()
        writer, reader = sql.Identifier(pg.user), sql.Identifier(read.user)
        try:
            with self._superuser() as conn:
                _login_role(conn, read.user, read.password)
                conn.execute(
                    sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(
                        sql.Identifier(pg.database), reader
                    )
                )
            with psycopg.connect(
                host=str(self.socket_dir),
                port=self.endpoint.port,
                user="postgres",
                dbname=pg.database,
                autocommit=True,
                connect_timeout=3,
            ) as conn:
                for on in ("USAGE ON SCHEMAS", "SELECT ON TABLES"):
                    conn.execute(
                        sql.SQL("ALTER DEFAULT PRIVILEGES FOR ROLE {} GRANT {} TO {}").format(
                            writer, sql.SQL(on), reader
                        )
                    )
                owned = conn.execute(
                    "SELECT nspname FROM pg_namespace WHERE nspowner = "
                    "(SELECT oid FROM pg_roles WHERE rolname = %s)",
                    (pg.user,),
                )
                for (schema,) in owned.fetchall():
                    name = sql.Identifier(str(schema))
                    conn.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(name, reader))
                    conn.execute(
                        sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA {} TO {}").format(
                            name, reader
                        )
                    )
        except psycopg.Error as exc:
            raise StackError(f"creating the read-only role failed: {exc}") from exc

    def probe(self) -> Probe:
        """The writer logs in, and the read-only role too when one is set (until
        ``after_ready`` made it, clients fail)."""
        writer = probes.postgres(self.settings.postgres.libpq_dsn)
        if not writer.healthy or not self.settings.postgres.read_url:
            return writer
        read = probes.postgres(self.settings.postgres.for_reading().libpq_dsn)
        return writer if read.healthy else Probe(False, f"read-only role: {read.detail}")

    def stop(self) -> int | None:
        # SIGINT is PostgreSQL's "fast" shutdown: roll back open transactions, then exit cleanly.
        return self.owned.stop(signal.SIGINT)


def _login_role(conn: psycopg.Connection[tuple[object, ...]], user: str, password: str) -> None:
    """``user`` may log in with ``password``: created, or its password set again."""
    found = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (user,))
    verb = "ALTER" if found.fetchone() else "CREATE"
    conn.execute(
        sql.SQL("{} ROLE {} LOGIN PASSWORD {}").format(
            sql.SQL(verb), sql.Identifier(user), sql.Literal(password)
        )
    )
