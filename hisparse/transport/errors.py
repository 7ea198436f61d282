"""Typed errors of the import transport: every refusal changes nothing."""

from __future__ import annotations

from typing import Literal


class TransportError(Exception):
    """Base of every import-transport error."""


class AnnouncementRefused(TransportError):
    """A prefiller's announcement does not match the request; no READ was posted.

    ``reason`` is a short stable word (``agent``, ``geometry``, ``pages``, ``descriptor``,
    ``request``, ``destination``) so callers and tests tell refusals apart.
    """

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"announcement refused ({reason}): {detail}")
        self.reason = reason


class ImportFailed(TransportError):
    """A request's import failed (prefiller gone, NIXL error); other imports go on.

    ``reason`` is the worker meta's ``ImportFailReason``: ``prefiller_lost`` when the
    transport knows the prefiller is gone, else ``transport`` (a NIXL ``ERR`` does not say
    why)."""

    def __init__(self, req_id: str, chunk: int, detail: str,
                 reason: Literal["transport", "prefiller_lost"] = "transport") -> None:
        super().__init__(f"import of request {req_id!r} failed at chunk {chunk}: {detail}")
        self.req_id = req_id
        self.chunk = chunk
        self.reason: Literal["transport", "prefiller_lost"] = reason


class StagingConfigError(ValueError):
    """A staging pool configuration that cannot hold one page (refused at construction)."""


class StagingExhausted(TransportError):
    """Fewer free staging slots than asked for; nothing was leased."""
