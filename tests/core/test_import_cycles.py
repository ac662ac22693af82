"""No import cycles between the project's modules. The layers contract of tests/core/test_import_layers.py orders
the packages; this orders the modules inside them: a cycle (a imports b, b imports a, directly or around a longer
loop) fails with each of its imports, file line and text. grimp (the graph import-linter builds) sees imports
inside functions too, so a lazy import does not hide a cycle; imports under `if TYPE_CHECKING:` are left out (they
never run). The fix is to move what both need down into a module that neither imports from."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]


def _packages() -> list[str]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]["root_packages"]


def cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph.find_modules_directly_imported_by(target)))))
                elif target in on_stack:
                    low[module] = min(low[module], index[target])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[module])
            if low[module] == index[module]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == module:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _describe(graph: grimp.ImportGraph, component: list[str]) -> str:
    lines = [" <-> ".join(component)]
    for importer in component:
        for imported in component:
            for detail in graph.get_import_details(importer=importer, imported=imported):
                lines.append(f"    {importer} -> {imported} (line {detail['line_number']}: "
                             f"{detail['line_contents']})")
    return "\n".join(lines)


def test_no_module_imports_itself_around_a_loop() -> None:
    sys.path.insert(0, str(ROOT))  # this checkout's packages, not another one installed in editable mode
    try:
        graph = grimp.build_graph(*_packages(), exclude_type_checking_imports=True, cache_dir=None)
    finally:
        sys.path.remove(str(ROOT))
    found = cycles(graph)
    assert not found, f"{len(found)} import cycle(s):\n" + "\n".join(_describe(graph, c) for c in found)


def test_a_cycle_is_found() -> None:
    graph = grimp.ImportGraph()
    for module in ("p", "p.a", "p.b", "p.c", "p.d"):
        graph.add_module(module)
    graph.add_import(importer="p.a", imported="p.b")
    graph.add_import(importer="p.b", imported="p.c")
    graph.add_import(importer="p.c", imported="p.a")
    graph.add_import(importer="p.c", imported="p.d")
    assert cycles(graph) == [["p.a", "p.b", "p.c"]]
