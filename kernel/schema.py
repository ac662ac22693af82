"""Schema conventions every system's models share: constraint names, a portable big primary key, timestamps."""

from __future__ import annotations

from sqlalchemy import BigInteger, DateTime, Integer

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}
# BIGINT identity on PostgreSQL, INTEGER PRIMARY KEY (rowid) on SQLite.
BigId = BigInteger().with_variant(Integer(), "sqlite")
TZ = DateTime(timezone=True)
