"""Cheap, parser-free steps of answer comparison.

Contract: every function here is pure string work whose running time is linear in its input
(no backtracking-prone patterns, no int conversion), so the grading parent process can run
them on any answer without a deadline. Anything that needs a parser lives in `equivalence`
and runs in a worker process that is killed when it overruns.

What is here:
- `repair_latex`: slips that mislead math-verify in any text (doubled backslashes, upright e);
- `unwrap_math`: an answer written whole inside `$...$`, `\\(...\\)`, `\\[...\\]` or `\\boxed{}`,
  without that wrapper, so that `$204_5$` is read as `204_5`;
- `normalize_answer`: rewrites of a bare answer that math-verify's own LaTeX normaliser lacks
  (space or `{,}` thousands separators, `\\$`, degree signs, trailing `.` or `\\`, "and" or
  `\\lor` between a list's answers, and `\\pm`,
  which its grammar reads only outside a fraction: `\\frac{1 \\pm \\sqrt{5}}{2}` becomes the list
  of its two values);
- `canonical_integer`: the exact digits of an answer that is an integer in decoration (sign,
  thousands separators, `.0`, `\\%`, a unit in `\\text{}`, a degree sign), compared as strings
  so that integers of any length are exact (Python refuses `int()` above 4,300 digits);
- `base_numeral`: the digits and base of an answer such as `204_5`, compared as written;
- `without_percent`, `read_decimal_commas`: the alternative readings equivalence tries;
- `verdict_without_parser`: the verdict when no parser is needed (a missing answer, a base
  numeral, two integers, identical answers), else None.
"""

import re

from rstar2.reward.extract import closing_brace

_COMMANDS_WRITTEN_WITH_TWO_BACKSLASHES = re.compile(
    r"(?<!\\)\\(?=\\(?:[dtc]?frac|sqrt|le|leq|ge|geq|lt|gt|neq|left|right|pi|cdot|times|"
    r"infty|pm|mp|in|cup|cap|text|mathrm|mathbf|boxed|circ|approx)(?![A-Za-z]))"
)
# math-verify's unit stripping eats `\text{e}}` with the brace that closes a group, turning
# `1 - \frac{1}{\mathrm{e}}` into `1`; the constants e and i need no upright wrapper anyway.
_UPRIGHT_CONSTANT = re.compile(r"\\(?:mathrm|text|operatorname|rm)\{\s*([ei])\s*\}")
_UNICODE_MINUS = str.maketrans({"−": "-", "–": "-"})
# No two `\s*` meet without a character between them: `\s*\{?\s*` backtracks quadratically
# on a long run of spaces, and these run in the grading parent without a deadline.
_DEGREES = r"(?:\^\s*(?:\{\s*)?\\circ(?:\s*\})?|°|\\degree(?![A-Za-z]))"
_DEGREE_SIGN = re.compile(_DEGREES)
# An angle in degrees as a trigonometric function's argument (`\sin 15^\circ`) would be read
# in radians once the degree sign is gone; it becomes `\frac{15\pi}{180}` instead.
_TRIG_ARGUMENT_IN_DEGREES = re.compile(
    r"(?P<function>\\(?:sin|cos|tan|cot|sec|csc)(?![A-Za-z])(?:[\s({]|\\left|\^\{?\d\}?){0,8})"
    r"(?P<angle>\d+(?:\.\d+)?)\s*" + _DEGREES
)
# "and"/"or" between the answers of a list: math-verify drops `\text{and}` and reads what is
# left between `\,` spacing as a product (`\frac{1}{2}\, \text{and}\, \frac{1}{3}` as 1/6), and
# reads `x = \frac{1}{2} \lor x = 2` as its last equation.
_WORD_BETWEEN_ANSWERS = re.compile(r"(?:(?<!\\),\s*)?(?:\\text\{\s*(?:and|or)\s*\}|\\lor(?![A-Za-z]))")  # `1, 2, \text{and} 3`
_PLUS_MINUS = re.compile(r"\\(?P<sign>pm|mp)(?![A-Za-z])")
_SET_BRACES = ("\\{", "\\}")
MATH_DELIMITER = re.compile(r"\\boxed|\\fbox|(?<!\\)\$|\\\(|\\\[")
"""Marks math inside text: an answer holding one is a text whose answer must be extracted."""
_MATH_WRAPPERS = (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))
_BOX_OPENING = re.compile(r"\\(?:boxed|fbox)\s*\{")
_MOST_WRAPPERS = 3  # `$\boxed{x}$` has two; a bound keeps unwrapping linear on `\boxed{\boxed{...`
# `,\!` and `{,}` are LaTeX's thousands commas; a plain comma followed by a space is a list.
_THOUSANDS_SEPARATOR = r"(?:\{,\}|,\\!\s*|,|\\[,;! ]|\s)"
_SEPARATED_THOUSANDS = re.compile(rf"[-+]?[1-9]\d{{0,2}}(?:{_THOUSANDS_SEPARATOR}\d{{3}})+(?:\.\d+)?")
_THOUSANDS_SEPARATOR_ONLY = re.compile(_THOUSANDS_SEPARATOR)
_INTEGER_IN_DECORATION = re.compile(
    r"(?P<sign>[-+])?\s*(?P<digits>\d+)(?:\.0*)?"
    r"\s*(?:\\?%|\\(?:text|mbox|textnormal|mathrm)\{[^{}]*\})?"
)
_BASE_NUMERAL = re.compile(r"(?P<digits>[0-9A-Za-z]+)_\{?(?P<base>\d+)\}?")
_TRAILING_PERCENT = re.compile(r"(?:\\?%|\\text\{\s*(?:percent|\\?%)\s*\}|percent|pct)$")
_PERCENT_SEARCH_WINDOW = 40
_DECIMAL_WITH_COMMA = re.compile(r"-?\d+,\d+")
_DECIMAL_WITH_POINT = re.compile(r"-?\d*\.\d+")


