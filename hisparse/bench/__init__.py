"""Benchmarks (``hisparse bench ...``): measured, never asserted by timed tests."""
