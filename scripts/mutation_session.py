"""cosmic-ray's side of scripts/mutation.sh (run with the mutation venv's Python: it reads and writes the session
through cosmic-ray's own WorkDB and runs each mutant with cosmic-ray's mutate_and_test). Three commands:

  sample OUT --sample N --seed S ...   from OUT/session.sqlite (every mutant, the excluded operators already
      skipped), a deterministic sample of N mutants per module (all where a module has fewer): the others are
      marked skipped, so the session's pending work is the sample; OUT/plan.json keeps the counts and the sample
  run OUT --workers W   the pending mutants, W at a time, each by its own judge (OUT/judges.json, made by
      scripts/mutation_coverage.py: the scenarios that execute its line, fastest first, and a module's extra
      judge; {worker} in its command is OUT/worker-K): each worker owns a copy of the tree (OUT/worker-K/tree)
      and takes the next mutant when it is free (cosmic-ray mutates files in place, so one copy per worker; its
      local distributor runs one mutant at a time, and a split of the sample between W sessions leaves a worker
      idle while another has the survivors). A mutant no judge reaches is recorded as a survivor without a run
      ("not reached"). Each result is stored as it comes: an interrupted run resumes where it stopped
  rejudge OUT --commit C --date D     the session's survivors (and not reached) made pending again, to be judged by
      the harness of commit C (scripts/mutation.sh --rejudge: the reference is unchanged, the checkers grew)
  export OUT                           the sampled mutants' outcomes to OUT/results.json (scripts/mutation_table.py
      makes the table from it)
"""

from __future__ import annotations

import argparse
import json
import queue
import random
import sys
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

import attrs
from cosmic_ray.mutating import mutate_and_test
from cosmic_ray.work_db import WorkDB, WorkResultStorage, use_db
from cosmic_ray.work_item import TestOutcome, WorkerOutcome, WorkResult
from mutation_table import equivalence  # scripts/ (this script's folder) is first on the path

NOT_SAMPLED = WorkResult(worker_outcome=WorkerOutcome.SKIPPED, output="not sampled")
NOT_REACHED = "not reached"  # a survivor's output when no judge executes its line: it was never run
TRIAGED = "triaged equivalent, not run"  # a survivor's output under --trust-triage (mutation.yaml's equivalents)


def mutant_key(item) -> tuple[str, str, int]:
    """A mutant's identity (cosmic-ray's job ids are random per init): module, operator, occurrence."""
    m = item.mutations[0]
    return str(m.module_path), m.operator_name, m.occurrence


def candidates(db: WorkDB) -> dict[str, list]:
    """Per module, its mutants that the operator filter kept, in a stable order."""
    per_module: dict[str, list] = defaultdict(list)
    skipped = {job for job, r in db.results if r.worker_outcome == WorkerOutcome.SKIPPED}
    for item in db.work_items:
        if item.job_id not in skipped:
            per_module[mutant_key(item)[0]].append(item)
    return {m: sorted(items, key=mutant_key) for m, items in per_module.items()}


def sample(args: argparse.Namespace) -> int:
    out = Path(args.out)
    modules = json.loads((out / "modules.json").read_text())
    with use_db(str(out / "session.sqlite"), WorkDB.Mode.open) as db:
        kept = candidates(db)
        chosen = []
        for module in modules["mutate"]:
            items = kept.get(module, [])
            # Seeded by module name, not by position: adding a module does not reshuffle the others' samples.
            picked = random.Random(f"{args.seed}:{module}").sample(items, min(args.sample, len(items)))
            chosen += sorted(picked, key=mutant_key)
        every = {item.job_id for items in kept.values() for item in items}
        db.set_multiple_results(sorted(every - {i.job_id for i in chosen}), NOT_SAMPLED)
    meta = {"system": modules["system"], "sample": args.sample, "seed": args.seed, "workers": args.workers,
            "timeout_s": args.timeout, "commit": args.commit, "date": args.date, "command": args.command,
            "modules_asked": args.modules_asked}
    plan = {"meta": meta, "candidates": {m: len(kept.get(m, [])) for m in modules["mutate"]},
            "sampled": [[*mutant_key(i), i.mutations[0].start_pos[0]] for i in chosen]}
    (out / "plan.json").write_text(json.dumps(plan, indent=1) + "\n")
    print(f"{len(chosen)} mutants sampled from {sum(plan['candidates'].values())} in {len(modules['mutate'])} "
          f"module(s)")
    return 0


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    judges = json.loads((out / "judges.json").read_text())
    free: queue.Queue[Path] = queue.Queue()
    for k in range(args.workers):
        free.put(out / f"worker-{k}")

    # --trust-triage: a mutant systems/NAME/mutation.yaml already records as equivalent is not judged again (a rerun
    # on a loaded machine: each costs a whole catalogue); the table counts it equivalent, but cannot see the triage
    # go stale (a judge grown to kill it), which a run without the flag does.
    triaged = json.loads((out / "triaged.json").read_text()) if args.trust_triage else []

    def judge(item) -> tuple[WorkResult, float]:
        chosen = judges[":".join(map(str, mutant_key(item)))]
        worker = free.get()
        try:  # the same mutant, in this worker's own copy of the tree
            mutation = attrs.evolve(item.mutations[0], module_path=worker / "tree" / item.mutations[0].module_path)
            began = time.monotonic()
            if chosen["command"] is None:  # `true` only to have cosmic-ray make (and undo) the mutant and its diff
                return attrs.evolve(mutate_and_test([mutation], "true", 10), output=NOT_REACHED), 0.0
            if triaged:
                made = mutate_and_test([mutation], "true", 10)
                module, operator, occurrence = mutant_key(item)
                if equivalence({"module": module, "operator": operator, "occurrence": occurrence,
                                "diff": made.diff or ""}, triaged):
                    return attrs.evolve(made, output=TRIAGED), 0.0
            result = mutate_and_test([mutation], chosen["command"].format(worker=worker), chosen["timeout_s"])
            return result, time.monotonic() - began
        finally:
            free.put(worker)

    with use_db(str(out / "session.sqlite"), WorkDB.Mode.open) as db:
        def order(item) -> tuple:  # the modules (or folders) asked --first, in that order, then the others
            module = mutant_key(item)[0]
            first = [k for k, where in enumerate(args.first) if module == where or module.startswith(where)]
            return (first[0] if first else len(args.first), *mutant_key(item))

        pending = sorted(db.pending_work_items, key=order)
        print(f"{len(pending)} mutant(s) to run on {args.workers} worker(s)", flush=True)
        with ThreadPoolExecutor(args.workers) as pool:
            futures = {pool.submit(judge, item): item for item in pending}
            for done, future in enumerate(as_completed(futures), 1):
                item = futures[future]
                result, seconds = future.result()
                db.set_result(item.job_id, result)  # only this thread writes the session
                module, operator, occurrence = mutant_key(item)
                with (out / "seconds.jsonl").open("a") as f:
                    f.write(json.dumps([module, operator, occurrence, round(seconds, 1)]) + "\n")
                print(f"{done}/{len(pending)} {module} {operator} #{occurrence}: {outcome(result)} "
                      f"({seconds:.0f} s)", flush=True)
    return 0


