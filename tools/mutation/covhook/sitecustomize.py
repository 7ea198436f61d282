"""Measure every Python process of a coverage-map run, under the test that started it.

``tools/mutation/covermap.py`` puts this folder first on ``PYTHONPATH`` and names an rc
file in ``HISPARSE_COVMAP_RC``: the pytest process and every process it spawns (worker
processes, prefillers, TP ranks, ``python -m hisparse`` runs) then record the lines they
run. A child's static context is the test that was running when it started
(``HISPARSE_COVMAP_TEST``, set by ``tools/mutation/covplugin.py``); the pytest process
switches its context per test itself. Outside a map run this file does nothing.
"""

import atexit
import os

_rc = os.environ.get("HISPARSE_COVMAP_RC")
if _rc:
    import coverage

    _cov = coverage.Coverage(config_file=_rc, data_suffix=True,
                             context=os.environ.get("HISPARSE_COVMAP_TEST") or None)
    _cov.start()

    def _save() -> None:
        _cov.stop()
        _cov.save()

    atexit.register(_save)
