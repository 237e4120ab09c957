"""Answer equivalence: exact integers first, then math-verify with the normalisation it lacks.

Contract: `equivalent(pred, gold)` says whether a predicted answer means the same as the gold
one. It never raises on odd input, but sympy may run for an unbounded time on pathological
answers (`10^{10^{10}}`, deeply nested fractions), so call it only inside a deadline-bounded
worker (`rstar2.reward.grading`); the public `is_equivalent` does that.

Order of checks, cheapest first:
1. parser-free verdicts (`normalize.verdict_without_parser`): a missing answer, identical
   answers, two integers compared digit by digit, base numerals compared as written (a text
   beside a numeral has its answer extracted by math-verify first);
2. math-verify `verify(parse(gold), parse(pred))`, where a bare answer (no `$`, `\\boxed`, ...)
   is normalised and parsed as LaTeX math, and a text with delimiters is left to
   math-verify's own extraction (so full model outputs can be compared too);
3. the same without percent signs, so that `x\\%` matches both x/100 and the number x.
"""

import functools
import logging
import re

from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify
from math_verify.grader import (
    is_assignment_relation,
    is_equation,
    is_relation,
    take_first_relation,
)
from sympy import Rational

from rstar2.reward.normalize import (
    MATH_DELIMITER,
    base_numeral,
    normalize_answer,
    read_decimal_commas,
    repair_latex,
    unwrap_math,
    verdict_without_parser,
    without_percent,
)

# The deadline is enforced by killing the worker process, so math-verify's own signal.alarm
# timeouts are off, and its warning that they are off is noise.
logging.getLogger("math_verify").setLevel(logging.ERROR)

_LATEX = (LatexExtractionConfig(),)
_LATEX_AND_PLAIN = (LatexExtractionConfig(), ExprExtractionConfig())
_DECIMAL_PLACES = re.compile(r"\.(\d+)")  # `.5` as well as `0.5`
_DEFAULT_FLOAT_ROUNDING = 6
_FEWEST_DECIMAL_PLACES = 2
_LONGEST_CACHED_ANSWER = 1_000
_WORD = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{2,}(?![A-Za-z])")  # letters, not a \command
_FEWEST_WORDS_OF_PROSE = 3


def equivalent(pred: str | None, gold: str | None) -> bool:
    """Whether `pred` is mathematically the same answer as `gold` (unbounded time)."""
    verdict = verdict_without_parser(pred, gold)
    if verdict is not None:
        return verdict
    if base_numeral(pred) or base_numeral(gold):
        return _numeral_in_text(pred) == _numeral_in_text(gold)
    pred, gold = read_decimal_commas(pred, gold)
    return symbolically_equivalent(pred, gold) or _equivalent_as_written_numbers(pred, gold)


def _numeral_in_text(answer: str) -> tuple[str, str] | None:
    """The base numeral an answer is, or the one math-verify extracts from a text answer
    (`... a quotient of $\\boxed{204_5}$`): compared as written, since math-verify's value of
    `204_5` is 204."""
    numeral = base_numeral(answer)
    if numeral is not None:
        return numeral
    parsed = parse_answer(answer)
    return base_numeral(parsed[-1]) if parsed and isinstance(parsed[-1], str) else None


def _equivalent_as_written_numbers(pred: str, gold: str) -> bool:
    """Whether the answers match once percent signs are dropped: `33.33\\%` is `33.33`.

    math-verify reads `x\\%` as x/100, and as x too but only for integers (`10\\%` matches
    `10` but `33.33\\%` does not match `33.33`); this extends the second reading to all.
    """
    pred_number, gold_number = without_percent(pred), without_percent(gold)
    if pred_number == pred and gold_number == gold:
        return False
    return equivalent(pred_number, gold_number)


