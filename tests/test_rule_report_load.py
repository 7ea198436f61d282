"""Rule: ``hisparse report`` reads back exactly what ``simulate --json`` saved
(``hisparse/report.py``): a saved run loads equal; a document missing any one of the
fields ``load`` checks is refused, naming that field; a byte figure is printed in the
largest unit under 1024; the plot draws every series, scaled.

``tests/test_report.py`` refuses a document with almost nothing in it; a field dropped
from the required ones (mutant ``drop``) let a run without it through, to fail later
with a ``KeyError`` instead of the one-line refusal. ``load`` also reads every other field
the report prints once, so a document missing one of those (``finished``, say) is a
``ReportError`` naming it, never a ``KeyError`` later.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hisparse.report import ReportError, _bytes, dumps, lines, load, plot
from hisparse.simulate import SimulateOptions, report_json, simulate

RUN = report_json(simulate(SimulateOptions(requests=12, steps=60, seed=1)))


def test_a_saved_run_loads_equal(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    path.write_text(dumps(RUN))
    assert load(path) == json.loads(json.dumps(RUN))


# what ``load`` promises to refuse by name (the test's own list: a field dropped from
# ``REQUIRED`` is still tried here)
CHECKED = ("sizes", "series", "steps", "resident_hits", "hot_hits", "misses", "notes")


@pytest.mark.parametrize("field", CHECKED)
def test_a_run_without_one_required_field_is_refused_by_name(tmp_path: Path, field: str) -> None:
    assert field in RUN  # (a field the saved run has)
    path = tmp_path / "run.json"
    path.write_text(dumps({k: v for k, v in RUN.items() if k != field}))
    with pytest.raises(ReportError, match=rf"not a hisparse simulate --json file \(no {field}\)"):
        load(path)


@pytest.mark.parametrize("field", CHECKED)
def test_a_document_of_the_other_required_fields_is_refused_by_the_one_missing(
    tmp_path: Path, field: str
) -> None:
    """The required fields are checked before any other is read: a document holding
    every one of them but ``field`` (and nothing else) is refused for ``field``, not
    for a field the report reads later.
    (kills hisparse/report.py:215:drop:6, which named ``requests`` for a missing
    ``notes``)"""
    path = tmp_path / "run.json"
    path.write_text(dumps({k: RUN[k] for k in CHECKED if k != field}))
    with pytest.raises(ReportError, match=rf"not a hisparse simulate --json file \(no {field}\)"):
        load(path)


@pytest.mark.parametrize("i", range(len(CHECKED)))
def test_a_document_missing_several_required_fields_is_refused_for_the_first(
    tmp_path: Path, i: int
) -> None:
    """A document holding only the required fields before ``CHECKED[i]`` (``{}`` for the
    first) is refused for ``CHECKED[i]``: the first missing in the order the report
    reads them, whatever else is missing too.
    (kills hisparse/report.py:215:drop:0 to drop:5, each of which named the next field)"""
    path = tmp_path / "run.json"
    path.write_text(dumps({k: RUN[k] for k in CHECKED[:i]}))
    with pytest.raises(ReportError,
                       match=rf"not a hisparse simulate --json file \(no {CHECKED[i]}\)$"):
        load(path)


@pytest.mark.parametrize("field", sorted(RUN))
def test_a_run_without_any_one_field_is_refused_or_prints(tmp_path: Path, field: str) -> None:
    """Whatever field is missing, load refuses it by name or the report prints in full."""
    path = tmp_path / "run.json"
    path.write_text(dumps({k: v for k, v in RUN.items() if k != field}))
    try:
        doc = load(path)
    except ReportError as exc:
        assert f"(no {field})" in str(exc)
    else:
        assert lines(doc)


def test_a_run_with_a_field_of_the_wrong_type_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    path.write_text(dumps({**RUN, "finished": "many"}))
    with pytest.raises(ReportError, match=r"not a hisparse simulate --json file \(a bad field\)"):
        load(path)


@pytest.mark.parametrize(("n", "text"), [
    (0, "0 B"), (1023, "1,023 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"),
    (1024**2 - 1, "1,024.0 KiB"), (1024**2, "1.0 MiB"), (3 * 1024**3, "3.0 GiB"),
    (5000 * 1024**3, "5,000.0 GiB"), (-2048, "-2.0 KiB"),
])
def test_a_byte_figure_is_in_the_largest_unit_under_1024(n: int, text: str) -> None:
    """Bytes whole, larger units to one decimal; GiB is the last unit, however large."""
    assert _bytes(n) == text


def test_the_plot_draws_every_series_scaled(tmp_path: Path, saved_figures: list[Any]) -> None:
    """Each panel holds exactly its series, each as the run recorded it (scaled to a
    fraction or to KiB); the test reads the figure as it is saved."""
    saved = saved_figures
    import matplotlib.pyplot as plt

    open_before = plt.get_fignums()
    plot(RUN, tmp_path / "run.png")
    assert plt.get_fignums() == open_before  # the figure is closed, not left to pile up
    (fig,) = saved
    for a in fig.axes:  # each panel with its grid and its legend
        grid = a.get_xgridlines() + a.get_ygridlines()
        assert grid and all(g.get_visible() and g.get_alpha() == 0.3 for g in grid)
        assert a.get_legend() is not None
    panels = [[(line.get_label(), [float(y) for y in np.asarray(line.get_ydata())])
               for line in a.get_lines()] for a in fig.axes]
    s, z = RUN["series"], RUN["sizes"]
    looks = [a + b + c for a, b, c in zip(s["resident_hits"], s["hot_hits"], s["misses"],
                                          strict=True)]

    def rate(key: str) -> list[float]:
        return [v / n if n else math.nan for v, n in zip(s[key], looks, strict=True)]

    expected = [
        [("GPU pool", [v / z["gpu_blocks"] for v in s["gpu_blocks_used"]]),
         ("host pool", [v / z["host_blocks"] for v in s["host_blocks_used"]])],
        [("resident", rate("resident_hits")), ("hot", rate("hot_hits")),
         ("host (miss)", rate("misses"))],
        [("host→device", [v / 1024 for v in s["h2d_bytes"]]),
         ("device→host (spills)", [v / 1024 for v in s["d2h_bytes"]])],
        [("running", s["running"]), ("waiting", s["waiting"])],
    ]
    assert [[label for label, _ in p] for p in panels] == [[lb for lb, _ in p] for p in expected]
    for got, want in zip(panels, expected, strict=True):
        for (label, ys), (_, zs) in zip(got, want, strict=True):
            assert len(ys) == len(zs) == RUN["steps"], label
            same = [y == w or (math.isnan(y) and math.isnan(w))
                    for y, w in zip(ys, zs, strict=True)]
            assert all(same), label
    assert any(v for v in s["running"]) and any(v for v in s["gpu_blocks_used"])
    assert fig.get_suptitle() == f"hisparse simulate: {z['workload']} ({z['requests']:,} requests)"
    # laid out tight when saved: laying it out again moves no panel
    placed = [a.get_position().bounds for a in fig.axes]
    fig.tight_layout()
    again = [a.get_position().bounds for a in fig.axes]
    assert all(math.isclose(p, q, abs_tol=1e-3) for b, c in zip(placed, again, strict=True)
               for p, q in zip(b, c, strict=True)), (placed, again)


@pytest.mark.parametrize(("never", "large", "tail"), [
    (2, 2, "2 never admitted (2 larger than the GPU pool)"),
    (0, 0, "0 never admitted (0 larger than the GPU pool)"),
    (3, 1, "3 never admitted (1 larger than the GPU pool, 2 still waiting at the last step)"),
])
def test_requests_still_waiting_are_named_only_when_there_are_some(
    never: int, large: int, tail: str
) -> None:
    doc = {**RUN, "never_admitted": never, "too_large": large}
    (line,) = [x for x in lines(doc) if x.startswith("requests")]
    assert tail + ";" in line, line


def test_a_document_without_series_is_dumped_as_plain_json() -> None:
    doc = {k: v for k, v in RUN.items() if k != "series"}
    text = dumps(doc)
    assert text.endswith("}\n") and json.loads(text) == json.loads(json.dumps(doc))
    assert json.loads(dumps(RUN)) == json.loads(json.dumps(RUN))
