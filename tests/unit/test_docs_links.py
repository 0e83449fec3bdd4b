"""The README and the pages in docs/ link only to what is in the repository, and each link
lands: a file that exists, and a heading that exists in it (GitHub's anchors)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", ROOT / "CHANGELOG.md", *(ROOT / "docs").glob("*.md")])
LINK = re.compile(r"\[([^\]]*)\]\(([^)\s]+)\)")


def anchors(page: Path) -> set[str]:
    """GitHub's anchors of the page's headings (outside code blocks)."""
    found, in_code = set(), False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        heading = re.match(r"^#{1,6} (.*)$", line)
        if heading and not in_code:
            words = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower())
            found.add(words.replace(" ", "-"))
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_lands_inside_the_repository(page: Path) -> None:
    broken = []
    for match in LINK.finditer(page.read_text()):
        target = match.group(2)
        if re.match(r"^[a-z]+://", target):
            continue
        path, _, anchor = target.partition("#")
        landing = page if not path else (page.parent / path).resolve()
        if ROOT not in landing.parents and landing != ROOT:
            broken.append(f"{target}: outside the repository")
        elif not landing.exists():
            broken.append(f"{target}: no such file")
        elif anchor and landing.suffix == ".md" and anchor not in anchors(landing):
            broken.append(f"{target}: no such heading")
    assert broken == []
