"""The user docs (README.md, docs/*.md) speak to users: no development history (issue numbers,
who did what when, what an assignment asked), and no link to a section that does not exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
HISTORY = re.compile(
    r"\bissues? #?\d+"  # "issue 10", "issue #13"
    r"|\bthe issue(?:'s)?\b"  # "the issue asks", "the targets"
    r"|\bhelpers?(?:'s?)?\b"  # "seven helpers ran tests"
    r"|\bthe lead(?:'s)?\b"  # "the lead re-runs"
    r"|\b(?:this|the|other|same) sessions?(?:'s?)?\b"  # "the session's GPU time"
    r"|\b(?:before|after|by|to|in) this work\b"  # "not run anywhere by this work"
    r"|\bonce\b[^.]{0,60}\blands\b"  # "once the trainer's device option lands"
    r"|\blands with this\b",
    re.I,
)
LINK = re.compile(r"\]\(([^)\s]*)#([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*$", re.M)
FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def history_in(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if HISTORY.search(line)]


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(REPO)) for p in PAGES])
def test_no_development_history(page):
    found = history_in(page.read_text())
    assert found == [], f"{page.relative_to(REPO)} tells development history; say what is, for users:\n" + "\n".join(found)


def test_the_pattern_catches_history_and_spares_plain_text():
    caught = ["Sandbox at step scale (issue 16)", "Against the issue's targets", "the lead re-runs the commands",
              "seven helpers ran tests", "other helpers' tests", "(the session's GPU time was spent)",
              "no GPU was available to this work", "the device, once the trainer's device option lands.",
              "as the issue allows", "Taken on main 49bf782 (the benchmark script lands with this section)"]
    spared = ["Attach it to an issue or a paper", "Everything lands in `runs/<name>/`",
              "0 when every sync landed", "the goal (at least 300 calls/s)", "a session of `rstar2 chat`"]
    assert [text for text in caught if not HISTORY.search(text)] == []
    assert [text for text in spared if HISTORY.search(text)] == []


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives the headings of ``page`` (lower case, punctuation dropped,
    spaces to hyphens; a repeated heading gets -1, -2 ...)."""
    seen: dict[str, int] = {}
    found = set()
    for heading in HEADING.findall(FENCE.sub("", page.read_text())):
        slug = re.sub(r"[^\w\- ]", "", heading.replace("`", "").lower()).replace(" ", "-")
        found.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
        seen[slug] = seen.get(slug, 0) + 1
    return found


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(REPO)) for p in PAGES])
def test_every_section_link_has_its_section(page):
    dead = []
    for target, anchor in LINK.findall(FENCE.sub("", page.read_text())):
        if re.match(r"[a-z]+:", target):
            continue
        linked = (page.parent / target).resolve() if target else page
        if linked.suffix == ".md" and anchor not in anchors(linked):
            dead.append(f"{target}#{anchor}")
    assert dead == [], f"{page.relative_to(REPO)} links sections that do not exist: {dead}"
