"""pytest plugin of a coverage-map run: each test's lines under its node id, and its time.

Loaded by ``tools/mutation/covermap.py`` (``-p tools.mutation.covplugin``) in a process
that ``covhook/sitecustomize.py`` measures. Before each test it switches the coverage
context to the test's node id and exports it in ``HISPARSE_COVMAP_TEST``, so processes the
test starts record under it too; after the test both go back to the empty context (lines
run at collection, i.e. import time, stay there). Each test's seconds (setup, call and
teardown) go to the JSON file named by ``HISPARSE_COVMAP_SECONDS``.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import coverage
import pytest

_SECONDS: dict[str, float] = {}
_OUTCOMES: dict[str, str] = {}


def _switch(context: str) -> None:
    os.environ["HISPARSE_COVMAP_TEST"] = context
    cov = coverage.Coverage.current()
    if cov is not None:
        cov.switch_context(context)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    _switch(item.nodeid)
    t0 = time.perf_counter()
    yield
    _SECONDS[item.nodeid] = round(time.perf_counter() - t0, 3)
    _switch("")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.failed or (report.when == "call" and report.skipped):
        _OUTCOMES[report.nodeid] = report.outcome


def pytest_sessionfinish(session: pytest.Session) -> None:
    out = os.environ.get("HISPARSE_COVMAP_SECONDS")
    if out:
        Path(out).write_text(json.dumps({"seconds": _SECONDS, "not_passed": _OUTCOMES}))
