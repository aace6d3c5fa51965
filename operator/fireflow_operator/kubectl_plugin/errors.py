"""The plugin's one kind of failure (pure)."""

from __future__ import annotations


class PluginError(Exception):
    """What went wrong, in one sentence naming the fix; printed as `error: ...` with exit status 1."""
