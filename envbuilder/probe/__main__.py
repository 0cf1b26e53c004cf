"""`python -m envbuilder.probe ...` (and the zipapp's entry point)."""

import sys

from envbuilder.probe.cli import main

sys.exit(main())
