"""Every module under spec/, hisparse/ and executor/ is a mutation target or is left out
with a reason (tools/mutation/targets.py), so a new module cannot be forgotten."""

from __future__ import annotations

from tools.mutation.runner import ROOT
from tools.mutation.targets import EXCLUDED, SOURCE_DIRS, TARGETS


def modules() -> set[str]:
    return {str(p.relative_to(ROOT)) for d in SOURCE_DIRS for p in (ROOT / d).rglob("*.py")}


def test_every_module_is_a_target_or_left_out_with_a_reason() -> None:
    assert modules() - set(TARGETS) - set(EXCLUDED) == set()
    assert set(TARGETS) & set(EXCLUDED) == set()
    assert all(reason.strip() for reason in EXCLUDED.values())


def test_every_entry_names_a_module_that_exists() -> None:
    assert (set(TARGETS) | set(EXCLUDED)) - modules() == set()


def test_every_target_has_guard_tests_that_exist() -> None:
    for file, guard in TARGETS.items():
        assert guard.tests, file
        missing = [t for t in guard.tests if not (ROOT / t).is_file()]
        assert missing == [], (file, missing)
