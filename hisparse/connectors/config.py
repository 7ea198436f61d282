"""Find HiSparse's config in a KV transfer config, whether HiSparseConnector is
configured alone or as one child of a MultiConnector (vLLM's shapes:
``{"kv_connector": ..., "kv_connector_extra_config": {...}}``, a MultiConnector's
children under ``kv_connector_extra_config.connectors``). Bad input: ``ConnectorError``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from hisparse.config import HiSparseConfig
from hisparse.connectors.base import ConnectorError

HISPARSE = "HiSparseConnector"
MULTI = "MultiConnector"
MAX_CHILDREN = 64  # bounded work on outside input


def _entry(obj: Any, where: str) -> tuple[str, Mapping[str, Any]]:
    if not isinstance(obj, Mapping):
        raise ConnectorError(f"{where}: expected an object, got {type(obj).__name__}")
    name = obj.get("kv_connector")
    if not isinstance(name, str) or not name:
        raise ConnectorError(f"{where}: kv_connector must name a connector")
    extra = obj.get("kv_connector_extra_config", {})
    if not isinstance(extra, Mapping):
        raise ConnectorError(f"{where}: kv_connector_extra_config must be an object")
    return name, extra


def hisparse_config_from(kv_transfer_config: Any) -> HiSparseConfig:
    """The HiSparseConfig of the one HiSparseConnector configured (alone or as a child)."""
    name, extra = _entry(kv_transfer_config, "kv_transfer_config")
    if name == HISPARSE:
        found = [("kv_transfer_config", extra)]
    elif name == MULTI:
        children = extra.get("connectors")
        if not isinstance(children, list) or not children:
            raise ConnectorError("MultiConnector: kv_connector_extra_config.connectors "
                                 "must be a non-empty list")
        if len(children) > MAX_CHILDREN:
            raise ConnectorError(f"MultiConnector: {len(children)} children, at most "
                                 f"{MAX_CHILDREN}")
        found = []
        for i, child in enumerate(children):
            where = f"MultiConnector child {i}"
            cname, cextra = _entry(child, where)
            if cname == MULTI:
                raise ConnectorError(f"{where}: a MultiConnector cannot nest another")
            if cname == HISPARSE:
                found.append((where, cextra))
    else:
        raise ConnectorError(f"{name} is neither {HISPARSE} nor a {MULTI} with it")
    if len(found) != 1:
        raise ConnectorError(f"expected one {HISPARSE}, found {len(found)}")
    where, cfg = found[0]
    try:
        return HiSparseConfig.model_validate(dict(cfg))
    except ValidationError as exc:
        raise ConnectorError(f"{where}: bad HiSparse config: "
                             f"{str(exc).splitlines()[0]}") from None
