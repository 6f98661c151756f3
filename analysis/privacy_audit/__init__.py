"""One-run privacy auditing of asyncfl's private aggregation (docs/privacy.md §16):
``python -m analysis.privacy_audit SCENARIO…``."""
