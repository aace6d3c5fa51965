"""`python -m fireflow_worker run`: how the supervisor starts its worker processes."""

from fireflow_worker.cli import worker_main

raise SystemExit(worker_main())
