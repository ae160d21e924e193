"""`python -m toolscore`."""

import sys

from toolscore.cli import main

sys.exit(main())
