"""The real MariaDB server (stack/mariadb.py): the InnoDB behaviour the status-sync seed's rules rely on, proven on
the engine, and the dialect differences from MySQL 8.0 that docs/native-stack.md lists.

One server for the module (about 4 s to initialise and start). Skipped only when Debian's mariadb-server is not
installed (scripts/system-deps.sh installs it; CI runs that).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest
import sqlalchemy as sa

from stack.mariadb import INSTALL_COMMAND, LocalMariaDB, MariaDBError, mariadb_available

pytestmark = [
    pytest.mark.stack,
    pytest.mark.skipif(not mariadb_available(), reason=f"mariadbd is not installed: {INSTALL_COMMAND}"),
]

APP_USER = "statusapp"
APP_PASSWORD = "app-secret"
ER_LOCK_WAIT_TIMEOUT = 1205
ER_CONSTRAINT_FAILED = 4025
ER_PARSE_ERROR = 1064
ER_TABLEACCESS_DENIED = 1142
ER_DBACCESS_DENIED = 1044


@pytest.fixture(scope="module")
def server() -> Iterator[LocalMariaDB]:
    run_dir = Path(tempfile.mkdtemp(prefix="sortie-mariadb-test-"))
    db = LocalMariaDB(run_dir)
    try:
        db.start()
        db.create_app_user(APP_USER, APP_PASSWORD)
        yield db
    finally:
        db.stop()
        shutil.rmtree(run_dir, ignore_errors=True)


@pytest.fixture
def table(server: LocalMariaDB, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh queue-like table named after the test: rows 1..6, version 1, status PENDING."""
    name = request.node.name.replace("[", "_").replace("]", "").replace("-", "_")[:60]
    server.execute(f"DROP TABLE IF EXISTS sortie.{name}")
    server.execute(f"CREATE TABLE sortie.{name} (id BIGINT PRIMARY KEY, version BIGINT NOT NULL, "
                   "status VARCHAR(16) NOT NULL) ENGINE=InnoDB")
    server.execute(f"INSERT INTO sortie.{name} VALUES " + ", ".join(f"({i}, 1, 'PENDING')" for i in range(1, 7)))
    yield name
    server.execute(f"DROP TABLE IF EXISTS sortie.{name}")


@contextlib.contextmanager
def session(server: LocalMariaDB) -> Iterator[Any]:
    """A cursor on its own connection as the application user, in an explicit transaction (rolled back at the end
    unless committed)."""
    conn = server.connect(APP_USER, APP_PASSWORD, "sortie", autocommit=False)
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION innodb_lock_wait_timeout = 1")  # a missed NOWAIT fails fast, not in 50 s
            yield cur
        conn.rollback()
    finally:
        conn.close()


def one(cur: Any, sql: str, params: Any = None) -> Any:
    cur.execute(sql, params)
    row = cur.fetchone()
    return row[0] if row is not None else None


def column(cur: Any, sql: str, params: Any = None) -> list[Any]:
    cur.execute(sql, params)
    return [row[0] for row in cur.fetchall()]


# --- the server ------------------------------------------------------------------------------------


def test_server_runs_innodb_repeatable_read_with_mysql80s_sql_mode(server: LocalMariaDB) -> None:
    with session(server) as cur:
        cur.execute("SELECT @@default_storage_engine, @@tx_isolation, @@innodb_snapshot_isolation, "
                    "@@character_set_server, @@time_zone, @@sql_mode")
        engine, isolation, snapshot_isolation, charset, zone, sql_mode = cur.fetchone()
        # MySQL 8.0 renamed tx_isolation to transaction_isolation; MariaDB 10.11 has only the old name.
        with pytest.raises(pymysql.err.OperationalError):
            cur.execute("SELECT @@transaction_isolation")
    assert (engine, isolation, snapshot_isolation, charset, zone) == ("InnoDB", "REPEATABLE-READ", 0, "utf8mb4",
                                                                      "+00:00")
    assert {"ONLY_FULL_GROUP_BY", "STRICT_TRANS_TABLES", "NO_ZERO_DATE"} <= set(sql_mode.split(","))


