"""P/D import transport: a decoder READs a request's prefill KV pages from a prefiller.

The boundary the protocol's import path calls (issue 28): ``ImportRequest`` says what the
decoder expects, an ``Announcement`` is what a prefiller claims to hold, and a
``Transport`` (``LoopbackTransport``, the oracle, or ``NixlTransport``) reads the
announced pages into staging slots leased for the request from a ``StagingPool``, one
chunk at a time, reporting completion or failure per chunk. Nothing announced is
trusted: ``check_announcement`` runs before any READ is posted.
"""

from hisparse.transport.base import ChunkState, ImportHandle, Transport
from hisparse.transport.errors import (
    AnnouncementRefused,
    ImportFailed,
    StagingConfigError,
    StagingExhausted,
    TransportError,
)
from hisparse.transport.geometry import (
    Announcement,
    ImportRequest,
    PageDescriptor,
    check_announcement,
)
from hisparse.transport.loopback import LoopbackPrefiller, LoopbackTransport
from hisparse.transport.staging import StagingLease, StagingPool

__all__ = [
    "Announcement",
    "AnnouncementRefused",
    "ChunkState",
    "ImportFailed",
    "ImportHandle",
    "ImportRequest",
    "LoopbackPrefiller",
    "LoopbackTransport",
    "PageDescriptor",
    "StagingConfigError",
    "StagingExhausted",
    "StagingLease",
    "StagingPool",
    "Transport",
    "TransportError",
    "check_announcement",
]
