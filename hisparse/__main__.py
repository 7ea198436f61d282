"""Entry point for ``python -m hisparse`` (same as the ``hisparse`` console script)."""

import sys

from hisparse.cli import main

sys.exit(main())
