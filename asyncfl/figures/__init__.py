"""Figures drawn from run directories (docs/run-directory.md): ``metrics`` (learning curves,
``metrics.png``) and ``staleness`` (staleness histogram, clients in flight, ``W``)."""
