"""`python -m mlbench ...` is `mlbench ...`."""

import sys

from mlbench.cli.main import main

sys.exit(main())
