"""Rule: an error carries exactly what it names, and a defect of an input is named where
it is (survivors of the second, fresh sample of the mutation run: docs/mutation-run6/).

Each case is one no test stated: the rank an ack error or an unknown rank names, the
message an error builds from its fields, the bug registry's refusal of an unknown name,
a trace line past the length bound, a trace header that puts imports on two ranks, the
fault injector's counts, the churn bench's refusal of an unknown ack shape.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from hisparse.bugs import BUGS, get_bug
from hisparse.executor.errors import HotCapacityError
from hisparse.jsonlines import read_json_lines
from hisparse.msgfaults import MessageFaults
from hisparse.spec.errors import AckNotOwed, MessageGap, RepeatedAck, UnknownImport, UnknownRank
from hisparse.spec.trace import TraceHeader


def test_each_error_keeps_the_fields_it_was_given_and_says_them() -> None:
    e = UnknownRank(3, 2)
    assert (e.rank, e.ranks, str(e)) == (
        3, 2, "rank 3 is not one of the tensor-parallel ranks 0..1")
    r = RepeatedAck(7, 1, "completed")
    assert (r.transfer_id, r.rank, r.reason) == (7, 1, "rank 1 already reported it completed")
    n = AckNotOwed(9, 2, "dropped")
    assert (n.transfer_id, n.rank, n.reason) == (9, 2, "rank 2 owes no such ack: dropped")
    g = MessageGap("down of rank 2: expected 4, got 6", 2)
    assert (str(g), g.rank) == ("down of rank 2: expected 4, got 6", 2)
    u = UnknownImport(5, "page 3 landed twice")
    assert (str(u), u.import_id, u.reason) == ("import 5: page 3 landed twice", 5,
                                               "page 3 landed twice")
    h = HotCapacityError(1, 2, 3, 4)
    assert str(h).startswith("entry 1 (slot 2) misses 3 positions but only 4 hot rows")


def test_an_unknown_bug_name_is_refused_with_every_known_one() -> None:
    assert get_bug(BUGS[0].name) is BUGS[0]
    with pytest.raises(KeyError) as err:
        get_bug("no_such_bug")
    assert "unknown bug 'no_such_bug'" in str(err.value)
    assert all(b.name in str(err.value) for b in BUGS)


def test_a_line_past_the_bound_is_named_by_its_number(tmp_path: Path) -> None:
    f = tmp_path / "t.jsonl"
    f.write_text('{"a": 1}\n{"bb": 22222}\n')
    with pytest.raises(ValueError, match=rf"^{f}:2: line longer than 10 bytes$"):
        list(read_json_lines(f, ValueError, max_line_bytes=10))
    assert list(read_json_lines(f, ValueError, max_line_bytes=15)) == [
        (1, {"a": 1}), (2, {"bb": 22222})]


def test_a_header_with_imports_on_two_ranks_is_refused() -> None:
    base = dict(kind="header", format="hisparse-trace/3", requests={"r0": ["k0"]},
                gpu_blocks=2, host_blocks=2, host_pool_bytes=4, host_block_bytes=2,
                imports=["r0"])
    TraceHeader(**base)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="imports are modelled on one rank"):
        TraceHeader(**base, ranks=2)  # type: ignore[arg-type]


def test_the_fault_counts_count_each_fault_once() -> None:
    f = MessageFaults(1 / 3, seed=0, ranks=1)
    delivered = 0
    for i in range(600):
        delivered += len(f.route("down", 0, bytes([i % 256])))
    counts = f.counts
    assert all(v >= 0 for v in counts.values()) and counts["gaps"] == 0
    faults = counts["down_duplicated"] + counts["down_delayed"] + counts["down_dropped"]
    assert faults == 600  # at a third each, every message is one of the three
    late = len(f.flush("down", 0))
    assert delivered + late == 2 * counts["down_duplicated"] + counts["down_delayed"]


def test_the_churn_bench_refuses_an_unknown_ack_shape() -> None:
    from hisparse.bench import churn

    with pytest.raises(ValueError, match="acks must name one or more of"):
        churn.run(requests=1, acks=("sideways",))
    with pytest.raises(ValueError, match="acks must name one or more of"):
        churn.run(requests=1, acks=())


def test_an_io_error_mid_read_is_named_by_its_line(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # a disk error on line 2 is the caller's typed error, not an OSError
    # (jsonlines.py:36:raise:2 went on reading)
    import errno
    import io
    import itertools

    class Failing(io.BytesIO):
        def readline(self, size: int | None = -1) -> bytes:
            if self.tell() > 0:
                raise OSError(errno.EIO, "Input/output error")
            return super().readline(size)

    f = tmp_path / "t.jsonl"
    f.write_text('{"a": 1}\n{"b": 2}\n')
    raw = f.read_bytes()
    monkeypatch.setattr(Path, "open", lambda self, mode="r": Failing(raw))
    with pytest.raises(ValueError, match=rf"^{f}:2: cannot read: Input/output error$"):
        list(itertools.islice(read_json_lines(f, ValueError), 5))  # (bounded: no hang)
