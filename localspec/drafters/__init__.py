"""Drafters propose tokens for the target to verify; `table.py` registers them (one row each)."""
