"""Typed errors for TLC acquisition and runs, so callers never have to parse messages."""

from __future__ import annotations

INSTALL_HINT = "install a JRE and Maven, e.g. `apt-get install openjdk-17-jre-headless maven`"


class TlcError(Exception):
    """Base class: anything that stops hisparse from getting a TLC verdict."""


class TlcUnavailable(TlcError):
    """A required tool (java, mvn) is missing: the check cannot run, and must not be skipped."""


class TlcFetchFailed(TlcError):
    """Maven could not fetch the pinned TLC artifact."""


class TlcChecksumMismatch(TlcError):
    """The TLC jar on disk is not the pinned build: refuse to trust its verdicts."""


class ModelError(TlcError):
    """The requested model or its files are missing or malformed."""