def test_the_application_user_changes_rows_but_not_the_schema_nor_other_databases(server: LocalMariaDB,
                                                                                  table: str) -> None:
    with session(server) as cur:
        cur.execute(f"UPDATE {table} SET status = 'DONE' WHERE id = 1")
        cur.execute(f"DELETE FROM {table} WHERE id = 2")
        cur.execute(f"INSERT INTO {table} VALUES (7, 1, 'PENDING')")
        assert one(cur, f"SELECT COUNT(*) FROM {table}") == 6
        for statement, code in ((f"DROP TABLE {table}", ER_TABLEACCESS_DENIED),
                                ("CREATE TABLE other (id INT)", ER_TABLEACCESS_DENIED),
                                ("SELECT user FROM mysql.user", ER_TABLEACCESS_DENIED),
                                ("CREATE DATABASE other", ER_DBACCESS_DENIED)):
            with pytest.raises(pymysql.err.OperationalError) as refused:
                cur.execute(statement)
            assert refused.value.args[0] == code, statement


# --- InnoDB locking reads ------------------------------------------------------------------------------


def test_for_update_holds_the_row_until_commit(server: LocalMariaDB, table: str) -> None:
    with session(server) as first, session(server) as second:
        assert one(first, f"SELECT version FROM {table} WHERE id = 1 FOR UPDATE") == 1
        with pytest.raises(pymysql.err.OperationalError) as waited:
            second.execute(f"SELECT version FROM {table} WHERE id = 1 FOR UPDATE NOWAIT")
        assert waited.value.args[0] == ER_LOCK_WAIT_TIMEOUT
        # Another row is free, and a plain read is not blocked by the lock (it reads its snapshot).
        assert one(second, f"SELECT version FROM {table} WHERE id = 2 FOR UPDATE NOWAIT") == 1
        assert one(second, f"SELECT version FROM {table} WHERE id = 1") == 1
        first.execute(f"UPDATE {table} SET version = 2 WHERE id = 1")
        first.connection.commit()
        assert one(second, f"SELECT version FROM {table} WHERE id = 1 FOR UPDATE NOWAIT") == 2


def test_skip_locked_hands_two_claimers_disjoint_batches(server: LocalMariaDB, table: str) -> None:
    claim = f"SELECT id FROM {table} WHERE status = 'PENDING' ORDER BY id LIMIT 2 FOR UPDATE SKIP LOCKED"
    with session(server) as relay_a, session(server) as relay_b, session(server) as relay_c:
        batch_a = column(relay_a, claim)
        batch_b = column(relay_b, claim)
        assert batch_a == [1, 2]
        assert batch_b == [3, 4]  # not blocked on 1 and 2: skipped them
        # The claim is committed as PROCESSING; rows locked by nobody are claimed again only once released.
        relay_a.execute(f"UPDATE {table} SET status = 'PROCESSING' WHERE id IN (1, 2)")
        relay_a.connection.commit()
        assert column(relay_c, claim) == [5, 6]
        relay_b.connection.rollback()  # relay B gave up: its rows are PENDING and free again
        relay_c.connection.rollback()
        assert column(relay_c, claim) == [3, 4]


# --- REPEATABLE READ: plain reads see the snapshot, locking reads the latest commit -------------------------------


