"""TLC model checking for hisparse: acquisition, isolated runs, output parsing, models."""

from hisparse.tlc.acquire import TlcInstall, ensure_tlc, probe_version, verify_jar
from hisparse.tlc.check import MODELS, CheckReport, check_model
from hisparse.tlc.errors import (
    ModelError,
    TlcChecksumMismatch,
    TlcError,
    TlcFetchFailed,
    TlcUnavailable,
)
from hisparse.tlc.output import TlcOutput, parse_output
from hisparse.tlc.runner import TlcResult, run_tlc

__all__ = [
    "MODELS",
    "CheckReport",
    "ModelError",
    "TlcChecksumMismatch",
    "TlcError",
    "TlcFetchFailed",
    "TlcInstall",
    "TlcOutput",
    "TlcResult",
    "TlcUnavailable",
    "check_model",
    "ensure_tlc",
    "parse_output",
    "probe_version",
    "run_tlc",
    "verify_jar",
]
