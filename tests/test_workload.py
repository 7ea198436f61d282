"""Workloads: the Mooncake trace format is parsed exactly, bad files fail with the line
at fault, and a replay runs through the whole system cleanly with prefix sharing."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from hisparse.engine.workload import MOONCAKE_TRACE
from hisparse.simulate import SimulateOptions, simulate
from hisparse.workload import MooncakeShape, SyntheticShape, WorkloadError, mooncake, synthetic

DATA = Path(__file__).parent / "data" / "mooncake_small.jsonl"
REAL = MOONCAKE_TRACE  # beside the checkout, or HISPARSE_MOONCAKE

SMALL = SimulateOptions(
    workload="mooncake", workload_path=DATA, requests=100, steps=600, time_compression=1.0,
    block_tokens=128, gpu_blocks=40, host_blocks=48, max_pages=16, abort_rate=0.0,
    concurrency=6,
)


def test_mooncake_pages_share_keys_exactly_when_hash_blocks_match() -> None:
    arr = mooncake(DATA, MooncakeShape(requests=100, time_compression=1.0, block_tokens=128))
    assert len(arr) == 12
    a, b = arr[0], arr[1]
    assert len(a.page_keys) == 11 and len(b.page_keys) == 9  # ceil(1400/128), ceil(1100/128)
    assert a.page_keys[:8] == b.page_keys[:8]  # hash ids 0, 1 = 8 pages of 128 tokens
    assert a.page_keys[8] != b.page_keys[8]  # hash 2 vs 3
    assert [x.step for x in arr[:4]] == [0, 0, 2, 4]  # timestamp ms / 30 ms per step
    assert arr[0].decode_steps == 30 and arr[9].decode_steps == 1  # output 0: one step
    fast = mooncake(DATA, MooncakeShape(requests=3, time_compression=2.0, block_tokens=512))
    assert [x.step for x in fast] == [0, 0, 1] and len(fast[2].page_keys) == 4
    capped = mooncake(DATA, MooncakeShape(100, 1.0, 64, max_decode=10))
    assert max(x.decode_steps for x in capped) == 10
    # a cap of 0 is a cap too: every request decodes its one least step
    # (workload.py:132:none:0 read 0 as no cap)
    assert {x.decode_steps for x in mooncake(DATA, MooncakeShape(100, 1.0, 64, max_decode=0))} \
        == {1}


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("not json", "not JSON"),
        ('{"timestamp": 0, "output_length": 3, "hash_ids": [1]}', "missing field 'input_length'"),
        ('{"timestamp": -1, "input_length": 5, "output_length": 3, "hash_ids": [1]}',
         "timestamp must be a non-negative integer"),
        ('{"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [1]}',
         "fewer than input_length 600"),
        ('{"timestamp": 0, "input_length": 6, "output_length": 3, "hash_ids": "x"}',
         "hash_ids must be a list"),
        ('{"timestamp": 0, "input_length": 6, "output_length": 3, "hash_ids": [true]}',
         "hash_ids must be a list of integers"),
        # hostile lines: each a one-line WorkloadError, no ValueError/RecursionError/...
        ('{"timestamp": ' + "9" * 5000 + "}", "not JSON .*number out of range"),
        ("[" * 100_000, "not JSON .*recursion limit exceeded"),
        ('{"timestamp": 0, "input_length": ' + "9" * 4000
         + ', "output_length": 3, "hash_ids": [1]}', "input_length must be a non-negative"),
        ('{"timestamp": ' + "9" * 300 + ', "input_length": 6, "output_length": 3, '
         '"hash_ids": [1]}', "timestamp must be a non-negative integer of at most 2"),
        ('{"timestamp": 0, "input_length": 6', "not JSON .*EOF"),
        ("[1, 2]", "missing field 'timestamp'"),
    ],
)
def test_bad_trace_line_names_the_line(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [0]}\n'
                    + line + "\n")
    with pytest.raises(WorkloadError, match=f"t.jsonl:2: .*{message}"):
        mooncake(path, MooncakeShape(10, 1.0, 64))


def test_a_line_not_utf8_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'{"timestamp": 0, "input_length": 10, "output_length": 1, '
                     b'"hash_ids": [0]}\n\xff\xfe\n')
    with pytest.raises(WorkloadError, match=r"t\.jsonl:2: not UTF-8"):
        mooncake(path, MooncakeShape(10, 1.0, 64))


def test_lines_after_the_requests_taken_are_not_read(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [0]}\n'
                    + "[" * 100_000 + "\n")
    assert len(mooncake(path, MooncakeShape(1, 1.0, 64))) == 1
    with pytest.raises(WorkloadError, match=r"t\.jsonl:2: not JSON"):
        mooncake(path, MooncakeShape(2, 1.0, 64))


def test_malformed_workload_exits_2_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [0]}\n'
                    '{"timestamp": ' + "9" * 5000 + "}\n")
    proc = subprocess.run([sys.executable, "-m", "hisparse", "simulate", "--workload",
                           "mooncake", str(path), "--no-progress"], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("hisparse") and f"{path}:2: not JSON" in line, line


def test_engine_trace_rows_name_the_bad_line(tmp_path: Path) -> None:
    from hisparse.engine.config import EngineConfigError
    from hisparse.engine.workload import _read_trace

    path = tmp_path / "t.jsonl"
    for bad, words in (("[" * 100_000, "not JSON"), ('{"input_length": 1}', "output_length"),
                       ('{"input_length": 1, "output_length": 2, "hash_ids": [1.5]}',
                        "hash_ids"),
                       # one bad id among good ones (engine/workload.py:167:collection:0)
                       ('{"input_length": 1, "output_length": 2, "hash_ids": [0, true]}',
                        "hash_ids")):
        path.write_text('{"input_length": 1, "output_length": 2, "hash_ids": [0]}\n'
                        + bad + "\n")
        with pytest.raises(EngineConfigError, match=f"t.jsonl:2: .*{words}"):
            list(_read_trace(path))


def test_trace_shape_errors(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="does not divide"):
        mooncake(DATA, MooncakeShape(10, 1.0, 96))
    with pytest.raises(WorkloadError, match="cannot read"):
        mooncake(tmp_path / "missing.jsonl", MooncakeShape(10, 1.0, 64))
    (tmp_path / "back.jsonl").write_text(
        '{"timestamp": 90, "input_length": 10, "output_length": 1, "hash_ids": [0]}\n'
        '{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}\n')
    with pytest.raises(WorkloadError, match="not in arrival order"):
        mooncake(tmp_path / "back.jsonl", MooncakeShape(10, 1.0, 64))


def test_synthetic_arrivals_do_not_depend_on_steps() -> None:
    shape = SyntheticShape(requests=50, arrival_rate=0.5, min_pages=2, max_pages=4,
                           prefixes=2, prefix_pages=1)
    a = synthetic(shape, seed=3)
    assert a == synthetic(shape, seed=3) and a != synthetic(shape, seed=4)
    assert [x.step for x in a] == sorted(x.step for x in a)
    assert 40 <= a[-1].step <= 200  # ~100 steps at 0.5 per step


def test_mooncake_replay_is_clean_and_exercises_offload() -> None:
    rep = simulate(SMALL)
    assert rep.violations == 0 and rep.data_mismatches == 0, rep.notes
    assert rep.requests == 12 and rep.finished == 12 and rep.aborted == 0
    assert rep.spills > 0 and rep.misses > 0 and rep.prefix_hits > 0, rep.notes
    assert rep.never_admitted == rep.still_running == rep.not_arrived == 0


def test_mooncake_request_larger_than_gpu_pool_is_reported_not_stuck() -> None:
    rep = simulate(replace(SMALL, gpu_blocks=14, host_blocks=40))
    # 1900, 2000 and 1800 tokens need 15, 16 and 15 pages of 128 tokens
    assert rep.too_large == 3 and rep.never_admitted == 3
    assert rep.finished == 9 and rep.violations == 0
    assert any("more pages than the whole GPU pool" in n for n in rep.notes)


def test_real_mooncake_trace_replays() -> None:
    """The real trace (../shared in CI and in a worktree next to shared/)."""
    if not REAL.is_file():
        pytest.fail(f"the Mooncake trace is missing: expected {REAL} (a copy of shared/ "
                    "beside the repository)")
    opts = replace(SMALL, workload_path=REAL, requests=24, steps=400, time_compression=20.0,
                   max_decode=12, block_tokens=512, gpu_blocks=240, host_blocks=200,
                   concurrency=8, check=False)
    rep = simulate(opts)
    assert rep.requests == 24 and rep.violations == 0 and rep.data_mismatches == 0
    assert rep.prefix_hits > 0 and rep.spills > 0, rep.notes


def test_an_empty_prompt_is_skipped_and_the_requests_after_it_are_read(tmp_path: Path) -> None:
    # (the sampled whole-suite run's survivor workload.py:125:loop:0: no line of any test
    # trace had an empty prompt, so `continue` -> `break` dropped nothing there)
    path = tmp_path / "t.jsonl"
    rows = [(0, 100, [1]), (10, 0, []), (20, 70, [2])]
    path.write_text("".join(
        json.dumps({"timestamp": ts, "input_length": n, "output_length": 3, "hash_ids": h})
        + "\n" for ts, n, h in rows))
    got = mooncake(path, MooncakeShape(10, 1.0, 64))
    assert [(a.request_id, a.page_keys) for a in got] == [
        ("mc0", ("m1:0", "m1:1")), ("mc1", ("m2:0", "m2:1"))]


def test_a_trace_with_no_request_is_refused(tmp_path: Path) -> None:
    # empty, or every prompt empty (workload.py:142:raise:3: no test had one)
    path = tmp_path / "t.jsonl"
    for text in ("", '{"timestamp": 0, "input_length": 0, "output_length": 3, "hash_ids": []}\n'):
        path.write_text(text)
        with pytest.raises(WorkloadError, match=r"t\.jsonl: no request in the trace$"):
            mooncake(path, MooncakeShape(10, 1.0, 64))


def test_the_mooncake_workload_needs_its_trace() -> None:
    # (simulate.py:130:raise:2: no test left the path out)
    from hisparse.simulate import SimulateOptions, build_workload

    with pytest.raises(WorkloadError, match=r"^the mooncake workload needs the trace's path$"):
        build_workload(SimulateOptions(workload="mooncake", workload_path=None))
