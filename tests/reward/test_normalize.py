"""Parser-free steps: integer digits, normalisation, base numerals, decimal commas."""

import pytest

from rstar2.reward.normalize import (
    base_numeral,
    canonical_integer,
    normalize_answer,
    read_decimal_commas,
    repair_latex,
    verdict_without_parser,
    without_percent,
)


@pytest.mark.parametrize(
    ("answer", "digits"),
    [
        ("42", "42"),
        ("-7", "-7"),
        ("+007", "7"),
        ("-0", "0"),
        ("1000.0", "1000"),
        ("7,425,000", "7425000"),
        ("10{,}000", "10000"),
        ("11,\\! 111,\\! 100", "11111100"),
        ("1 000", "1000"),
        ("\\$36", "36"),
        ("90^\\circ", "90"),
        ("90^{\\circ}", "90"),
        ("10\\%", "10"),
        ("17\\text{ any text}", "17"),
        ("185\\", "185"),
        ("25.", "25"),
        ("−3", "-3"),
    ],
)
def test_integers_in_decoration_read_as_their_digits(answer, digits):
    assert canonical_integer(answer) == digits


@pytest.mark.parametrize(
    "answer",
    ["1.5", "2,3", "32, 349", "1 2", "0,111", "x", "\\frac{4}{2}", "10^{10}", "2\\sqrt{2}", "", "1e5"],
)
def test_non_integers_have_no_digits(answer):
    assert canonical_integer(answer) is None


def test_integers_of_any_length_compare_exactly():
    long = "9" * 5_000  # past Python's 4,300-digit int/str limit
    assert verdict_without_parser(long, long) is True
    assert verdict_without_parser("0" + long, long + ".0") is True
    million = "7" * 1_000_000
    assert verdict_without_parser(million, million[:-1] + "8") is False
    assert verdict_without_parser(million, million + "7") is False


def test_base_numerals_compare_as_written():
    assert base_numeral("204_5") == ("204", "5")
    assert base_numeral("40_{9}") == ("40", "9")
    assert verdict_without_parser("40_{9}", "40_9") is True
    assert verdict_without_parser("40", "40_9") is False  # 40 in base 9 is 36
    assert verdict_without_parser("36", "40_9") is False  # the question asks for base 9


def test_decimal_comma_is_read_only_beside_a_decimal():
    assert read_decimal_commas("1,22", "1.22") == ("1.22", "1.22")
    assert read_decimal_commas("0.111", "0,111") == ("0.111", "0.111")
    assert read_decimal_commas("2,3", "\\{2, 3\\}") == ("2,3", "\\{2, 3\\}")
    assert verdict_without_parser("1000,99", "1000.99") is True


def test_normalisation_keeps_meaning():
    assert normalize_answer("\\\\dfrac{1}{2}.") == "\\dfrac{1}{2}"
    assert normalize_answer("90^\\circ") == "90"
    assert normalize_answer("1,000.99") == "1000.99"
    assert normalize_answer("32, 349") == "32, 349"  # a list, not a thousands separator
    assert normalize_answer("x \\,") == "x"
    assert repair_latex("1 - \\frac{1}{\\mathrm{e}}") == "1 - \\frac{1}{e}"
    assert repair_latex("a \\\\ b \\\\\\frac{1}{2}") == "a \\\\ b \\\\\\frac{1}{2}"  # line breaks kept


def test_an_answer_wrapped_whole_in_delimiters_is_unwrapped():
    assert normalize_answer("$204_5$") == "204_5"
    assert normalize_answer("$\\boxed{204_{5}}$") == "204_{5}"
    assert normalize_answer("\\(x^2\\)") == "x^2"
    assert normalize_answer("$1$ and $2$") == "$1$ and $2$"  # delimiters around parts stay
    assert normalize_answer("\\boxed{1} + \\boxed{2}") == "\\boxed{1} + \\boxed{2}"
    assert verdict_without_parser("204_5", "$204_{5}$") is True
    assert verdict_without_parser("40", "$40_9$") is False
    assert verdict_without_parser("a quotient of $\\boxed{204_5}$", "204_5") is None  # a text: parsed


def test_plus_minus_becomes_both_values_in_the_list():
    assert normalize_answer("x = \\frac{1 \\pm \\sqrt{5}}{2}") == (
        "x = \\frac{1 + \\sqrt{5}}{2}, x = \\frac{1 - \\sqrt{5}}{2}")
    assert normalize_answer("\\{0, \\pm 2\\}") == "\\{0, + 2, - 2\\}"
    assert normalize_answer("3 \\mp \\sqrt{2}") == "3 - \\sqrt{2}, 3 + \\sqrt{2}"
    assert normalize_answer("(1, 2)") == "(1, 2)"


def test_and_or_between_answers_is_a_list_separator():
    def words(answer: str) -> str:
        return " ".join(normalize_answer(answer).split())

    assert words("\\frac{1}{2}\\, \\text{and}\\, \\frac{1}{3}") == "\\frac{1}{2}\\, , \\, \\frac{1}{3}"
    assert words("19, 46, \\text{ and } 82") == "19, 46, 82"  # an Oxford comma stays one comma
    assert words("x = 1 \\lor x = 2") == "x = 1 , x = 2"


def test_degrees_inside_a_trigonometric_function_become_radians():
    assert normalize_answer("\\sin 15^\\circ") == "\\sin \\frac{15\\pi}{180}"
    assert normalize_answer("\\tan(75^{\\circ})") == "\\tan(\\frac{75\\pi}{180})"
    assert normalize_answer("30^\\circ, 150^\\circ") == "30, 150"  # angles as answers stay numbers


def test_percent_signs_come_off_only_at_the_end():
    assert without_percent("33.33\\%") == "33.33"
    assert without_percent("28 percent") == "28"
    assert without_percent("10\\%\\text{ of } x") == "10\\%\\text{ of } x"
    assert without_percent("7") == "7"


def test_only_easy_verdicts_skip_the_parser():
    assert verdict_without_parser(None, "1") is False
    assert verdict_without_parser("1", None) is False
    assert verdict_without_parser("\\frac{1}{2}", "\\frac{1}{2}") is True
    assert verdict_without_parser("\\frac{1}{2}", "0.5") is None
    assert verdict_without_parser("\\frac{4}{2}", "2") is None


def test_normalisation_is_linear_on_hostile_input():
    spaces = "1" + " " * 200_000 + "x"
    assert normalize_answer(spaces) == spaces
    assert canonical_integer("1" + " \\," * 100_000) == "1"
    assert without_percent("\\text{" + " " * 200_000) == "\\text{" + " " * 200_000
    assert normalize_answer("^" + " " * 200_000 + "x") == "^" + " " * 200_000 + "x"  # was quadratic
    assert normalize_answer("\\sin" + " " * 200_000 + "1") == "\\sin" + " " * 200_000 + "1"
    assert normalize_answer("1," + " " * 200_000 + "2") == "1," + " " * 200_000 + "2"
    assert normalize_answer("\\pm" + "," * 200_000).count(",") == 200_001
    nested = "\\boxed{" * 100_000 + "1" + "}" * 100_000
    assert normalize_answer(nested) == nested[3 * len("\\boxed{") : -3]  # a few layers, not all
