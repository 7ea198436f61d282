"""The one mypyc hint the optional compiled build needs, without a runtime dependency.

``tools/build_compiled.py`` compiles the hot modules with mypyc. Their classes stay
ordinary Python classes there (``native_class=False``): an injected bug's variant
shadows one step on the instance, tests patch and copy instances, and the trace
recorder wraps ``_done``; a native class would refuse all of that. Pure Python (the
default, and what CI tests) never imports mypy_extensions: there the hint is a no-op.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

T = TypeVar("T")

# use: ``@mypyc_attr(native_class=False)`` on the class itself (mypyc reads the decorator
# where it stands; a wrapper around it would hide it)

if TYPE_CHECKING:  # mypy and mypyc see the real decorator and honour it
    from mypy_extensions import mypyc_attr as mypyc_attr
else:

    def mypyc_attr(*_flags: Any, **_attrs: Any) -> Any:
        """A no-op outside mypyc: returns the class unchanged."""

        def keep(cls: T) -> T:
            return cls

        return keep

