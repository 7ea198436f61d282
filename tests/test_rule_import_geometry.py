"""Rule: an import request needs every one of its tokens, row bytes, block size and
layers positive; an announcement whose page descriptor has no address (at or below 0) or
a negative device is refused as a ``descriptor`` refusal, each of the two on its own, and
a descriptor with a positive address on any device at or above 0 passes
(``hisparse/transport/geometry.py``).

From the guard survivors of the third guard-phase run (docs/mutation-survivors.md):
``122:bool:1`` (``or`` → ``and``: a descriptor at address 0 on device 0, or at a real
address on device -1, passed), ``33:var:9`` (``self.layers`` → ``self.num_tokens`` in
the check: a request of 0 layers accepted).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hisparse.transport.errors import AnnouncementRefused
from hisparse.transport.geometry import (
    Announcement,
    ImportRequest,
    PageDescriptor,
    check_announcement,
)

REQ = ImportRequest("r", 6, 8, 4, "p")  # two pages of 32 bytes


@pytest.mark.parametrize("field", ["num_tokens", "row_bytes", "block_size", "layers"])
@pytest.mark.parametrize("value", [0, -1])
def test_an_import_request_needs_each_size_positive(field: str, value: int) -> None:
    sizes = {"num_tokens": 6, "row_bytes": 8, "block_size": 4, "layers": 2}
    ImportRequest("r", prefiller="p", **sizes)
    sizes[field] = value
    with pytest.raises(ValueError, match="needs positive tokens, row bytes, block size"):
        ImportRequest("r", prefiller="p", **sizes)


def _ann(addr: int, dev: int) -> Announcement:
    pages = (PageDescriptor(0, 4096, REQ.page_bytes),
             PageDescriptor(1, addr, REQ.page_bytes, dev))
    return Announcement("p", "r", REQ.num_tokens, REQ.row_bytes, REQ.block_size, pages)


@given(addr=st.integers(-(2**40), 2**40), dev=st.integers(-4, 4))
def test_a_descriptor_needs_a_positive_address_and_a_device_of_at_least_zero(
    addr: int, dev: int
) -> None:
    if addr > 0 and dev >= 0:
        check_announcement(_ann(addr, dev), REQ)
    else:
        with pytest.raises(AnnouncementRefused, match="page 1 at address") as e:
            check_announcement(_ann(addr, dev), REQ)
        assert e.value.reason == "descriptor"


@pytest.mark.parametrize(("addr", "dev"), [(0, 0), (8192, -1)])
def test_each_half_of_the_descriptor_check_refuses_on_its_own(addr: int, dev: int) -> None:
    with pytest.raises(AnnouncementRefused) as e:
        check_announcement(_ann(addr, dev), REQ)
    assert e.value.reason == "descriptor"
