"""Rule: over any interleaving of sends, duplicated or late deliveries and loss paths, a
receiver of any rank applies each message of the current epoch once, in order, ignores
replays and pre-loss messages, and reports a gap exactly when one was lost; a verdict
changes nothing but the ignored count (``hisparse/channel.py``).

From the guard survivor of the second guard-phase run (docs/mutation-survivors.md)
``39:var:8`` (``epoch == self.epoch`` → ``epoch == self.rank``): on a rank whose number
differs from its epoch (rank 1 before any loss), a duplicate was applied a second time
instead of ignored; every test replayed to rank 0 at epoch 0 only. Here the rank is
drawn, and the expected verdict comes from an independent record of what was sent and
applied, not from the receiver's own fields.

A gap names the rank whose loss path the engine runs (``MessageGap.rank``): from the
sampled whole-suite run's survivor ``spec/errors.py:96:var:0`` (the gap carried the
expected number as its rank; every test matched the message only).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hisparse.channel import Receiver, Sender
from hisparse.spec.errors import MessageGap

Op = tuple[str, int]
OPS = st.lists(st.one_of(st.tuples(st.just("send"), st.just(0)),
                         st.tuples(st.just("deliver"), st.integers(0, 40)),
                         st.tuples(st.just("loss"), st.just(0))), max_size=40)


@settings(max_examples=200, deadline=None)
@given(rank=st.integers(0, 3), ops=OPS)
def test_each_fresh_message_is_applied_once_in_order(rank: int, ops: list[Op]) -> None:
    tx, rx = Sender(), Receiver("test", rank)
    sent: list[tuple[int, int, int]] = []
    epoch = 0  # loss paths run so far
    applied: dict[int, list[int]] = {0: []}  # seqs applied, per epoch
    first = {0: 0}  # each epoch's first number
    ignored = 0
    for op, i in ops:
        if op == "send":
            sent.append(tx.stamp())
            continue
        if op == "loss":
            tx.new_epoch()
            rx.lost()
            epoch += 1
            applied[epoch] = []
            first[epoch] = len(sent)
            continue
        if not sent:
            continue
        e, since, seq = sent[i % len(sent)]
        assert e <= epoch and since == first[e]
        taken = applied[epoch]
        expected = taken[-1] + 1 if taken else first[epoch]
        before = (rx.epoch, rx.next)
        if e < epoch or seq < expected:
            assert rx.classify(e, since, seq) == "ignore"
            ignored += 1
        elif seq == expected:
            assert rx.classify(e, since, seq) == "apply"
            rx.accept(seq)
            taken.append(seq)
            continue
        else:
            with pytest.raises(MessageGap, match=f"expected message {expected}, got {seq}") as gap:
                rx.classify(e, since, seq)
            assert gap.value.rank == rank  # the engine runs the loss path of this rank
        assert (rx.epoch, rx.next) == before and rx.ignored == ignored
    for e, seqs in applied.items():  # in order, once each, from the epoch's first
        assert seqs == list(range(first[e], first[e] + len(seqs)))


@given(rank=st.integers(0, 3), losses=st.integers(0, 3), ahead=st.integers(1, 3))
def test_an_epoch_this_side_never_started_is_a_gap(rank: int, losses: int,
                                                   ahead: int) -> None:
    rx = Receiver("test", rank)
    for _ in range(losses):
        rx.lost()
    with pytest.raises(MessageGap) as gap:
        rx.classify(losses + ahead, 0, 0)
    assert gap.value.rank == rank
    assert (rx.epoch, rx.next, rx.ignored) == (losses, None, 0)
