"""TLC checks the golden trace encodings (marker ``tlc``): each stored module and cfg of
``tests/data/trace_golden/`` is model-checked as ``check_traces`` would run it, so the
text ``tests/test_trace_encoding_rules.py`` pins without Java is an encoding TLC gave
the expected verdict on: the accepted cases accepted, the injected bug's trace rejected
by the invariant its Python twin names, at the step where it broke.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hisparse.spec.trace import read_trace
from hisparse.tlc import TlcInstall
from hisparse.tlc.paths import tla_dir
from hisparse.tlc.runner import run_tlc
from hisparse.tracecheck import delta
from hisparse.tracecheck import module as gen
from hisparse.tracecheck.errtrace import stop_point
from tests.trace_golden import BUG, BUG_CATCHES, CASES, generate

pytestmark = pytest.mark.tlc


def test_tlc_gives_each_golden_encoding_its_verdict(tlc: TlcInstall, tmp_path: Path) -> None:
    for case in CASES:
        module_text, cfg_text = case.module_path.read_text(), case.cfg_path.read_text()
        # the stored text is today's encoding (also checked without TLC)
        assert generate(case) == (module_text, cfg_text), case.name
        work = tmp_path / case.name
        work.mkdir()
        module, cfg = work / f"{gen.MODULE}.tla", work / f"{gen.MODULE}.cfg"
        module.write_text(module_text)
        cfg.write_text(cfg_text)
        res = run_tlc(module, cfg, work, 1, tla_dir=tla_dir(), install=tlc)
        out = res.output
        if case.accepted:
            assert (out.result, out.violated) == ("ok", []), (case.name, out.reason)
            assert out.distinct_states > 0
            continue
        trace = read_trace(case.trace_path)
        assert trace.header.bug == BUG
        assert out.result == "violation", (case.name, out.reason)
        assert [delta.spec_name(v) for v in out.violated] == [BUG_CATCHES]
        # broken in the state after the last step: trace 1, about to take one past it
        stop = stop_point(res.raw)
        assert stop is not None and (stop.tr, stop.cursor) == (1, len(trace.steps) + 1)
