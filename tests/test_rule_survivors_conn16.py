"""Connector rules met by the whole mutation run's sixteenth pass
(docs/mutation-survivors.md): only None means "no message"; empty bytes are bytes that
fail validation, refused on either side with nothing applied."""

from __future__ import annotations

import pytest

from hisparse.connector import HiSparseConnector, KVConnectorRole, MalformedMetadata
from tests.test_boundaries_system import _open_spill, coordinator, refused, worker, wsnap


def test_empty_worker_meta_bytes_are_refused_as_malformed_and_change_nothing() -> None:
    # (connector.py:117:none:2 took b"" for "no worker meta" and dropped it unread)
    c = coordinator()
    _open_spill(c)
    sched = HiSparseConnector(KVConnectorRole.SCHEDULER, coordinator=c)
    refused(c, lambda: sched.update_connector_output(b""), MalformedMetadata)
    sched.update_connector_output(None)  # None alone is "nothing this step"


def test_empty_connector_metadata_bytes_are_refused_as_malformed_and_change_nothing() -> None:
    # (connector.py:147:none:5 took b"" for "no metadata" and applied nothing, silently)
    w = worker()
    conn = HiSparseConnector(KVConnectorRole.WORKER, worker=w)
    before = wsnap(w)
    with pytest.raises(MalformedMetadata, match=r"^connector metadata"):
        conn.bind_connector_metadata(b"")
    assert wsnap(w) == before
    conn.bind_connector_metadata(None)  # None alone is "nothing this step"
    assert wsnap(w) == before
