"""The docs a newcomer reads point at what exists (docs/architecture.md): every Markdown link and every backquoted
repository path in README.md and docs/ names a file or directory of the repository, the README stays a first
screen and a tour (at most 200 lines), and no tracked file refers to notes outside the repository."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README_MAX_LINES = 200
# Notes that live outside the repository: named in pieces, so this file does not mention them itself.
OUTSIDE = ("DESIGN" + ".md", "STYLE" + ".md", "../" + "shared")

_FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_CODE = re.compile(r"(?<!`)`([^`\s]+)`(?!`)")
_PLACEHOLDER = re.compile(r"[<>*{}$|\[\]]|(?:^|/)[A-Z][A-Z_]*(?:/|$|\.)")  # reference/<name>/, DIR/x, *.yaml


def _tracked() -> list[str]:
    return subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True,
                          text=True).stdout.split("\0")[:-1]


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _top_level() -> set[str]:
    """The repository's top-level files and directories (what git tracks: not out/, not .venv/)."""
    return {name.split("/")[0] for name in _tracked()}


def repo_paths(text: str, top_level: set[str]) -> list[str]:
    """Backquoted tokens (outside fenced blocks) that are paths into the repository: their first part is a top-level
    file or directory of it; placeholders and globs are not paths."""
    out = []
    for token in _CODE.findall(_FENCE.sub("", text)):
        path = token.split("::")[0].rstrip(".,:;")
        path = re.sub(r":\d+$", "", path)  # file.py:12
        if _PLACEHOLDER.search(path) or path.startswith(("/", "~", "http")):
            continue
        first = path.split("/")[0]
        if first in top_level and ("/" in path or "." in first):
            out.append(path)
    return out


def links(text: str) -> list[str]:
    """Markdown link targets that are files of the repository (not URLs, not anchors on the same page)."""
    out = []
    for target in _LINK.findall(_FENCE.sub("", text)):
        if re.match(r"[a-z][a-z+.-]*:", target) or target.startswith("#"):
            continue
        out.append(target.split("#")[0])
    return out


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_links_and_paths_exist(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    top = _top_level()
    missing = [f"link {t}" for t in links(text) if not (page.parent / t).exists()]
    missing += [f"`{p}`" for p in repo_paths(text, top) if not (ROOT / p).exists()]
    assert not missing, f"{page.relative_to(ROOT)} names what does not exist: {', '.join(missing)}"


def test_readme_is_short() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines (at most {README_MAX_LINES}): move detail to docs/"


def test_no_file_refers_outside_the_repository() -> None:
    offenders = []
    for name in _tracked():
        path = ROOT / name
        if not path.is_file():
            continue  # deleted in the working tree
        data = path.read_bytes()
        if b"\0" in data:
            continue  # binary
        text = data.decode("utf-8", errors="replace")
        offenders += [f"{name}: {word}" for word in OUTSIDE if word in text]
    assert not offenders, "files refer to notes outside the repository (cite a docs/ page instead):\n" + "\n".join(
        offenders)


def test_the_checks_catch_what_they_are_for() -> None:
    top = {"docs", "systems", "README.md"}
    text = "see `docs/none.md`, `systems/<name>/`, `DIR/x.yaml`, `out/sim`, [a](docs/a.md#x), [b](https://x.org)"
    assert repo_paths(text, top) == ["docs/none.md"]
    assert links(text) == ["docs/a.md"]
    assert repo_paths("```\n`docs/in-a-fence.md`\n```", top) == []
