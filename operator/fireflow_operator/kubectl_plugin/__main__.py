"""`python -m fireflow_operator.kubectl_plugin`: what the Krew shim runs (I/O)."""

from __future__ import annotations

import sys

from fireflow_operator.kubectl_plugin.cli import main

sys.exit(main())
