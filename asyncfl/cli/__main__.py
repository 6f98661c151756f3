"""``python -m asyncfl.cli ARGS`` is ``asyncfl ARGS``."""

from asyncfl.cli.main import entry

entry()
