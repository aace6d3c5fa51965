"""Helpers shared by the test tiers (no fixtures: those live in the tiers' conftest.py)."""
