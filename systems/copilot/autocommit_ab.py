"""The API's reads and confirm with and without autocommit sessions (``Transact(..., autocommit=True)``), compared in
one process against one throwaway PostgreSQL, the two modes interleaved request by request (ABBA) so the host's speed
drifts equally over both: CPU and wall time per request, medians and quartiles. No Toxiproxy, no Redis: the
difference is the API's own (docs/results.md, The confirm's CPU).

    .venv/bin/python -m systems.copilot.autocommit_ab [--requests 800]
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import shutil
import statistics
import tempfile
import time
import uuid
import warnings
from pathlib import Path
from typing import Any

MODES = ("transaction", "autocommit")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m systems.copilot.autocommit_ab", description=__doc__)
    parser.add_argument("--requests", type=int, default=800, help="confirms (and then reads), half in each mode")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore", module="jwt")  # the throwaway token secret is short

    from reference.copilot.http.app import create_app
    from reference.copilot.http.auth import issue_token
    from reference.copilot.migrations import upgrade
    from reference.copilot.settings import Settings, build_runtime
    from stack.postgres import LocalPostgres, find_pg_bin
    from systems.copilot.workload import APPROVER, WorkloadSpec, load_profile, random_plan, seed_fleet

    if find_pg_bin() is None:
        raise SystemExit("PostgreSQL server binaries not installed (bash scripts/stack-env.sh installs them)")
    run_dir = Path(tempfile.mkdtemp(prefix="sortie-autocommit-ab-"))
    pg = LocalPostgres(run_dir)
    pg.start()
    try:
        pg.create_database("ab", exist_ok=True)
        url = pg.url(database="ab")
        upgrade(url)
        runtime = build_runtime(Settings(database_url=url, token_secret="ab", webhook_token="ab"))
        autocommit = runtime.autocommit_sessions
        assert autocommit is not None
        client = create_app(runtime, token_secret="ab", webhook_token="ab").test_client()
        fleet = runtime.transact(lambda tx: seed_fleet(tx, WorkloadSpec.from_profile(load_profile("1x"), 60.0)))
        rng = random.Random(1)
        approver = issue_token("ab", APPROVER, role="approver", ttl_s=3600)
        tokens: dict[str, str] = {}

        def auth(user: str) -> dict[str, str]:
            return {"Authorization": f"Bearer {tokens.setdefault(user, issue_token('ab', user, ttl_s=3600))}"}

        drafts = []
        for _ in range(args.requests):
            user, area = fleet.operators[rng.randrange(len(fleet.operators))]
            plan = dataclasses.asdict(random_plan(rng, fleet, area))
            r = client.post("/v1/drafts", json={"goal": "ab", "area_id": area, "plan": plan},
                            headers={**auth(user), "Idempotency-Key": uuid.uuid4().hex})
            d = r.get_json()
            client.post(f"/v1/drafts/{d['id']}/approvals", json={"draft_version": d["version"], "decision": "approve"},
                        headers={"Authorization": f"Bearer {approver}"})
            drafts.append((user, d["id"], d["version"]))

        cpu: dict[str, dict[str, list[float]]] = {kind: {m: [] for m in MODES} for kind in ("confirm", "read")}
        wall: dict[str, dict[str, list[float]]] = {kind: {m: [] for m in MODES} for kind in ("confirm", "read")}

        def timed(kind: str, i: int, method: str, path: str, **kw: Any) -> Any:
            mode = MODES[(i + i // 2) % 2]  # A B B A ...
            runtime.autocommit_sessions = autocommit if mode == "autocommit" else None
            c0, w0 = time.process_time(), time.perf_counter()
            answer = client.open(path, method=method, **kw)
            cpu[kind][mode].append((time.process_time() - c0) * 1e6)
            wall[kind][mode].append((time.perf_counter() - w0) * 1e6)
            return answer

        tasks = []
        for i, (user, draft_id, version) in enumerate(drafts):
            r = timed("confirm", i, "POST", f"/v1/drafts/{draft_id}/confirm", json={"draft_version": version},
                      headers={**auth(user), "Idempotency-Key": uuid.uuid4().hex})
            if r.status_code != 201:
                raise SystemExit(f"confirm answered {r.status_code}: {r.get_data(as_text=True)}")
            tasks.append((user, r.get_json()["task_id"]))
        for i, (user, task_id) in enumerate(tasks):
            r = timed("read", i, "GET", f"/v1/tasks/{task_id}", headers=auth(user))
            if r.status_code != 200:
                raise SystemExit(f"read answered {r.status_code}: {r.get_data(as_text=True)}")
    finally:
        pg.stop()
        shutil.rmtree(run_dir, ignore_errors=True)

    for kind in ("confirm", "read"):
        for label, figures in (("CPU", cpu), ("wall", wall)):
            row = []
            for mode in MODES:
                q1, median, q3 = statistics.quantiles(figures[kind][mode][10:], n=4)  # the first few warm caches
                row.append(f"{mode} {median:,.0f} us [{q1:,.0f}, {q3:,.0f}]")
            ratio = statistics.median(figures[kind]["autocommit"][10:]) / statistics.median(
                figures[kind]["transaction"][10:])
            print(f"{kind:8s} {label:5s} {' | '.join(row)} | autocommit/transaction {ratio:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
