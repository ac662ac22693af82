"""cosmic-ray's side of scripts/mutation.sh (run with the mutation venv's Python: it reads and writes sessions through
cosmic-ray's own WorkDB). Two commands:

  sample OUT --sample N --seed S --workers W ...   from OUT/session.sqlite (every mutant, the excluded operators
      already skipped), a deterministic sample of N mutants per module (all where a module has fewer), dealt
      round-robin to W worker sessions OUT/worker-K/session.sqlite: each runs only its share (the rest is marked
      skipped in it), in its own copy of the tree, so W local distributors run side by side
  export OUT                                         the sampled mutants' outcomes, merged from the worker sessions,
      to OUT/results.json (scripts/mutation_table.py makes the table from it)
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
from collections import defaultdict
from pathlib import Path

from cosmic_ray.work_db import WorkDB, use_db
from cosmic_ray.work_item import TestOutcome, WorkerOutcome, WorkResult

SKIP = WorkResult(worker_outcome=WorkerOutcome.SKIPPED)


def mutant_key(item) -> tuple[str, str, int]:
    """A mutant's identity across sessions (cosmic-ray's job ids are random per init): module, operator, occurrence."""
    m = item.mutations[0]
    return str(m.module_path), m.operator_name, m.occurrence


def candidates(session: Path) -> dict[str, list]:
    """Per module, its mutants that the operator filter kept, in a stable order."""
    per_module: dict[str, list] = defaultdict(list)
    with use_db(str(session), WorkDB.Mode.open) as db:
        skipped = {job for job, r in db.results if r.worker_outcome == WorkerOutcome.SKIPPED}
        for item in db.work_items:
            if item.job_id not in skipped:
                per_module[mutant_key(item)[0]].append(item)
    return {m: sorted(items, key=mutant_key) for m, items in per_module.items()}


def sample(args: argparse.Namespace) -> int:
    out = Path(args.out)
    modules = json.loads((out / "modules.json").read_text())
    kept = candidates(out / "session.sqlite")
    chosen = []
    for module in modules["mutate"]:
        items = kept.get(module, [])
        # Seeded by module name, not by position: adding a module does not reshuffle the others' samples.
        picked = random.Random(f"{args.seed}:{module}").sample(items, min(args.sample, len(items)))
        chosen += sorted(picked, key=mutant_key)
    shares = [chosen[k::args.workers] for k in range(args.workers)]
    every = {item.job_id for items in kept.values() for item in items}
    for k, share in enumerate(shares):
        worker = out / f"worker-{k}"
        worker.mkdir(exist_ok=True)
        shutil.copyfile(out / "session.sqlite", worker / "session.sqlite")
        with use_db(str(worker / "session.sqlite"), WorkDB.Mode.open) as db:
            db.set_multiple_results(sorted(every - {i.job_id for i in share}), SKIP)
    meta = {"system": modules["system"], "sample": args.sample, "seed": args.seed, "workers": args.workers,
            "timeout_s": args.timeout, "commit": args.commit, "date": args.date, "command": args.command,
            "modules_asked": args.modules_asked}
    plan = {"meta": meta, "candidates": {m: len(kept.get(m, [])) for m in modules["mutate"]},
            "sampled": [list(mutant_key(i)) for i in chosen]}
    (out / "plan.json").write_text(json.dumps(plan, indent=1) + "\n")
    print(f"{len(chosen)} mutants sampled from {sum(plan['candidates'].values())} in {len(modules['mutate'])} "
          f"module(s), over {args.workers} worker(s)")
    return 0


def outcome(result: WorkResult | None) -> str:
    if result is None:
        return "pending"
    if result.worker_outcome != WorkerOutcome.NORMAL:
        return f"error ({result.worker_outcome.value})"
    if result.test_outcome == TestOutcome.KILLED:
        return "timeout" if result.output == "timeout" else "killed"  # cosmic-ray's testing.run_tests' mark
    if result.test_outcome == TestOutcome.SURVIVED:
        return "survived"
    return "error (incompetent)"


def export(args: argparse.Namespace) -> int:
    out = Path(args.out)
    plan = json.loads((out / "plan.json").read_text())
    found: dict[tuple, tuple] = {}
    for session in sorted(out.glob("worker-*/session.sqlite")):
        with use_db(str(session), WorkDB.Mode.open) as db:
            results = {job: r for job, r in db.results if r.worker_outcome != WorkerOutcome.SKIPPED}
            for item in db.work_items:
                if item.job_id in results:
                    found[mutant_key(item)] = (item, results[item.job_id])
    mutants = []
    with use_db(str(out / "session.sqlite"), WorkDB.Mode.open) as db:
        by_key = {mutant_key(item): item for item in db.work_items}
    for key in map(tuple, plan["sampled"]):
        item, result = found.get(key, (by_key[key], None))
        mutants.append({"module": key[0], "operator": key[1], "occurrence": key[2],
                        "line": item.mutations[0].start_pos[0], "outcome": outcome(result),
                        "diff": (result.diff if result else None) or ""})
    meta = plan["meta"] | {"exec_seconds": args.exec_seconds}
    (out / "results.json").write_text(json.dumps({"meta": meta, "candidates": plan["candidates"],
                                                  "mutants": mutants}, indent=1) + "\n")
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command_name", required=True)
    s = commands.add_parser("sample")
    s.add_argument("out")
    s.add_argument("--sample", type=int, required=True)
    s.add_argument("--seed", type=int, required=True)
    s.add_argument("--workers", type=int, required=True)
    s.add_argument("--timeout", type=float, required=True)
    s.add_argument("--commit", required=True)
    s.add_argument("--date", required=True)
    s.add_argument("--command", required=True)
    s.add_argument("--modules-asked", action="store_true")
    s.set_defaults(run=sample)
    e = commands.add_parser("export")
    e.add_argument("out")
    e.add_argument("--exec-seconds", type=float, default=None)
    e.set_defaults(run=export)
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
