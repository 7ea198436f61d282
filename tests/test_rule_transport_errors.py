"""Rule: the import transport's typed errors carry the message a caller logs (the reason
and detail of a refused announcement; the request, chunk and detail of a failed import)
beside the fields a caller branches on (``hisparse/transport/errors.py``).

From the guard survivors of the first mutation run of the file (docs/mutation-survivors.md,
"Files run for the first time"): ``tests/test_transport.py`` matches on the reasons and
fields, never on the whole message.
"""

from __future__ import annotations

from typing import Literal

import pytest

from hisparse.transport.errors import (
    AnnouncementRefused,
    ImportFailed,
    StagingConfigError,
    StagingExhausted,
    TransportError,
)


@pytest.mark.parametrize("reason", ["agent", "geometry", "pages", "descriptor", "request",
                                    "destination"])
def test_a_refused_announcement_says_why_and_keeps_the_reason(reason: str) -> None:
    e = AnnouncementRefused(reason, "3 pages announced, 2 expected")
    assert str(e) == f"announcement refused ({reason}): 3 pages announced, 2 expected"
    assert e.args == (str(e),)
    assert e.reason == reason
    assert isinstance(e, TransportError)


@pytest.mark.parametrize("reason", ["transport", "prefiller_lost"])
def test_a_failed_import_names_the_request_and_the_chunk(
    reason: Literal["transport", "prefiller_lost"],
) -> None:
    e = ImportFailed("req-7", 2, "NIXL_ERR_REMOTE_DISCONNECT", reason=reason)
    assert str(e) == "import of request 'req-7' failed at chunk 2: NIXL_ERR_REMOTE_DISCONNECT"
    assert e.args == (str(e),)
    assert (e.req_id, e.chunk, e.reason) == ("req-7", 2, reason)
    assert isinstance(e, TransportError)


def test_a_failed_import_is_a_transport_failure_unless_told_otherwise() -> None:
    assert ImportFailed("r", 0, "ERR").reason == "transport"


def test_staging_errors_are_typed() -> None:
    assert issubclass(StagingExhausted, TransportError)
    assert issubclass(StagingConfigError, ValueError)
    assert not issubclass(StagingConfigError, TransportError)  # a construction error
