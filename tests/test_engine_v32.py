"""The engine at DeepSeek-V3.2's layer geometry, and the equal-HBM benchmark's arithmetic.

Everywhere: the geometry's figures (FP8 indexer keys of 132 bytes, V3.2 and GLM-5.2
index leaders, the weight bytes a step reads), the capacity guess and the batches the
benchmark times. GPU (marked ``gpu``): the fused FP8 indexer scan equals its torch
reference on random keys, and a HiSparse engine (one CUDA graph per step) and the
all-resident oracle stay token- and logit-identical at this geometry, both sharings.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from hisparse.bench.equalhbm import (
    HOST_EXTRA_BLOCKS,
    curve_batches,
    guess,
    host_blocks_for,
    host_largest,
    host_pool_bytes,
    max_context_for,
    measure_attempts,
)
from hisparse.engine.config import EngineConfigError, EngineShape, ModelShape
from hisparse.engine.geometry import V32_MLP_ACTIVE, leaders, v32_model
from hisparse.models import MODELS


def test_v32_geometry_figures() -> None:
    m = v32_model(8, "v3.2")
    assert m.index_leaders == tuple(range(8)) and m.index_key_bytes == 132
    assert (m.hidden, m.heads, m.q_rank, m.mlp_dim) == (7168, 128, 1536, 18432)
    assert V32_MLP_ACTIVE == 9 * 2048
    assert m.kv_bytes_per_token() == 8 * 656 + 8 * 132
    glm = v32_model(8, "glm-5.2")
    assert glm.index_leaders == (0, 1, 2, 2, 2, 2, 6, 6)
    assert glm.index_leaders == MODELS["glm-5.2"].index_leaders[:8]
    assert glm.kv_bytes_per_token() == 8 * 656 + 4 * 132
    assert ModelShape().index_key_bytes == 256  # the bf16 default is unchanged


def test_the_v32_geometry_carries_the_seed_it_is_given() -> None:
    # (the sampled whole-suite run's engine/geometry.py:49:var:2 seeded it with `layers`)
    assert [v32_model(8, "v3.2", seed=s).seed for s in (0, 3, 8)] == [0, 3, 8]
    assert v32_model(4, "v3.2").seed == 0


def test_weight_bytes_count_every_projection() -> None:
    m = v32_model(8, "v3.2")
    q = 7168 * 1536 + 1536 * 128 * 192
    attn = q + 7168 * 576 + 2 * 128 * 128 * 512 + 128 * 128 * 7168
    mlp = 3 * 7168 * 18432
    index = 1536 * 64 * 128 + 7168 * (128 + 64)
    assert m.weight_bytes() == 2 * (8 * (attn + mlp) + 8 * index + 7168 * 16384)
    # about 1.2 GB a layer: the fixed cost a batch shares
    assert 1.1e9 < m.weight_bytes() / 8 < 1.3e9


def test_bad_geometry_is_refused() -> None:
    with pytest.raises(EngineConfigError, match="q_rank"):
        ModelShape(q_rank=-1)
    with pytest.raises(EngineConfigError, match="sharing"):
        leaders(8, "every-other")
    with pytest.raises(EngineConfigError, match="78 layers"):
        leaders(79, "glm-5.2")


def test_capacity_guess_and_curve() -> None:
    m = v32_model(8, "v3.2")
    ctx = 131072
    shape = EngineShape(slots=1, max_context=max_context_for(ctx, 44), top_k=2048)
    assert shape.max_context == 132096
    res = guess(m, shape, ctx, 6.0, "resident")
    hs = guess(m, shape, ctx, 6.0, "hisparse")
    per_res = 8 * 656 * ctx + 8 * 132 * ctx
    assert res == (6 << 30) // per_res == 7  # the regime the peers report: 5-8 requests
    assert hs >= 4 * res
    assert curve_batches("resident", 7, 7) == [1, 3, 7]
    assert curve_batches("hisparse", 33, 7) == [1, 7, 33]
    assert curve_batches("hisparse", 1, 7) == [1]
    assert curve_batches("resident", 51, 51, "largest") == [51]
    assert curve_batches("hisparse", 0, 51, "largest") == []
    with pytest.raises(ValueError, match="curve"):
        curve_batches("resident", 7, 7, "some")
    assert measure_attempts(196) == [196, 195, 193, 189]
    assert measure_attempts(49) == [49, 48, 47, 46]
    assert measure_attempts(2) == [2, 1]
    assert measure_attempts(1) == [1]


@pytest.mark.parametrize("ctx", [32768, 131072])
def test_host_bound_is_the_largest_pool_that_fits(ctx: int) -> None:
    """The host bound is exact: its batch's measured pool fits in the bytes given, one
    request more does not (a block is 64 tokens of 656-byte rows in each of 8 layers)."""
    m = v32_model(8, "v3.2")
    shape = EngineShape(slots=1, max_context=max_context_for(ctx, 44), top_k=2048)
    pages = -(-(ctx + 44) // 64)
    assert host_pool_bytes(m, shape, 1) == 64 * 656 * 8
    assert host_blocks_for(3, pages) == 3 * pages + HOST_EXTRA_BLOCKS
    for gib in (0.5, 6.0, 88.0):
        b = host_largest(m, shape, ctx, 44, gib)
        limit = int(gib * (1 << 30))
        assert host_pool_bytes(m, shape, host_blocks_for(b, pages)) <= limit
        assert host_pool_bytes(m, shape, host_blocks_for(b + 1, pages)) > limit
    # 88 GiB pins about 137 requests of 128k, 548 of 32k: the bound the H200's host
    # (128 GiB) puts on the large budgets
    assert host_largest(m, shape, ctx, 44, 88.0) == (137 if ctx == 131072 else 548)
    assert host_largest(m, shape, ctx, 44, 1e-6) == 0


# -- GPU ----------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("tiles", [1, 4])
@pytest.mark.parametrize("fp8_queries", [False, True])
def test_fused_fp8_indexer_scan_equals_its_reference(tiles: int, fp8_queries: bool) -> None:
    import torch

    from hisparse.engine.indexer import (
        quantize_keys,
        quantize_queries,
        scores_fused,
        scores_reference,
    )

    dev = torch.device("cuda:0")
    gen = torch.Generator(device=dev).manual_seed(7)
    for n, per_slot, t in ((3, 1, 1000), (2, 2, 4096), (5, 1, 130)):
        e = n * per_slot
        q = torch.randn(e, 64, 128, generator=gen, device=dev).to(torch.bfloat16)
        w = torch.randn(e, 64, generator=gen, device=dev)
        keys = torch.randn(n * t, 128, generator=gen, device=dev).to(torch.bfloat16)
        bits, scale = quantize_keys(keys)
        bits, scale = bits.view(n, t, 128), scale.view(n, t)
        pos = torch.randint(0, t, (e,), generator=gen, device=dev)
        if fp8_queries:
            exact = scores_reference(q, w, bits, scale, pos, per_slot)
            q, w = quantize_queries(q, w)
            assert q.dtype == torch.uint8 and w.shape == (e, 64)
        got = scores_fused(q, w, bits, scale, pos, per_slot, tiles=tiles)
        ref = scores_reference(q, w, bits, scale, pos, per_slot)
        if fp8_queries:  # the folded scales give the bf16 queries' scores to FP8 rounding
            live = ~torch.isneginf(exact)
            fold = (ref[live] - exact[live]).norm() / exact[live].norm()
            assert float(fold) < 0.1, float(fold)
        assert torch.equal(torch.isneginf(got), torch.isneginf(ref))
        live = ~torch.isneginf(ref)
        err = (got[live] - ref[live]).norm() / ref[live].norm()
        assert float(err) < 1e-3, float(err)


@pytest.fixture(scope="module", params=["v3.2", "glm-5.2"])
def v32(request: Any) -> Any:
    import torch

    from hisparse.engine.model import Model

    model = Model(v32_model(8, request.param), torch.device("cuda:0"))
    yield model
    del model
    torch.cuda.empty_cache()


@pytest.mark.gpu
def test_v32_geometry_decode_is_bit_identical_to_all_resident(v32: Any) -> None:
    """40 steps, 8 slots, Mooncake contexts up to 32k, 1 draft, spills and aborts."""
    from hisparse.engine.lockstep import Lockstep, hisparse_engine, resident_engine
    from hisparse.engine.workload import mooncake_requests

    shape = EngineShape(slots=8, max_context=32768, top_k=2048, num_speculative_tokens=1)
    reqs = mooncake_requests(shape, vocab=v32.shape.vocab, count=16, abort_every=5,
                             max_new=(24, 48))
    hs, sched = hisparse_engine(v32, shape, gpu_blocks=1600, host_blocks=8000, graph=True)
    oracle = resident_engine(v32, shape, graph=False)
    rep = Lockstep([hs, oracle], [sched, None], reqs).run(40)
    d = rep.as_dict()
    d.pop("batches")
    print(f"\nv32 {v32.shape.index_leaders}: " + ", ".join(f"{k}={v}" for k, v in d.items()))
    assert rep.entries_compared > 0 and rep.nonfinite_logits == 0
    assert rep.identical, (rep.first_mismatch_step, rep.max_abs_logit_diff)
    assert rep.spills > 0 and rep.misses > 0 and rep.hot_hits > 0


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    code = ("import sys; sys.modules['torch'] = None\nfrom hisparse.cli import main\n"
            f"sys.exit(main({list(args)!r}))\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False)


def test_bench_equal_hbm_refuses_bad_flags_in_one_line() -> None:
    for flags in (["--sharing", "every-other"], ["--contexts", "128k"],
                  ["--contexts", "0"], ["--budget-gib", "-1"]):
        out = _cli("bench", "equal-hbm", *flags)
        assert out.returncode == 2, (flags, out.stderr)
        assert "Traceback" not in out.stderr
        assert out.stderr.strip().splitlines()[-1].startswith("hisparse bench equal-hbm: error")


def test_bench_equal_hbm_without_torch_exits_2_saying_what_to_install() -> None:
    out = _cli("bench", "equal-hbm")
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    # the GPU check speaks first: without CuPy (CI) it names the extra to install, with
    # CuPy and no device (a GPU host's GPU hidden) it says so; with a GPU, the torch check
    assert any(s in out.stderr for s in ("hisparse[cuda12]", "no usable NVIDIA GPU",
                                         "hisparse[engine]"))