def repair_latex(text: str) -> str:
    """`text` with LaTeX slips that mislead math-verify repaired; safe in any text.

    A command written with two backslashes (`\\\\frac`, common in JSON-escaped data) gets
    one; an upright `e` or `i` loses its wrapper; a Unicode minus becomes `-`.
    """
    text = text.translate(_UNICODE_MINUS)
    if "\\\\" in text:
        text = _COMMANDS_WRITTEN_WITH_TWO_BACKSLASHES.sub("", text)
    return _UPRIGHT_CONSTANT.sub(r"\1", text)


def normalize_answer(answer: str) -> str:
    """A bare answer rewritten into the LaTeX math-verify parses best; meaning unchanged."""
    text = repair_latex(unwrap_math(answer)).replace("\\$", "")
    text = _TRIG_ARGUMENT_IN_DEGREES.sub(r"\g<function>\\frac{\g<angle>\\pi}{180}", text)
    text = _strip_trailing_punctuation(_DEGREE_SIGN.sub("", text))
    if _SEPARATED_THOUSANDS.fullmatch(text):
        text = _THOUSANDS_SEPARATOR_ONLY.sub("", text)
    return expand_plus_minus(_WORD_BETWEEN_ANSWERS.sub(", ", text))


def unwrap_math(answer: str) -> str:
    """`answer` stripped, without math delimiters or a box around all of it: `$204_5$`,
    `\\(x\\)`, `\\boxed{x}` and `$\\boxed{x}$` are all `x`. Delimiters around part of it stay."""
    text = answer.strip()
    for _ in range(_MOST_WRAPPERS):
        inner = _unwrapped_once(text)
        if inner is None:
            break
        text = inner.strip()
    return text


def _unwrapped_once(text: str) -> str | None:
    for opening, closing in _MATH_WRAPPERS:
        if text.startswith(opening) and text.endswith(closing) and len(text) > len(opening) + len(closing):
            inner = text[len(opening) : -len(closing)]
            return None if opening in inner or closing in inner else inner
    box = _BOX_OPENING.match(text)
    if box is not None and closing_brace(text, box.end() - 1) == len(text) - 1:
        return text[box.end() : -1]
    return None


def expand_plus_minus(text: str) -> str:
    """A list item holding `\\pm` (or `\\mp`) replaced by its two values, the list kept.

    math-verify's grammar reads `a \\pm b` as a set only at the top of an expression and fails
    on `\\frac{-1 \\pm \\sqrt{13}}{4}`, after which extraction used to settle for the list's first
    fraction. `x = \\frac{1 \\pm \\sqrt{5}}{2}` becomes `x = \\frac{1 + \\sqrt{5}}{2}, x = \\frac{1 -
    \\sqrt{5}}{2}`; a set `\\{...\\}` around the whole list stays around it.
    """
    if _PLUS_MINUS.search(text) is None:
        return text
    opening, closing = _SET_BRACES
    if text.startswith(opening) and text.endswith(closing):
        return opening + _expanded_list(text[len(opening) : -len(closing)]) + closing
    return _expanded_list(text)


def _expanded_list(text: str) -> str:
    items = []
    for item in split_top_level(text):
        if _PLUS_MINUS.search(item) is None:
            items.append(item)
        else:
            items += [_PLUS_MINUS.sub(lambda match, s=sign: _signed(match, s), item).strip() for sign in "+-"]
    return ", ".join(items)


def _signed(match: re.Match, sign: str) -> str:
    """`\\pm` as `sign`, `\\mp` as the other sign."""
    if match["sign"] == "pm":
        return sign
    return "-" if sign == "+" else "+"


