"""The summary of a scripts/mutation.sh session: killed, survived and skipped mutants per file and operator
(DIR/summary.txt) and each survivor's diff, with its place (DIR/survivors.txt). Run with the mutation venv's
Python (it reads the session through cosmic-ray's own WorkDB)."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

from cosmic_ray.work_db import WorkDB, use_db
from cosmic_ray.work_item import TestOutcome, WorkerOutcome


def main(session: str, out: str, tree: str) -> int:
    out_dir = Path(out)
    tally: Counter[tuple[str, str]] = Counter()
    survivors: list[str] = []
    with use_db(session, WorkDB.Mode.open) as db:
        results = dict(db.results)
        for item in db.work_items:
            result = results.get(item.job_id)
            m = item.mutations[0]
            where = str(Path(m.module_path).relative_to(tree)) if str(m.module_path).startswith(tree) else str(
                m.module_path)
            if result is None:
                outcome = "pending"
            elif result.worker_outcome == WorkerOutcome.SKIPPED:
                outcome = "skipped"
            elif result.worker_outcome != WorkerOutcome.NORMAL:
                outcome = f"error ({result.worker_outcome.value})"
            else:
                outcome = {TestOutcome.SURVIVED: "survived", TestOutcome.KILLED: "killed"}.get(
                    result.test_outcome, "incompetent")  # incompetent: the mutant timed out or could not run
            tally[(where, outcome)] += 1
            if outcome == "survived":
                survivors.append(f"## {where}:{m.start_pos[0]} {m.operator_name} #{m.occurrence} "
                                 f"({item.job_id})\n{result.diff}\n")
    files = sorted({f for f, _ in tally})
    lines = []
    for f in files:
        counts = {o: n for (g, o), n in tally.items() if g == f}
        run = counts.get("killed", 0) + counts.get("survived", 0)
        rate = f"{counts.get('killed', 0) / run:.0%} killed" if run else "none run"
        lines.append(f"{f}: {run} run, {counts.get('survived', 0)} survived ({rate}); "
                     + ", ".join(f"{o} {n}" for o, n in sorted(counts.items())))
    (out_dir / "summary.txt").write_text("\n".join(lines) + "\n")
    (out_dir / "survivors.txt").write_text("\n".join(survivors))
    print("\n".join(lines))
    print(f"{len(survivors)} survivor(s): {out_dir / 'survivors.txt'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
