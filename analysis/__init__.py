"""Studies built on the asyncfl library (DESIGN.md §2: ``analysis/`` holds the studies that use
the library and write figures and tables)."""
