"""The job system's schema on PostgreSQL and its application role. The tables come from the models
(``JobBase.metadata``: the job system has no released schema to migrate yet, so ``install`` creates what is
missing, idempotently). The role (kernel.roles) may read, insert and update jobs and edges, never delete them (no
path of the seed deletes a job), and only read and append ``job_log``: 002's task_log is append-only, enforced by
the database, not by the code's discipline."""

from __future__ import annotations

from sqlalchemy import Connection

from kernel.roles import APPEND_ONLY, drop_app_role, grant_app_role
from reference.jobs.models import Job, JobBase, JobDependency, JobLog

PRIVILEGES = {
    Job.__tablename__: "SELECT, INSERT, UPDATE",
    JobDependency.__tablename__: "SELECT, INSERT, UPDATE",
    JobLog.__tablename__: APPEND_ONLY,
}


def install(conn: Connection) -> None:
    """Create the job tables that do not exist yet (as their owner; the caller commits)."""
    JobBase.metadata.create_all(conn)


def create_app_role(conn: Connection, role: str, password: str | None, schema: str = "public") -> None:
    grant_app_role(conn, role, password, PRIVILEGES, schema)


__all__ = ["PRIVILEGES", "create_app_role", "drop_app_role", "install"]