def split_top_level(text: str) -> list[str]:
    """`text` cut at the commas outside every bracket (`{}`, `()`, `[]`), items stripped."""
    items, depth, start = [], 0, 0
    for position, char in enumerate(text):
        if char in "{([":
            depth += 1
        elif char in "})]":
            depth -= 1
        elif char == "," and depth <= 0:
            items.append(text[start:position].strip())
            start = position + 1
    items.append(text[start:].strip())
    return items


def _strip_trailing_punctuation(text: str) -> str:
    """`text` without trailing spaces, full stops, backslashes or LaTeX spacing (`\\,`).

    Scans back from the end once: a `(...)+$` pattern would backtrack quadratically.
    """
    end = len(text)
    while end > 0:
        char = text[end - 1]
        if char.isspace() or char in ".\\":
            end -= 1
        elif char in ",;!:" and end >= 2 and text[end - 2] == "\\":
            end -= 2
        else:
            break
    return text[:end]


def canonical_integer(answer: str) -> str | None:
    """The answer as canonical integer digits (`-12`, `0`), or None if it is not an integer.

    Decorations that do not change an integer's value are dropped: a sign of `+`, leading
    zeros, thousands separators, a `.0` tail, a percent sign, a trailing unit in `\\text{}`
    and a degree sign. Dropping `%` follows the labels of every checker we test against
    (`10\\%` matches `10`); `10\\%` against `0.1` is left to the symbolic path.
    """
    return _integer_digits(normalize_answer(answer))


def _integer_digits(text: str) -> str | None:
    match = _INTEGER_IN_DECORATION.fullmatch(text)
    if match is None:
        return None
    digits = match["digits"].lstrip("0") or "0"
    negative = match["sign"] == "-" and digits != "0"
    return f"-{digits}" if negative else digits


def base_numeral(answer: str) -> tuple[str, str] | None:
    """(digits, base) of a numeral written in a base (`204_5`, `40_{9}`), else None.

    Such an answer is the numeral, not its value: math-verify drops the subscript and
    would accept `40` for `40_9` (which is 36).
    """
    return _numeral_digits(normalize_answer(answer))


def _numeral_digits(text: str) -> tuple[str, str] | None:
    match = _BASE_NUMERAL.fullmatch(text)
    return None if match is None else (match["digits"].upper(), match["base"])


def without_percent(answer: str) -> str:
    """`answer` without a trailing percent sign (`\\%`, `%`, `percent`); unchanged if none."""
    text = normalize_answer(answer)
    match = _TRAILING_PERCENT.search(text, max(0, len(text) - _PERCENT_SEARCH_WINDOW))
    return answer if match is None else text[: match.start()].rstrip()


def read_decimal_commas(pred: str, gold: str) -> tuple[str, str]:
    """The pair with a decimal comma read as a point when the other answer is a decimal.

    Alone, `1,22` is ambiguous (two numbers, or 1.22 in European notation); beside `1.22`
    only the decimal reading makes sense. Answers that are not such numbers pass unchanged.
    """
    pred_text, gold_text = normalize_answer(pred), normalize_answer(gold)
    read_pred, read_gold = _decimal_commas_read(pred_text, gold_text)
    return (read_pred if read_pred != pred_text else pred, read_gold if read_gold != gold_text else gold)


def _decimal_commas_read(pred_text: str, gold_text: str) -> tuple[str, str]:
    if _DECIMAL_WITH_COMMA.fullmatch(pred_text) and _DECIMAL_WITH_POINT.fullmatch(gold_text):
        return pred_text.replace(",", "."), gold_text
    if _DECIMAL_WITH_COMMA.fullmatch(gold_text) and _DECIMAL_WITH_POINT.fullmatch(pred_text):
        return pred_text, gold_text.replace(",", ".")
    return pred_text, gold_text


def verdict_without_parser(pred: str | None, gold: str | None) -> bool | None:
    """The verdict when it needs no parser, else None (the pair needs the symbolic path)."""
    if pred is None or gold is None:
        return False
    pred_text, gold_text = normalize_answer(pred), normalize_answer(gold)
    pred_numeral, gold_numeral = _numeral_digits(pred_text), _numeral_digits(gold_text)
    if pred_numeral is not None and gold_numeral is not None:
        return pred_numeral == gold_numeral
    if pred_numeral is not None or gold_numeral is not None:
        other = pred_text if pred_numeral is None else gold_text
        return None if MATH_DELIMITER.search(other) else False  # a text's answer is extracted first
    pred_integer, gold_integer = _integer_digits(pred_text), _integer_digits(gold_text)
    if pred_integer is not None and gold_integer is not None:
        return pred_integer == gold_integer
    pred_text, gold_text = _decimal_commas_read(pred_text, gold_text)
    return True if pred_text == gold_text else None
