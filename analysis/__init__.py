"""Studies that use the asyncfl library and write figures and tables (DESIGN.md §2)."""
