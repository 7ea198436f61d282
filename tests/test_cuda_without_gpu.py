"""The CUDA executor's behaviour where it cannot run (CI): clean imports, clear errors.

Everything here runs without a GPU: the package imports, a missing CuPy / a ROCm build /
zero devices each give ``CudaUnavailable`` with what to do, the CLI turns that into
exit code 2, and the resolver's shape limits are refused at configuration time.
"""

from __future__ import annotations

import contextlib
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hisparse.cli import main
from hisparse.executor import Executor, ExecutorConfigError
from hisparse.executor.cuda import CudaExecutor, CudaPools, backend, kernels
from hisparse.executor.cuda.kernels import (
    CONTROL,
    MAX_TOP_K,
    WS_INTS,
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
    ["bench", "pd-staging"],
    ["simulate", "--executor", "cuda", "--pd-share", "0.5", "--requests", "2", "--steps", "2",
     "--no-progress"],
])
def test_cli_reports_a_missing_gpu_as_an_error(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    assert "needs CuPy" in capsys.readouterr().err


def test_shape_limits_are_checked_at_configuration() -> None:
    ok = ResolverShape.of(hot_rows=4096, top_k=2048, num_speculative_tokens=1, max_positions=1 << 17)
    # scratch, used[H], victims[K], first_row[K], new_order[H] ints; then int64 sort
    # keys for K rounded up to a power of two, 8-byte aligned
    assert WS_INTS == 68
    assert ok.smem == resolve_smem_bytes(4096, 2048) == 4 * (68 + 2 * 4096 + 2 * 2048) + 8 * 2048
    assert resolve_smem_bytes(3, 3) == 4 * 80 + 8 * 4
    assert resolve_smem_bytes(1, 1) == 4 * 72 + 8 * 1
    assert positions_per_thread(2048) == 2 and rows_per_thread(4096) == 4
    bad = [
        dict(hot_rows=4095, top_k=2048, num_speculative_tokens=1, max_positions=10),  # H < E*K
        dict(hot_rows=4096, top_k=0, num_speculative_tokens=0, max_positions=10),
        dict(hot_rows=MAX_TOP_K * 4, top_k=MAX_TOP_K + 1, num_speculative_tokens=0, max_positions=10),
        dict(hot_rows=1 << 16, top_k=8, num_speculative_tokens=0, max_positions=10),  # 16-bit counts
        dict(hot_rows=64, top_k=8, num_speculative_tokens=-1, max_positions=10),
        dict(hot_rows=64, top_k=8, num_speculative_tokens=0, max_positions=0),
        dict(hot_rows=30000, top_k=8192, num_speculative_tokens=0, max_positions=10),  # shared memory
    ]
    for kw in bad:
        with pytest.raises(ExecutorConfigError):
            ResolverShape.of(**kw)


def test_kernel_layout_constants_come_from_kernels_py(
    fake_cupy: types.SimpleNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kernels.cu defines neither the workspace size nor the launch-control layout: both
    are compiled in from kernels.py, the one definition the host side reads too."""
    seen: list[tuple[str, ...]] = []

    class Module:
        def __init__(self, code: str, options: tuple[str, ...]) -> None:
            assert "#define WS_INTS HS_WS_INTS" in code and "#define WS_INTS 6" not in code
            seen.append(options)

        def get_function(self, name: str) -> str:
            return name

    cupy: Any = sys.modules["cupy"]
    cupy.RawModule = Module
    cupy.cuda.Device = lambda _id: contextlib.nullcontext()
    kernels.compile_kernels.cache_clear()
    try:
        kernels.compile_kernels(0, ("-DHS_IPT=2",))
    finally:
        kernels.compile_kernels.cache_clear()
    (options,) = seen
    assert f"-DHS_WS_INTS={WS_INTS}" in options and "-DHS_IPT=2" in options
    assert f"-DSORT_MIN_BATCH={kernels.SORT_MIN_BATCH}" in options
    for name, value in CONTROL.items():
        assert f"-D{name}={value}" in options
    source = (Path(kernels.__file__).parent / "kernels.cu").read_text()
    for name in CONTROL:
        assert f"#define {name} " not in source, name


@pytest.mark.usefixtures("no_cupy")
def test_device_staging_pool_without_cupy_says_what_to_install() -> None:
    from hisparse.executor.cuda import CudaUnavailable
    from hisparse.executor.cuda.staging import DeviceStagingPool

    with pytest.raises(CudaUnavailable, match="needs CuPy"):
        DeviceStagingPool(4096, 2, 1024, stream=None)


class _FakeDeviceArray:
    """Device memory as the transport sees it: only ``__cuda_array_interface__``."""

    def __init__(self, ptr: int) -> None:
        self.__cuda_array_interface__ = {"data": (ptr, False), "shape": (16,),
                                         "typestr": "|u1", "version": 3}


def test_a_host_staging_pool_refuses_to_write_device_memory() -> None:
    import numpy as np

    from hisparse.transport import StagingPool, TransportError
    from hisparse.transport.staging import buffer_address, on_device

    pool = StagingPool(64, 2, 32)
    fake = _FakeDeviceArray(0x7000_0000)
    assert on_device(fake) and buffer_address(fake) == 0x7000_0000
    assert not on_device(pool.buffer) and buffer_address(pool.buffer) == pool.address(0)
    with pytest.raises(TransportError, match="DeviceStagingPool"):
        pool.write(fake, np.ones(16, np.uint8))
    view = pool.view(1)
    pool.write(view, np.full(32, 7, np.uint8))  # host memory: written
    assert pool.buffer[32:].tolist() == [7] * 32 and pool.buffer[:32].tolist() == [0] * 32
