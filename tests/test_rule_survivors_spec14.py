"""Rule: StartSpill's page check refuses a malformed page and names why a known page may
not spill; a refused WorkerLoss (the variant whose loss path skips noticed gaps) changes
nothing -- rules that the fourteenth group of spec/ survivors of the whole mutation run
showed (docs/mutation-run7).
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from hisparse.spec.errors import ActionNotEnabled
from tests.protocol_helpers import legal_moves, make_machine
from tests.test_rule_survivors_spec9 import PURE
from tests.test_rule_survivors_spec11 import snapshot, walked

# the mypyc build refuses a non-Page argument at the call itself (as in spec9)
REFUSED_AS: type[Exception] = ActionNotEnabled if PURE else TypeError
UNKNOWN_PAGE = "unknown page" if PURE else r"^tuple\[str, int\] object expected"


def test_a_malformed_page_is_refused_by_name_and_a_known_one_says_why_it_may_not_spill() -> None:
    """In every walked state, check_spill of a page that is not a (request, index) pair --
    a 1-tuple, a 3-tuple, a list -- is refused as an unknown page (in the compiled build:
    by its type check, a TypeError) and changes nothing.
    Every page of every request: the GPU block it is resident on when its request runs,
    it is on the GPU and its block is not pinned; else refused, saying which condition
    failed (not running / not resident on the GPU / already pinned).
    (kills spec/machine.py:415:bool:46, which took a 1-tuple or a list for a pair and
    failed with IndexError or TypeError; spec/machine.py:421:cmp:76, which called a pinned
    resident page not resident and failed with TypeError on a page with no location)"""
    seen: set[str] = set()
    for _, m in walked():
        s = m.state
        for r, keys in list(s.page_keys.items()):
            for bad in ((r,), (r, 1, 0), [r, 1]):
                before = snapshot(m)
                with pytest.raises(REFUSED_AS, match=UNKNOWN_PAGE):
                    m.check_spill(bad)  # type: ignore[arg-type]
                assert snapshot(m) == before
            for i in range(1, len(keys) + 1):
                p = (r, i)
                where = s.loc[p]
                if s.req[r] != "running":
                    why = f"request {r!r} is {s.req[r]}"
                elif where is None or where[0] != "gpu":
                    why = "is not resident on the GPU"
                elif s.src_pin[where[1]]:
                    why = f"GPU block {where[1]} is already pinned by a transfer"
                else:
                    assert m.check_spill(p) == where
                    seen.add("ok")
                    continue
                seen.add(why.split()[-1] if "pinned" in why else why.split()[0])
                with pytest.raises(ActionNotEnabled) as e:
                    m.check_spill(p)
                assert why in str(e.value), (p, str(e.value))
    # reached: a page of a request not running, a pinned one, a spillable one
    assert {"ok", "transfer", "request"} <= seen, seen


@pytest.mark.parametrize("config", [{}, {"ranks": 2}], ids=["one-rank", "two-ranks"])
def test_a_worker_loss_the_variant_refuses_changes_nothing(config: dict[str, Any]) -> None:
    """Under loss_path_ignores_gaps the loss path runs only for a restart: WorkerLoss of a
    rank with a noticed gap (lost[w]) is refused, and the refusal changes nothing -- its
    command queue included. Walks over the legal moves (the channels' faults included)
    reach such ranks.
    (kills spec/machine.py:1331:reorder:33, which cleared the rank's commands before the
    refusal)"""
    refused = 0
    for seed in range(6):
        rng = random.Random(seed)
        m = make_machine("loss_path_ignores_gaps", record=True, **config)
        for _ in range(60):
            for w in range(len(m.state.down)):
                if m.state.lost[w]:
                    before = snapshot(m)
                    with pytest.raises(ActionNotEnabled, match="never handed to the loss"):
                        m.WorkerLoss(w)
                    assert snapshot(m) == before
                    refused += 1
            # (the oracle's guard does not know the variant: its refused losses are left out)
            moves = [(a, args) for a, args in legal_moves(m)
                     if not (a == "WorkerLoss" and m.state.lost[args[0]])]
            if not moves:
                break
            action, args = rng.choice(moves)
            getattr(m, action)(*args)
    assert refused, "no walk reached a rank with a noticed gap"
