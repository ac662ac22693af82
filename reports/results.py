"""summary.json and JUnit XML from scenario results."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from scenarios.verdicts import VIOLATED


def write_summary(out: Path, results: list[Any], meta: dict[str, Any]) -> Path:
    path = out / "summary.json"
    body = {**meta, "passed": all(r.passed for r in results), "scenarios": [r.summary() for r in results]}
    path.write_text(json.dumps(body, indent=2, sort_keys=False, default=str) + "\n")
    return path


def write_junit(out: Path, results: list[Any], suite: str) -> Path:
    failures = sum(1 for r in results if not r.passed)
    root = ET.Element("testsuites", name="sortie", tests=str(len(results)), failures=str(failures))
    ts = ET.SubElement(root, "testsuite", name=suite, tests=str(len(results)), failures=str(failures),
                       time=f"{sum(r.wall_s for r in results):.3f}")
    for r in results:
        case = ET.SubElement(ts, "testcase", classname=f"sortie.{suite}", name=f"{r.id} {r.slug}",
                             time=f"{r.wall_s:.3f}")
        if not r.passed:
            lines = []
            if r.exercised is not None:
                lines.append(f"fault not exercised: {r.exercised}")
            for v in r.verdicts:
                if v.status == VIOLATED:
                    lines.append(f"{v.invariant} violated ({len(v.violations)}): {v.title}")
                    lines += [f"  task {x.task_id}: {x.message} ops={x.ops}" for x in v.violations[:10]]
            ET.SubElement(case, "failure", message=lines[0] if lines else "failed").text = "\n".join(lines)
        props = ET.SubElement(case, "properties")
        ET.SubElement(props, "property", name="seed", value=str(r.seed))
        ET.SubElement(props, "property", name="history_digest", value=r.history_digest)
        for v in r.verdicts:
            ET.SubElement(props, "property", name=v.invariant, value=v.status)
    path = out / "junit.xml"
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)
    return path
