"""P/D import on the worker side (issue 28, docs/pd-import.md): the import runner that
turns ``ImportCommand``s into transport READs, staged copies and acks, and the pages a
prefiller holds for the main job's requests."""

from hisparse.pdimport.runner import (
    AnnouncementSource,
    ImportRefused,
    ImportRunner,
    ImportStats,
)

__all__ = ["AnnouncementSource", "ImportRefused", "ImportRunner", "ImportStats"]
