"""reference.copilot.db.insert_together on a real PostgreSQL: one statement writes a row into each table (a later row
may
reference an earlier one by foreign key), with the tables' column defaults, and a failure anywhere writes nothing.
SQLite gets the same rows from one statement per row."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import (
    JSON,
    Column,
    Engine,
    ForeignKey,
    Integer,
    MetaData,
    String,
    Table,
    Uuid,
    create_engine,
    event,
    func,
    select,
    text,
)
from sqlalchemy.exc import DBAPIError, IntegrityError

from reference.copilot.db import insert_together

meta = MetaData()
parent = Table("it_parent", meta, Column("id", Uuid, primary_key=True), Column("key", String(40), unique=True),
               Column("doc", JSON), Column("tries", Integer, nullable=False, default=0))
child = Table("it_child", meta, Column("id", Integer, primary_key=True, autoincrement=True),
              Column("parent_id", Uuid, ForeignKey("it_parent.id"), nullable=False), Column("note", String(40)))
last = Table("it_last", meta, Column("id", Uuid, primary_key=True), Column("parent_id", Uuid, nullable=False))


def _rows(key: str) -> tuple[uuid.UUID, list[tuple[Table, dict[str, Any]]]]:
    pid = uuid.uuid4()
    return pid, [(parent, {"id": pid, "key": key, "doc": {"a": [1, 2]}}), (child, {"parent_id": pid, "note": "n"}),
                 (last, {"id": uuid.uuid4(), "parent_id": pid})]


def _counts(engine: Engine) -> tuple[int, int, int]:
    with engine.connect() as conn:
        return tuple(conn.execute(select(func.count()).select_from(t)).scalar_one()
                     for t in (parent, child, last))  # type: ignore[return-value]


def _statements(engine: Engine) -> list[str]:
    seen: list[str] = []
    event.listen(engine, "before_cursor_execute", lambda _c, _cur, statement, *_a: seen.append(statement))
    return seen


@pytest.fixture(params=["postgresql", "sqlite"])
def engine(request: pytest.FixtureRequest, migrated_database: Callable[[str], Any],
           engines: Callable[[str], Engine], tmp_path: Any) -> Engine:
    if request.param == "sqlite":
        made = create_engine(f"sqlite:///{tmp_path / 'it.db'}")
        meta.create_all(made)
        return made
    made = engines(migrated_database("insert_together").owner_url)
    with made.begin() as conn:
        meta.drop_all(conn)
        meta.create_all(conn)
        conn.execute(text("CREATE OR REPLACE FUNCTION it_refuse() RETURNS trigger AS $$ BEGIN "
                          "IF NEW.parent_id IS NOT NULL AND current_setting('it.refuse', true) = 'on' THEN "
                          "RAISE EXCEPTION 'refused by trigger'; END IF; RETURN NEW; END $$ LANGUAGE plpgsql"))
        conn.execute(text("CREATE TRIGGER it_refuse BEFORE INSERT ON it_last FOR EACH ROW "
                          "EXECUTE FUNCTION it_refuse()"))
    return made


def test_every_row_is_written_with_its_defaults_in_one_statement_on_postgresql(engine: Engine) -> None:
    pid, rows = _rows("k1")
    seen = _statements(engine)
    with engine.begin() as conn:
        insert_together(conn, rows)
    writes = [s for s in seen if "INSERT" in s.upper()]
    assert len(writes) == (1 if engine.dialect.name == "postgresql" else 3)
    assert _counts(engine) == (1, 1, 1)
    with engine.connect() as conn:
        got = conn.execute(select(parent.c.doc, parent.c.tries).where(parent.c.id == pid)).one()
    assert got == ({"a": [1, 2]}, 0)  # JSON bound by its column type; the column's Python default applied


def test_a_unique_key_violation_in_the_first_row_writes_none_of_them(engine: Engine) -> None:
    with engine.begin() as conn:
        insert_together(conn, _rows("same")[1])
    with pytest.raises(IntegrityError), engine.begin() as conn:
        insert_together(conn, _rows("same")[1])
    assert _counts(engine) == (1, 1, 1)


@pytest.mark.parametrize("engine", ["postgresql"], indirect=True)  # the refusing trigger is PL/pgSQL
def test_a_failure_in_the_last_row_writes_none_of_them(engine: Engine) -> None:
    with pytest.raises(DBAPIError, match="refused by trigger"), engine.begin() as conn:
        conn.execute(text("SET LOCAL it.refuse = 'on'"))
        insert_together(conn, _rows("k2")[1])
    assert _counts(engine) == (0, 0, 0)


@pytest.mark.parametrize("engine", ["postgresql"], indirect=True)
def test_the_combined_statement_counts_as_a_write_for_before_write_crash_points(engine: Engine) -> None:
    from kernel.runtime import writes

    verdicts: list[bool] = []
    event.listen(engine, "before_cursor_execute",
                 lambda _c, _cur, statement, _p, context, _m: verdicts.append(writes(statement, context)))
    with engine.begin() as conn:
        conn.execute(select(parent.c.id).where(parent.c.key == "nobody"))  # a read: not a write
        insert_together(conn, _rows("k3")[1])  # WITH r0 AS (INSERT ...) ... INSERT: a write
    assert verdicts == [False, True]
