"""The operator's own metrics and every pool's status as Prometheus series."""