def test_a_plain_read_sees_the_snapshot_and_a_locking_read_the_latest_commit(server: LocalMariaDB,
                                                                             table: str) -> None:
    with session(server) as reader, session(server) as writer:
        assert one(reader, f"SELECT version FROM {table} WHERE id = 1") == 1  # the snapshot is taken here
        writer.execute(f"UPDATE {table} SET version = 2 WHERE id = 1")
        writer.connection.commit()
        assert one(reader, f"SELECT version FROM {table} WHERE id = 1") == 1
        assert one(reader, f"SELECT version FROM {table} WHERE id = 1 LOCK IN SHARE MODE") == 2
        assert one(reader, f"SELECT version FROM {table} WHERE id = 1 FOR UPDATE") == 2
        assert one(reader, f"SELECT version FROM {table} WHERE id = 1") == 1  # still the snapshot
        # An UPDATE reads the latest commit too, and the transaction then sees its own write.
        reader.execute(f"UPDATE {table} SET version = version + 1 WHERE id = 1")
        assert one(reader, f"SELECT version FROM {table} WHERE id = 1") == 3


def test_a_version_assigned_from_a_plain_read_is_lost_and_from_a_locking_read_is_not(server: LocalMariaDB,
                                                                                   table: str) -> None:
    """Why the seed assigns versions under SELECT ... FOR UPDATE: from the snapshot, two writers take the same
    next version; from a locking read, the second one takes the next."""
    for read, expected in (("", [2, 2]), (" FOR UPDATE", [2, 3])):
        server.execute(f"UPDATE sortie.{table} SET version = 1 WHERE id = 1")
        assigned = []
        with session(server) as first, session(server) as second:
            one(second, f"SELECT version FROM {table} WHERE id = 2")  # its snapshot predates the first's write
            for cur in (first, second):
                current = one(cur, f"SELECT version FROM {table} WHERE id = 1{read}")
                cur.execute(f"UPDATE {table} SET version = %s WHERE id = 1", (current + 1,))
                cur.connection.commit()
                assigned.append(current + 1)
        assert assigned == expected, read


def test_rowcount_counts_matched_rows_through_sqlalchemy(server: LocalMariaDB, table: str) -> None:
    """SQLAlchemy's MySQL dialects connect with CLIENT_FOUND_ROWS: an UPDATE that changes nothing still counts the
    rows its WHERE matched (the seed's `source_seq < :source_seq` guard is what makes it 0)."""
    engine = sa.create_engine(server.url(APP_USER, APP_PASSWORD))
    try:
        with engine.begin() as conn:
            same = conn.execute(sa.text(f"UPDATE {table} SET version = 1 WHERE id = 1")).rowcount
            guarded = conn.execute(sa.text(f"UPDATE {table} SET version = 5 WHERE id = 1 AND version > 1")).rowcount
    finally:
        engine.dispose()
    assert (same, guarded) == (1, 0)


# --- JSON and time: where MariaDB 10.11 differs from MySQL 8.0 -----------------------------------------------


@pytest.fixture
def json_table(server: LocalMariaDB) -> Iterator[str]:
    server.execute("DROP TABLE IF EXISTS sortie.doc")
    server.execute("CREATE TABLE sortie.doc (id INT PRIMARY KEY, body JSON NULL, at DATETIME(3) NULL) ENGINE=InnoDB")
    yield "doc"
    server.execute("DROP TABLE IF EXISTS sortie.doc")


def test_json_is_longtext_with_a_validity_check(server: LocalMariaDB, json_table: str) -> None:
    with session(server) as cur:
        cur.execute(f"SHOW CREATE TABLE {json_table}")
        ddl = cur.fetchone()[1].lower()
        assert "longtext" in ddl and "check (json_valid(`body`))" in ddl
        with pytest.raises(pymysql.err.OperationalError) as refused:
            cur.execute(f"INSERT INTO {json_table} (id, body) VALUES (1, 'not json')")
        assert refused.value.args[0] == ER_CONSTRAINT_FAILED


@pytest.mark.parametrize("statement", [
    "INSERT INTO doc (id, body) VALUES (1, CAST('{\"a\": 1}' AS JSON))",
    "SELECT body->'$.a' FROM doc",
    "SELECT body->>'$.a' FROM doc",
])
def test_mysql_json_syntax_that_mariadb_does_not_parse(server: LocalMariaDB, json_table: str, statement: str) -> None:
    with session(server) as cur, pytest.raises(pymysql.err.ProgrammingError) as refused:
        cur.execute(statement)
    assert refused.value.args[0] == ER_PARSE_ERROR