def rejudge(args: argparse.Namespace) -> int:
    out = Path(args.out)
    plan = json.loads((out / "plan.json").read_text())
    with use_db(str(out / "session.sqlite"), WorkDB.Mode.open) as db:
        again = [job for job, r in db.results if outcome(r) in ("survived", NOT_REACHED)]
        with db._session_maker.begin() as session:  # WorkDB has no public way to forget one result
            session.query(WorkResultStorage).filter(WorkResultStorage.job_id.in_(again)).delete()
    meta = plan["meta"]
    meta["rejudged"] = [*meta.get("rejudged", []), {"commit": args.commit, "date": args.date, "survivors": len(again)}]
    (out / "plan.json").write_text(json.dumps(plan, indent=1) + "\n")
    print(f"{len(again)} survivor(s) to judge again at {args.commit}")
    return 0


def outcome(result: WorkResult | None) -> str:
    if result is None:
        return "pending"
    if result.worker_outcome != WorkerOutcome.NORMAL:
        return f"error ({result.worker_outcome.value})"
    if result.test_outcome == TestOutcome.KILLED:
        return "timeout" if result.output == "timeout" else "killed"  # cosmic-ray's testing.run_tests' mark
    if result.test_outcome == TestOutcome.SURVIVED:
        return NOT_REACHED if result.output == NOT_REACHED else "survived"
    return "error (incompetent)"


def export(args: argparse.Namespace) -> int:
    out = Path(args.out)
    plan = json.loads((out / "plan.json").read_text())
    with use_db(str(out / "session.sqlite"), WorkDB.Mode.open) as db:
        results = dict(db.results)
        by_key = {mutant_key(item): item for item in db.work_items}
    seconds_file = out / "seconds.jsonl"
    seconds = {tuple(r[:3]): r[3] for r in map(json.loads, seconds_file.read_text().splitlines())} \
        if seconds_file.exists() else {}
    mutants = []
    judges = json.loads((out / "judges.json").read_text()) if (out / "judges.json").exists() else {}
    for sampled in plan["sampled"]:
        key = tuple(sampled[:3])
        item = by_key[key]
        result = results.get(item.job_id)
        judge = judges.get(":".join(map(str, key)), {})
        mutants.append({"module": key[0], "operator": key[1], "occurrence": key[2],
                        "line": item.mutations[0].start_pos[0], "outcome": outcome(result), "seconds": seconds.get(key),
                        "reach": judge.get("reach"), "judged_by": len(judge.get("scenarios", [])),
                        "diff": (result.diff if result else None) or "",
                        "trusted": bool(result and result.output == TRIAGED)})
    meta = plan["meta"] | {"exec_seconds": args.exec_seconds, "coverage_seconds": args.coverage_seconds}
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
    r = commands.add_parser("run")
    r.add_argument("out")
    r.add_argument("--workers", type=int, required=True)
    r.add_argument("--first", action="append", default=[], help="a module or folder/ whose mutants run first")
    r.add_argument("--trust-triage", action="store_true", help="OUT/triaged.json's equivalents are not judged")
    r.set_defaults(run=run)
    j = commands.add_parser("rejudge")
    j.add_argument("out")
    j.add_argument("--commit", required=True)
    j.add_argument("--date", required=True)
    j.set_defaults(run=rejudge)
    e = commands.add_parser("export")
    e.add_argument("out")
    e.add_argument("--exec-seconds", type=float, default=None)
    e.add_argument("--coverage-seconds", type=float, default=None)
    e.set_defaults(run=export)
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
