"""Each system lists its invariants once (scenarios.verdicts.Invariants): the ids its scenarios may name, the order
they are checked in, and each verdict's id and title all come from that table."""

from __future__ import annotations

import pytest

from scenarios.systems import load_system
from scenarios.verdicts import HELD, VIOLATED, Invariants, Verdict, Violation, judged, unchecked


@pytest.mark.parametrize(("system", "prefix"), [("copilot", "I"), ("jobs", "J"), ("inspection", "V"),
                                               ("statussync", "S")])
def test_a_systems_ids_come_from_its_table(system: str, prefix: str) -> None:
    """Numbered from 1 without a gap, in the table's order (an invariant is retired by marking it, not by a hole);
    every one with its own checker and a one-line title."""
    table = load_system(system).invariants
    count = len(table.ids)
    assert table.ids == tuple(f"{prefix}{n}" for n in range(1, count + 1))
    assert len({i.checker for i in table.values()}) == count  # one checker per invariant
    assert all(i.title and "\n" not in i.title for i in table.values())


def test_the_table_names_each_verdict() -> None:
    def holds(record: int) -> Verdict:
        return judged(record, [])

    def breaks(record: int) -> Verdict:
        return judged(record, [Violation("t1", "broken")])

    def cannot(record: int) -> Verdict:
        return unchecked("not on this shell")

    table = Invariants({"X1": (holds, "x holds"), "X2": (breaks, "x breaks"), "X3": (cannot, "x unjudged")})
    verdicts = table.check(3)
    assert [(v.invariant, v.title, v.status, v.checked) for v in verdicts] == [
        ("X1", "x holds", HELD, 3), ("X2", "x breaks", VIOLATED, 3), ("X3", "x unjudged", "unchecked", 0)]
    assert [v.invariant for v in table.check(3, ["X3", "X1"])] == ["X1", "X3"]  # the table's order
    assert table["X2"].doc == ""
