"""Rule: ``hisparse report`` reads back exactly what ``simulate --json`` saved
(``hisparse/report.py``): a saved run loads equal; a document missing any one of the
fields ``load`` checks is refused, naming that field; a byte figure is printed in the
largest unit under 1024.

``tests/test_report.py`` refuses a document with almost nothing in it; a field dropped
from the required ones (mutant ``drop``) let a run without it through, to fail later
with a ``KeyError`` instead of the one-line refusal. (``load`` checks seven fields; the
report reads more, e.g. ``finished``: a document missing one of those still fails with
a ``KeyError``. A finding for ``report.py``'s owner, not stated here.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hisparse.report import ReportError, _bytes, dumps, load
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



@pytest.mark.parametrize(("n", "text"), [
    (0, "0 B"), (1023, "1,023 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"),
    (1024**2 - 1, "1,024.0 KiB"), (1024**2, "1.0 MiB"), (3 * 1024**3, "3.0 GiB"),
    (5000 * 1024**3, "5,000.0 GiB"), (-2048, "-2.0 KiB"),
])
def test_a_byte_figure_is_in_the_largest_unit_under_1024(n: int, text: str) -> None:
    """Bytes whole, larger units to one decimal; GiB is the last unit, however large."""
    assert _bytes(n) == text