def symbolically_equivalent(pred: str, gold: str) -> bool:
    """math-verify's verdict on the parsed answers, asymmetric as math-verify is.

    A relation and a set may match (`x \\in [-2, 7]` and `-2 \\le x \\le 7` in either order),
    since they state the same thing; variable names stay significant (`f(x)` is not `f(y)`).
    """
    gold_parsed = parse_answer(gold)
    pred_parsed = parse_answer(pred)
    if not gold_parsed or not pred_parsed:
        return False
    if isinstance(pred_parsed[0], Rational) and isinstance(gold_parsed[0], Rational):
        return pred_parsed[0] == gold_parsed[0]  # exact numbers: no simplify needed
    if _equation_against_value(pred_parsed[0], gold_parsed[0]):
        return False
    return verify(
        list(gold_parsed),
        list(pred_parsed),
        float_rounding=float_rounding(pred, gold),
        strict=True,
        allow_set_relation_comp=True,
        timeout_seconds=None,
    )


def _equation_against_value(pred, gold) -> bool:
    """Whether the prediction is an equation in unknowns while the gold is a value.

    math-verify then compares the equation's right side with the gold: right for an
    assignment (`x = 5`) or a computation (`3 + 4 = 7`, ending in the value), wrong for
    `5x - 7y + 11z + 4 = 0`, whose right side `0` is no answer.
    """
    if not is_equation(pred) or is_assignment_relation(pred) or is_relation(gold):
        return False
    return bool(take_first_relation(pred).lhs.free_symbols)


def float_rounding(pred: str, gold: str) -> int:
    """Decimal places at which a float answer is compared with the gold.

    Six by default, or as many as a decimal gold is written to when that is more (`.0000672`
    is not `.0000673`); when the gold is exact (no decimal point written) and the prediction
    is written to fewer places, the prediction's own precision, but never under two: `0.33`
    and `2.6667` are accepted for 1/3 and 8/3, `0.3` is not.
    """
    gold_places = _places_written(gold)
    if gold_places is not None:
        return max(_DEFAULT_FLOAT_ROUNDING, gold_places)
    written = _places_written(pred)
    if written is None:
        return _DEFAULT_FLOAT_ROUNDING
    return min(_DEFAULT_FLOAT_ROUNDING, max(_FEWEST_DECIMAL_PLACES, written))


def _places_written(answer: str) -> int | None:
    """The most decimal places of a number written in `answer`, or None if it has none."""
    return max((len(places) for places in _DECIMAL_PLACES.findall(answer)), default=None)


def parse_answer(answer: str) -> tuple:
    """math-verify parses of `answer`: a bare answer as LaTeX math, a text by extraction.

    An answer wrapped whole in delimiters (`$\\frac{1}{2}$`, `\\boxed{...}`) is a bare answer.
    A bare answer is wrapped in `$...$` because math-verify only looks for LaTeX between
    delimiters: unwrapped, `\\frac{1}{2}` is not found and `10, 4, 2` reads as its last
    number. A bare answer that is not LaTeX at all (a sentence) falls back to extraction; one
    that is LaTeX math but does not parse has no reading, rather than the reading of a part.
    Parses of short answers are cached: a group of rollouts shares one gold answer, and
    often the same final answer; long ones are not, so the cache stays small.
    """
    if len(answer) <= _LONGEST_CACHED_ANSWER:
        return _cached_parse(answer)
    return _parse(answer)


def _parse(answer: str) -> tuple:
    unwrapped = unwrap_math(answer)
    if MATH_DELIMITER.search(unwrapped):
        return tuple(parse(repair_latex(answer), _LATEX_AND_PLAIN, parsing_timeout=None))
    bare = normalize_answer(unwrapped)
    parsed = parse(f"${bare}$", _LATEX, parsing_timeout=None)
    if any(not isinstance(item, str) for item in parsed):
        return tuple(parsed)
    if len(_WORD.findall(bare)) < _FEWEST_WORDS_OF_PROSE:
        return ()  # math it cannot read: a part of it (the first fraction of a list) is no answer
    return tuple(parse(bare, _LATEX_AND_PLAIN, parsing_timeout=None))


_cached_parse = functools.lru_cache(maxsize=4096)(_parse)
