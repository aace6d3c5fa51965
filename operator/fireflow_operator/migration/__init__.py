"""The migration gate: no worker of a new version before its schema migration, as a pure state machine and its Jobs."""
