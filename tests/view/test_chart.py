"""The viewer's chart axes: round y ticks (1, 2 or 5 times a power of ten) and whole training
steps on x, computed by the page's own script (``static/chart.js``) in the browser."""

from __future__ import annotations

import pytest

from rstar2.view.server import STATIC_DIR


@pytest.fixture
def charts(page):
    """A blank page with the viewer's chart script loaded."""
    page.set_content("<!doctype html><html><body></body></html>")
    page.add_script_tag(path=str(STATIC_DIR / "chart.js"))
    return page


def ticks(page, lo: float, hi: float, intervals: int, **options) -> dict:
    return page.evaluate("([lo, hi, n, options]) => niceTicks(lo, hi, n, options)", [lo, hi, intervals, options])


@pytest.mark.parametrize("lo, hi, intervals, options, expected", [
    (0, 0.73, 4, {"extend": True}, [0, 0.2, 0.4, 0.6, 0.8]),
    (-0.37, 0.12, 4, {"extend": True}, [-0.4, -0.2, 0, 0.2]),
    (0, 1234, 4, {"extend": True}, [0, 500, 1000, 1500]),
    (3, 17, 6, {"integer": True}, [5, 10, 15]),
    (1, 3, 6, {"integer": True}, [1, 2, 3]),  # whole steps, never 1.5
    (0, 37.2, 6, {}, [0, 10, 20, 30]),
])
def test_ticks_are_round(charts, lo, hi, intervals, options, expected):
    axis = ticks(charts, lo, hi, intervals, **options)
    assert axis["ticks"] == expected
    if options.get("extend"):
        assert (axis["lo"], axis["hi"]) == (expected[0], expected[-1])  # the axis ends on a tick
    else:
        assert (axis["lo"], axis["hi"]) == (lo, hi)


def test_a_flat_series_and_a_single_point_get_ticks_around_them(charts):
    flat = ticks(charts, 0.5, 0.5, 4, extend=True)
    assert flat["ticks"] == [0.45, 0.5, 0.55] and flat["lo"] < 0.5 < flat["hi"]
    assert ticks(charts, 0, 0, 4, extend=True)["ticks"] == [-1, -0.5, 0, 0.5, 1]
    single = ticks(charts, 7, 7, 6, integer=True)
    assert single["ticks"] == [7] and single["lo"] < 7 < single["hi"]


def test_a_drawn_chart_labels_its_axes_with_round_ticks(charts):
    labels = charts.evaluate("""() => {
        const svg = lineChart("reward/accuracy", [{ label: "run", color: "#000", points: [[3, 0.11], [9, 0.4], [17, 0.73]] }]);
        const texts = cls => [...svg.querySelectorAll(`text.${cls}`)].map(t => t.textContent);
        return { y: texts("ytick"), x: texts("xtick") };
    }""")
    assert labels == {"y": ["0", "0.2", "0.4", "0.6", "0.8"], "x": ["5", "10", "15"]}
