"""Typed errors of the protocol machine.

Every refusal names what was refused and why, and is raised before any state
changes: a caller that catches it holds the same state it had before the call.
"""

from __future__ import annotations


class ProtocolError(Exception):
    """Base class of every error the protocol machine raises."""


class ActionNotEnabled(ProtocolError):
    """An action was requested in a state where the TLA+ spec does not enable it."""

    def __init__(self, action: str, reason: str) -> None:
        super().__init__(f"{action} is not enabled: {reason}")
        self.action = action
        self.reason = reason


class UnknownTransfer(ProtocolError):
    """A worker ack names a transfer ID that is not open (unknown, stale or duplicate)."""

    def __init__(self, transfer_id: int, reason: str) -> None:
        super().__init__(f"transfer {transfer_id}: {reason}")
        self.transfer_id = transfer_id
        self.reason = reason


class UnknownRank(ProtocolError):
    """A worker meta or loss report names a rank the protocol does not have."""

    def __init__(self, rank: int, ranks: int) -> None:
        super().__init__(f"rank {rank!r} is not one of the tensor-parallel ranks 0..{ranks - 1}")
        self.rank = rank
        self.ranks = ranks


class RepeatedAck(UnknownTransfer):
    """A rank acknowledges a transfer it already acknowledged (the same direction)."""

    def __init__(self, transfer_id: int, rank: int, what: str) -> None:
        super().__init__(transfer_id, f"rank {rank} already reported it {what}")
        self.rank = rank


class AckNotOwed(UnknownTransfer):
    """A rank acknowledges an open transfer it owes no (more) acknowledgement for: a
    reader's completed ack, or an ack after that rank's loss dropped its command."""

    def __init__(self, transfer_id: int, rank: int, reason: str) -> None:
        super().__init__(transfer_id, f"rank {rank} owes no such ack: {reason}")
        self.rank = rank


class InvariantViolation(ProtocolError):
    """A safety invariant of tla/HiSparse.tla does not hold; ``name`` is its TLA+ name."""

    def __init__(self, name: str, details: str) -> None:
        super().__init__(f"invariant {name} violated: {details}")
        self.name = name
        self.details = details


class IllegalTransition(ProtocolError):
    """A lifecycle trigger was fired from a state its declared table does not allow."""

    def __init__(self, machine: str, state: str, trigger: str) -> None:
        super().__init__(f"{machine}: no transition {trigger!r} from state {state!r}")
        self.machine = machine
        self.state = state
        self.trigger = trigger


class MalformedMessage(ProtocolError):
    """A message built without validation (``model_construct``) holds a value of the
    wrong type where an ID goes; nothing was applied."""


class MessageGap(ProtocolError):
    """A sequenced message arrived numbered past the one expected next: a message before
    it was lost. Nothing was applied; the engine runs the worker-loss path for ``rank``
    (restart the worker, then ``on_worker_lost``)."""

    def __init__(self, message: str, rank: int = -1) -> None:
        super().__init__(message)
        self.rank = rank


def gap(direction: str, rank: int, expected: int, got: int) -> MessageGap:
    """The gap a receiver reports: what it expected and what came."""
    return MessageGap(
        f"{direction} of rank {rank}: expected message {expected}, got {got} (one was "
        "lost): run the worker-loss path", rank
    )


class BadSequence(ProtocolError):
    """A message's sequence numbers are malformed (wrong types, since after seq)."""


class UnknownImport(ProtocolError):
    """A worker's import acknowledgement that names no import it was handed, a page
    outside it, a page landed twice, or done before every page landed: refused, and
    nothing changes."""

    def __init__(self, import_id: int, reason: str) -> None:
        super().__init__(f"import {import_id}: {reason}")
        self.import_id = import_id
        self.reason = reason
