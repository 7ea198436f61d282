"""Test-suite policy: GPU tests skip cleanly without a GPU; in CI nothing else may skip.

CI requires TLC and every non-GPU dependency, so a skip there would hide a broken setup.
With ``CI=true`` any skip whose reason does not mention the GPU is turned into a failure.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Generator, Iterator
from typing import TYPE_CHECKING, Any

import pytest

from hisparse.tlc import TlcError, TlcInstall, ensure_tlc

if TYPE_CHECKING:
    from tests.test_pdimport_runner import Rig

GPU_WORD = "GPU"

# A suite started in the background by a non-interactive shell (``cmd &``, ``nohup``)
# inherits SIGINT ignored: Python then installs no KeyboardInterrupt handler, and neither
# does any ``hisparse`` process a test starts (an ignored signal survives exec). The
# interrupt tests test hisparse's handling of SIGINT, not the harness's, so the suite
# takes SIGINT back (a handler, unlike SIG_IGN, is reset to the default on exec).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def in_ci() -> bool:
    """True when the ``CI`` environment variable is set to a truthy value."""
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def gpu_unavailable() -> str | None:
    """Why GPU tests cannot run here, or ``None`` when CuPy sees an NVIDIA GPU."""
    try:
        import cupy
    except Exception as exc:  # ImportError, or a CUDA library load failure
        return f"CuPy not importable ({type(exc).__name__}: {exc})"
    try:
        count = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as exc:
        return f"CUDA runtime error ({exc})"
    return None if count > 0 else "CuPy sees 0 devices"


@pytest.hookimpl(tryfirst=True)
def pytest_itemcollected(item: pytest.Item) -> None:
    """A test that takes the ``tlc`` fixture needs Java and the jar: it is a ``tlc`` test.

    Marked here, before ``-m`` selects, so ``-m "not tlc"`` (a host without Java, the
    mutation tool's whole-suite run) never starts a test that fails there for that
    reason alone."""
    if "tlc" in getattr(item, "fixturenames", ()) and item.get_closest_marker("tlc") is None:
        item.add_marker(pytest.mark.tlc)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_items:
        return
    detail = gpu_unavailable()
    if detail is not None:
        skip = pytest.mark.skip(reason=f"no NVIDIA {GPU_WORD}: {detail}")
        for item in gpu_items:
            item.add_marker(skip)


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if in_ci() and report.skipped and not hasattr(report, "wasxfail"):
        reason = _skip_reason(report)
        if GPU_WORD not in reason:
            report.outcome = "failed"
            report.longrepr = f"skipped in CI, which allows only GPU skips: {reason}"
    return report


@pytest.fixture(scope="session")
def tlc() -> TlcInstall:
    """The verified TLC install; a missing tool is a failure, never a skip."""
    try:
        return ensure_tlc()
    except TlcError as exc:
        pytest.fail(f"TLC is required for these tests and is not usable: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def nixl_available() -> None:
    """NIXL is required where a test asks for it, like TLC: its absence fails the test."""
    from hisparse.transport import TransportError
    from hisparse.transport.nixlpeer import load_nixl

    try:
        load_nixl()
    except TransportError as exc:
        pytest.fail(f"NIXL is required for these tests: {exc}", pytrace=False)


@pytest.fixture
def loopback_rig() -> Iterator[Rig]:
    """An import runner over the loopback transport (``tests/test_pdimport_runner.Rig``),
    closed after the test (its staging slots back, its prefillers reaped)."""
    from tests.test_pdimport_runner import Rig

    rig = Rig("loopback")
    yield rig
    rig.close()


@pytest.fixture
def saved_figures(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every matplotlib ``Figure`` saved during the test, in order (still saved): a test
    reads a plot where it is saved, not from its pixels."""
    from matplotlib.figure import Figure

    saved: list[Any] = []
    real = Figure.savefig

    def save(self: Figure, *args: Any, **kwargs: Any) -> None:
        saved.append(self)
        real(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", save)
    return saved
