"""The compiled build's one hint (spec/native.py) changes nothing in pure Python."""

from __future__ import annotations

from hisparse.spec import native


def test_the_hint_returns_the_class_itself() -> None:
    class C:
        pass

    assert native.mypyc_attr(native_class=False)(C) is C


def test_pure_python_uses_its_own_no_op_not_mypy_extensions() -> None:
    # mypy_extensions is imported only under TYPE_CHECKING: no runtime dependency
    assert native.mypyc_attr.__module__ == "hisparse.spec.native"
