"""``python -m asyncfl ARGS`` is ``asyncfl ARGS``."""

import sys

from asyncfl.cli.main import main

sys.exit(main())
