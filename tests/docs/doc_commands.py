"""The command lines the user docs (README.md, docs/*.md) print, for the tests that hold them to
the code: each line of a fenced block (continuations joined, the trailing comment dropped) and
each inline code span, split into its commands at ``&&``, ``||``, ``;``, ``|``, ``&`` and
subshell parentheses, with the command inside ``bash -c '...'`` read too.

A command after ``cd /tmp/...`` runs in a checkout of another commit (the benchmarks' "before"
runs), so its scripts, flags and paths are that commit's: it is marked ``elsewhere`` and the
tests leave it alone. A plain ``cd`` marks the rest of its block; one in a subshell, ``(cd ... &&
...)``, the rest of its line.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^[ \t]*```[^\n]*\n(.*?)^[ \t]*```[ \t]*$", re.M | re.S)  # list items indent theirs
INLINE = re.compile(r"(?<!`)`([^`]+)`(?!`)")
COMMENT = re.compile(r"(?:^|\s)#(\s.*)?$")
BASH_C = re.compile(r"\b(?:bash|sh) -c (['\"])(.*)\1\s*$")
OTHER_CHECKOUT = re.compile(r"^cd\s+/tmp/")
LAUNCHERS = (r"(?:\w+=\S*\s+|flock\s+\S+\s+|env\s+|\S*time\s+(?:-v\s+)?|nice\s+(?:-n\s*\d+\s+)?"
             r"|timeout\s+\S+\s+)*")  # what may come before the program: VAR=..., flock LOCK, env, time -v
RSTAR2 = re.compile(LAUNCHERS + r"(?:\S*bin/)?(?:python3? -m )?rstar2(?=\s|$)")
SCRIPT = re.compile(r"(?:^|(?<=\s))(benchmarks/)?(\w+\.py)(?=\s|$)")
PLACEHOLDER = re.compile(r"<([^<>`]*)>")


@dataclass(frozen=True)
class Command:
    page: Path
    line: int
    text: str
    fenced: bool
    elsewhere: bool = False

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def commands(pages: list[Path] = PAGES) -> list[Command]:
    """Every command of every page, fenced ones first, in page order."""
    return [command for page in pages for command in page_commands(page)]


def page_commands(page: Path) -> list[Command]:
    """The commands of one page: its fenced blocks' lines, then its inline code spans."""
    text = page.read_text()
    found = []
    for block in FENCE.finditer(text):
        number = text.count("\n", 0, block.start(1))
        elsewhere = False  # a plain `cd /tmp/...` in the block: the rest of it runs there
        for first, line in joined_lines(block.group(1)):
            in_line = pieces(COMMENT.sub("", line).strip())
            in_subshell = any(OTHER_CHECKOUT.match(piece) and subshell for piece, subshell in in_line)
            for piece, subshell in in_line:
                elsewhere = elsewhere or bool(OTHER_CHECKOUT.match(piece) and not subshell)
                found.append(Command(page, number + first, piece, True, elsewhere or in_subshell))
    prose = FENCE.sub(lambda block: "\n" * block.group(0).count("\n"), text)
    for span in INLINE.finditer(prose):
        in_span = pieces(" ".join(span.group(1).split()))
        elsewhere = any(OTHER_CHECKOUT.match(piece) for piece, _ in in_span)
        for piece, _ in in_span:
            found.append(Command(page, prose.count("\n", 0, span.start()) + 1, piece, False, elsewhere))
    return found


def joined_lines(block: str) -> list[tuple[int, str]]:
    """The lines of a fenced block with their continuations (a trailing backslash) joined, each
    with its first line's number in the block (from 1)."""
    joined, start, current = [], 1, ""
    for number, line in enumerate(block.splitlines(), 1):
        if not current:
            start = number
        if line.rstrip().endswith("\\") and not COMMENT.search(line):
            current += line.rstrip()[:-1] + " "
            continue
        joined.append((start, current + line))
        current = ""
    if current:
        joined.append((start, current))
    return joined


def pieces(line: str) -> list[tuple[str, bool]]:
    """The commands of one shell line, each with whether it runs in a subshell; quotes and
    ``$(...)`` are kept whole, the command of ``bash -c '...'`` is read as a line of its own."""
    found, current, depth, quote, i = [], "", 0, "", 0
    subshell = 0

    def cut() -> None:
        nonlocal current
        if current.strip():
            found.append((current.strip(), subshell > 0))
        current = ""

    while i < len(line):
        char = line[i]
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif line.startswith("$(", i):
            depth += 1
            current += "$("
            i += 2
            continue
        elif char == "(" and depth:
            depth += 1
        elif char == ")" and depth:
            depth -= 1
        elif char == "(" and not current.strip():
            cut()
            subshell += 1
            i += 1
            continue
        elif char == ")" and subshell:
            cut()
            subshell -= 1
            i += 1
            continue
        elif char in ";|&":
            if line.startswith("&>", i) or (char == "&" and current.endswith(">")):
                current += char  # a redirection, not a separator
                i += 1
                continue
            cut()
            i += 2 if line[i:i + 2] in ("&&", "||") else 1
            continue
        current += char
        i += 1
    cut()
    expanded = []
    for piece, subshell_piece in found:
        inner = BASH_C.search(piece)
        expanded += pieces(inner.group(2)) if inner else [(piece, subshell_piece)]
    return expanded


def words(text: str) -> list[str]:
    """The words of a command as a shell would pass them, placeholders such as ``<demo run>``
    kept as one word; ``$(...)`` expanded by bash itself (``--workers $((2 * $(nproc)))``)."""
    text = PLACEHOLDER.sub(lambda match: "<" + match.group(1).replace(" ", "_") + ">", text)
    if "$" not in text:
        return shlex.split(text)
    out = subprocess.run(["bash", "-c", f"printf '%s\\0' {text}"], capture_output=True, text=True, check=True)
    return out.stdout.split("\0")[:-1]


def rstar2_args(text: str) -> str | None:
    """What follows the ``rstar2`` program in a command (``.venv/bin/rstar2``, ``python -m
    rstar2``, after ``flock``, ``env``, ``time``), or None when it runs no rstar2."""
    match = RSTAR2.match(text)
    return text[match.end():].strip() if match else None


def script_args(text: str) -> tuple[str, str] | None:
    """``(script name, what follows it)`` for a command that runs ``benchmarks/NAME.py`` (or a
    bare ``NAME.py`` that is one of the benchmarks), else None."""
    for match in SCRIPT.finditer(text):
        prefix, name = match.groups()
        if prefix or (REPO / "benchmarks" / name).is_file():
            return name, text[match.end():].strip()
    return None
