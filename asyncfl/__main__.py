"""``python -m asyncfl ARGS`` is ``asyncfl ARGS``."""

from asyncfl.cli.main import entry

entry()
