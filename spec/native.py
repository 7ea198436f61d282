"""The one mypyc hint the compiled build needs, without a runtime dependency.

``tools/build_compiled.py`` compiles the hot modules with mypyc. ProtocolMachine,
ProtocolState and HiSparseCoordinator are native classes there (``allow_interpreted_subclasses``,
``serializable``): their methods call each other without Python's attribute lookups,
which is where a request's lifecycle spends its time. So nothing patches their
instances: an injected bug's variant is a subclass (``machine_class``), a test that
refuses an action subclasses the machine, and copies go through ``__getstate__``. The
lifecycle tables, the connector and HostBlock (an ``int`` subclass) stay Python
classes (``native_class=False``); ProtocolConfig, a pydantic model, is not compiled. Pure
Python never imports mypy_extensions: there the hint is a no-op.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

T = TypeVar("T")

# the modules the compiled build compiles: those a request's lifecycle runs through
# (not hisparse.blockpool: its refusal of a HostBlock where a GPU block belongs is a type
# test on an ``int`` argument, which compiled code receives unboxed, as a plain int)
COMPILED = (
    "hisparse.spec.machine",
    "hisparse.coordinator",
    "hisparse.spec.state",
    "hisparse.spec.lifecycle",
    "hisparse.connector",
)

# use: ``@mypyc_attr(...)`` on the class itself (mypyc reads the decorator where it
# stands; a wrapper around it would hide it)

if TYPE_CHECKING:  # mypy and mypyc see the real decorator and honour it
    from mypy_extensions import mypyc_attr as mypyc_attr
else:

    def mypyc_attr(*_flags: Any, **_attrs: Any) -> Any:
        """A no-op outside mypyc: returns the class unchanged."""

        def keep(cls: T) -> T:
            return cls

        return keep

