"""Find the final answer in a model response.

Contract: `extract_answer` returns the argument of the last `\\boxed{...}` (or `\\fbox{...}`,
or the brace-less `\\boxed x`) inside the `<answer>...</answer>` block, stripped, or None when
there is none. Boxes that end the block as a list, kept apart by nothing but commas,
semicolons, "and", spaces or math delimiters (`$\\boxed{1}$, $\\boxed{2}$ and $\\boxed{3}$`), are
one multi-part answer, read as `1, 2, 3`; any other text between two boxes (`\\boxed{2}, no:
\\boxed{3}`) makes the last box the answer. It never raises and runs in time linear in the
response, so it is safe to call on the trainer's path without a deadline.

The rStar2-Agent reward reads the answer only from the `<answer>` block (paper §2.1): a box in
the reasoning does not count, and a response cut off before `</answer>` has no answer. When
several `<answer>` blocks are present the last one is graded; the redundancy is a format
matter, penalised by Resample-on-Correct, not by the reward. For models that use no tags,
`require_answer_tag=False` falls back to the last box anywhere in the response.
"""

import re

_ANSWER_OPEN = "<answer>"
_ANSWER_CLOSE = "</answer>"
_BOX_COMMAND = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_BRACE_OR_ESCAPE = re.compile(r"[{}\\]")
# What may stand between the boxes of one multi-part answer: at least one comma, semicolon or
# "and", with spaces, math delimiters and spacing commands around it. Each piece is a
# different character class, so the match takes linear time.
_SPACING = r"(?:\s|\$|\\[()\[\],;:! ]|\\q?quad(?![A-Za-z]))*"
_LIST_SEPARATOR = re.compile(
    rf"{_SPACING}(?:,|;|\band\b|\\text\{{\s*(?:and|,)\s*\}}){_SPACING}(?:(?:\band\b|\\text\{{\s*and\s*\}}){_SPACING})?"
)
_MOST_BOXES_IN_A_LIST = 16
"""More boxes in one such run are not a multi-part answer: the last box is the answer."""


def extract_answer(response: str, *, require_answer_tag: bool = True) -> str | None:
    """The final answer of `response`, or None when it gives none."""
    block = answer_block(response)
    if block is not None:
        boxed = last_boxed(block)
        if boxed is not None or require_answer_tag:
            return boxed
    if require_answer_tag:
        return None
    return last_boxed(response)


def answer_block(response: str) -> str | None:
    """The text of the last complete `<answer>...</answer>` block, or None."""
    end = response.rfind(_ANSWER_CLOSE)
    if end < 0:
        return None
    start = response.rfind(_ANSWER_OPEN, 0, end)
    if start < 0:
        return None
    return response[start + len(_ANSWER_OPEN) : end]


def last_boxed(text: str) -> str | None:
    """The argument of the last box command in `text` (with the boxes listed before it), or None.

    If the last box is unclosed (a truncated response) the answer is missing, rather than an
    earlier box being promoted to final answer.
    """
    boxes = list(_BOX_COMMAND.finditer(text))
    if not boxes:
        return None
    last = _box_argument(text, boxes[-1].end())
    if last is None:
        return None
    arguments = [last[0]]
    start = boxes[-1].start()
    for box in reversed(boxes[-_MOST_BOXES_IN_A_LIST - 1 : -1]):
        argument = _box_argument(text, box.end())
        if argument is None or not _LIST_SEPARATOR.fullmatch(text, argument[1], start):
            break
        arguments.append(argument[0])
        start = box.start()
    if len(arguments) > _MOST_BOXES_IN_A_LIST:  # a run that long is boxes, not one answer
        arguments = arguments[:1]
    answer = ", ".join(part.strip() for part in reversed(arguments) if part.strip())
    return answer or None


def _box_argument(text: str, position: int) -> tuple[str, int] | None:
    """The argument that starts at `position` (a balanced `{...}` group or one bare token) and
    where it ends, or None when it never closes."""
    while position < len(text) and text[position] in " \t":
        position += 1
    if position >= len(text):
        return None
    if text[position] == "{":
        close = closing_brace(text, position)
        return None if close is None else (text[position + 1 : close], close + 1)
    end = position
    while end < len(text) and not text[end].isspace() and text[end] not in "$}":
        end += 1
    return text[position:end], end


def closing_brace(text: str, open_brace: int) -> int | None:
    """Where the brace group opening at `open_brace` closes; escaped braces do not count."""
    depth = 0
    escaped_until = -1
    for mark in _BRACE_OR_ESCAPE.finditer(text, open_brace):
        position = mark.start()
        if position < escaped_until:
            continue
        char = mark.group()
        if char == "\\":
            escaped_until = position + 2
        elif char == "{":
            depth += 1
        else:
            depth -= 1
            if depth == 0:
                return position
    return None
