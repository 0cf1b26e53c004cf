"""`python -m envbuilder` is the same as the `envbuilder` console script."""

import sys

from envbuilder.cli import main

sys.exit(main())
