"""On-demand benchmarks (not collected by pytest): ``python -m benchmarks.<name>``."""
