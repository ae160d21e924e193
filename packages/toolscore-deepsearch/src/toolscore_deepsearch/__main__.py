"""`python -m toolscore_deepsearch`: the server's command line."""

import sys

from toolscore_deepsearch.server import main

sys.exit(main())
