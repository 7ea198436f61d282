"""Message rules met by the whole mutation run's seventeenth pass
(docs/mutation-survivors.md): a worker meta's numbers come all three or none, and its
completed acks are checked for repeats and signs as its enqueued acks are."""

from __future__ import annotations

import itertools

import pytest
from pydantic import ValidationError

from hisparse.spec.messages import HiSparseConnectorMetadata, HiSparseWorkerMeta

NUMBERS = ("seq", "since", "epoch")
PARTIAL = [c for n in (1, 2) for c in itertools.combinations(NUMBERS, n)]


@pytest.mark.parametrize("given", PARTIAL, ids="+".join)
def test_a_worker_meta_numbered_in_part_is_refused(given: tuple[str, ...]) -> None:
    # kills spec/messages.py:215:var:42 (since was compared with nothing: a meta with
    # seq and epoch but no since went through, unsequenced in part)
    values = {"seq": 3, "since": 1, "epoch": 0}
    with pytest.raises(ValidationError, match="seq, since and epoch come together"):
        HiSparseWorkerMeta.model_validate({k: values[k] for k in given})


@pytest.mark.parametrize("given", PARTIAL, ids="+".join)
def test_a_connector_metadata_numbered_in_part_is_refused(given: tuple[str, ...]) -> None:
    values: dict[str, object] = {"seq": 3, "since": (1,), "epoch": (0,)}
    with pytest.raises(ValidationError, match="seq, since and epoch come together"):
        HiSparseConnectorMetadata.model_validate({k: values[k] for k in given})


@pytest.mark.parametrize("field", ["enqueued", "completed"])
def test_each_ack_list_of_a_worker_meta_refuses_a_repeat_and_a_negative(field: str) -> None:
    # kills spec/messages.py:219:var:38 (the completed list was never checked: the
    # enqueued one was checked twice)
    with pytest.raises(ValidationError, match=f"duplicate transfer ID in {field}"):
        HiSparseWorkerMeta.model_validate({field: (4, 4)})
    with pytest.raises(ValidationError, match=f"negative transfer ID in {field}"):
        HiSparseWorkerMeta.model_validate({field: (-1,)})


@pytest.mark.parametrize("epoch", [(-1,), (0, -2)])
def test_a_connector_metadata_with_a_negative_epoch_is_refused(epoch: tuple[int, ...]) -> None:
    # kills spec/messages.py:179:var:34 (the signs of since were checked again, the
    # epochs' never: a negative epoch went through)
    since = (1,) * len(epoch)
    with pytest.raises(ValidationError,
                       match="epoch needs one non-negative number per rank of since"):
        HiSparseConnectorMetadata.model_validate({"seq": 3, "since": since, "epoch": epoch})
