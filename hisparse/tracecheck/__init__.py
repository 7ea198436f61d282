"""Trace validation: replay recorded runs of the protocol through the TLA+ spec with TLC."""

from hisparse.tracecheck.check import FileVerdict, TraceCheckError, TraceCheckResult, check_traces

__all__ = ["FileVerdict", "TraceCheckError", "TraceCheckResult", "check_traces"]
