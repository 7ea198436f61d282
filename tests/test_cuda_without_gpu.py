"""The CUDA executor's behaviour where it cannot run (CI): clean imports, clear errors.

Everything here runs without a GPU: the package imports, a missing CuPy / a ROCm build /
zero devices each give ``CudaUnavailable`` with what to do, the CLI turns that into
exit code 2, and the resolver's shape limits are refused at configuration time.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator

import pytest

from hisparse.cli import main
from hisparse.executor import Executor, ExecutorConfigError
from hisparse.executor.cuda import CudaExecutor, CudaPools, backend
from hisparse.executor.cuda.kernels import (
    MAX_TOP_K,
    ResolverShape,
    positions_per_thread,
    resolve_smem_bytes,
    rows_per_thread,
)

_CONFORMS: type[Executor[CudaPools]] = CudaExecutor  # mypy checks the protocol


@pytest.fixture
def fake_cupy(monkeypatch: pytest.MonkeyPatch) -> Iterator[types.SimpleNamespace]:
    """A stand-in ``cupy`` module whose runtime the test configures."""
    runtime = types.SimpleNamespace(is_hip=False, getDeviceCount=lambda: 1)
    module = types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=runtime))
    monkeypatch.setitem(sys.modules, "cupy", module)
    backend.load_cupy.cache_clear()
    yield runtime
    backend.load_cupy.cache_clear()


@pytest.fixture
def no_cupy(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setitem(sys.modules, "cupy", None)
    backend.load_cupy.cache_clear()
    yield
    backend.load_cupy.cache_clear()


@pytest.mark.usefixtures("no_cupy")
def test_missing_cupy_names_the_extra_to_install() -> None:
    from hisparse.executor.cuda import CudaUnavailable, cuda_available

    assert not cuda_available()
    with pytest.raises(CudaUnavailable, match=r"hisparse\[cuda12\].*hisparse\[cuda13\]"):
        CudaExecutor(top_k=8, max_positions=64)


def test_rocm_build_is_refused(fake_cupy: types.SimpleNamespace) -> None:
    fake_cupy.is_hip = True
    with pytest.raises(backend.CudaUnavailable, match="ROCm"):
        backend.load_cupy()


def test_zero_devices_is_refused(fake_cupy: types.SimpleNamespace) -> None:
    fake_cupy.getDeviceCount = lambda: 0
    with pytest.raises(backend.CudaUnavailable, match="0 devices"):
        backend.load_cupy()


def test_runtime_failure_is_refused(fake_cupy: types.SimpleNamespace) -> None:
    def broken() -> int:
        raise RuntimeError("cudaErrorNoDevice")

    fake_cupy.getDeviceCount = broken
    with pytest.raises(backend.CudaUnavailable, match="cudaErrorNoDevice"):
        backend.load_cupy()


@pytest.mark.usefixtures("no_cupy")
@pytest.mark.parametrize("argv", [
    ["simulate", "--executor", "cuda", "--requests", "2", "--steps", "2", "--no-progress"],
    ["bench", "resolver", "--batches", "1"],
    ["bench", "spill"],
])
def test_cli_reports_a_missing_gpu_as_an_error(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    assert "needs CuPy" in capsys.readouterr().err


def test_shape_limits_are_checked_at_configuration() -> None:
    ok = ResolverShape.of(hot_rows=4096, top_k=2048, entries_per_slot=2, max_positions=1 << 17)
    assert ok.smem == resolve_smem_bytes(4096, 2048) == 4 * (68 + 2 * 4096 + 2 * 2048)
    assert positions_per_thread(2048) == 2 and rows_per_thread(4096) == 4
    bad = [
        dict(hot_rows=4095, top_k=2048, entries_per_slot=2, max_positions=10),  # H < E*K
        dict(hot_rows=4096, top_k=0, entries_per_slot=1, max_positions=10),
        dict(hot_rows=MAX_TOP_K * 4, top_k=MAX_TOP_K + 1, entries_per_slot=1, max_positions=10),
        dict(hot_rows=1 << 16, top_k=8, entries_per_slot=1, max_positions=10),  # 16-bit counts
        dict(hot_rows=64, top_k=8, entries_per_slot=0, max_positions=10),
        dict(hot_rows=64, top_k=8, entries_per_slot=1, max_positions=0),
        dict(hot_rows=30000, top_k=8192, entries_per_slot=1, max_positions=10),  # shared memory
    ]
    for kw in bad:
        with pytest.raises(ExecutorConfigError):
            ResolverShape.of(**kw)