def test_json_text_is_stored_verbatim_and_a_duplicate_key_reads_as_its_first(server: LocalMariaDB,
                                                                            json_table: str) -> None:
    """MySQL 8.0 normalises a JSON value on insert (sorted keys, the LAST duplicate wins); MariaDB keeps the text
    as sent, and JSON_EXTRACT finds the FIRST duplicate. Equality of the column is textual: compare with
    JSON_EQUALS, or hash a canonical form computed by the application."""
    sent = '{"b": 1, "a": 2, "a": 3}'
    with session(server) as cur:
        cur.execute(f"INSERT INTO {json_table} (id, body) VALUES (1, %s)", (sent,))
        assert one(cur, f"SELECT body FROM {json_table} WHERE id = 1") == sent
        assert one(cur, f"SELECT JSON_EXTRACT(body, '$.a') FROM {json_table} WHERE id = 1") == "2"
        assert one(cur, f"SELECT body = %s FROM {json_table} WHERE id = 1", ('{"a": 3, "b": 1}',)) == 0
        assert one(cur, "SELECT JSON_EQUALS(%s, %s)", ('{"a": 1, "b": [1, 2]}', '{"b":[1,2],"a":1}')) == 1


def test_sqlalchemys_json_type_round_trips(server: LocalMariaDB, json_table: str) -> None:
    doc = sa.Table(json_table, sa.MetaData(), sa.Column("id", sa.Integer, primary_key=True),
                   sa.Column("body", sa.JSON), sa.Column("at", sa.DateTime))
    value = {"schema": "document.parse.progress.v1", "value": {"currentPage": 18, "note": "合同"}}
    engine = sa.create_engine(server.url(APP_USER, APP_PASSWORD))
    try:
        with engine.begin() as conn:
            conn.execute(doc.insert().values(id=1, body=value))
            assert conn.execute(sa.select(doc.c.body)).scalar_one() == value
    finally:
        engine.dispose()


def test_fractional_seconds_are_truncated_not_rounded(server: LocalMariaDB, json_table: str) -> None:
    """MySQL 8.0 rounds a value with more fractional digits than the column keeps (unless sql_mode has
    TIME_TRUNCATE_FRACTIONAL); MariaDB truncates. UTC_TIMESTAMP(3) itself has the column's precision."""
    with session(server) as cur:
        cur.execute(f"INSERT INTO {json_table} (id, at) VALUES (1, '2026-01-01 00:00:00.9996')")
        assert one(cur, f"SELECT at FROM {json_table} WHERE id = 1") == dt.datetime(2026, 1, 1, 0, 0, 0, 999000)
        assert one(cur, "SELECT UTC_TIMESTAMP(3)").microsecond % 1000 == 0


# --- lifecycle -------------------------------------------------------------------------------------------------


def test_a_restart_keeps_the_data_and_the_port_and_leaves_no_process(server: LocalMariaDB, table: str) -> None:
    port, pid = server.port, server.pid
    assert pid is not None
    server.stop()
    assert not _alive(pid)
    assert "Shutdown complete" in server.server_log(5)  # SIGTERM is a clean shutdown, not a crash
    server.start()
    assert server.port == port and server.pid != pid
    with session(server) as cur:
        assert one(cur, f"SELECT COUNT(*) FROM {table}") == 6


def test_bad_input_is_refused_before_any_sql(server: LocalMariaDB) -> None:
    with pytest.raises(MariaDBError):
        server.create_app_user("x", "y", database="bad`name")
    with pytest.raises(MariaDBError):
        server.create_app_user("x", "y", privileges=["SELECT; DROP DATABASE sortie"])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
