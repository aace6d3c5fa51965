"""`fireflow-operator`: validate the settings, then run kopf with the handlers of `handlers.py`."""

from __future__ import annotations

import sys

from fireflow_operator.settings import SettingsError, load_settings


def main() -> int:
    try:
        settings = load_settings()
    except SettingsError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    import kopf  # noqa: PLC0415 - after the settings, so a bad value fails fast and quietly

    from fireflow_operator import handlers  # noqa: F401, PLC0415 - registers the handlers

    kopf.configure(verbose=settings.log_level == "DEBUG")
    kopf.run(
        standalone=True,  # one replica (the chart's default); no peering objects needed
        clusterwide=not settings.namespaces,
        namespaces=settings.namespaces,
        liveness_endpoint=f"http://0.0.0.0:{settings.health_port}/healthz",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
