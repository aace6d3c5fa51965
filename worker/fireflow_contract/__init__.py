"""The FireFlow pool's contracts, in one home (pure): what the operator, the worker and the programs in other
languages on the executions database agree on. The operator image carries this package and not the worker.

- `executor_ids`: the worker's DBOS executor ids and connection names, per pod and per process;
- `worker_variables`: the environment the operator gives a worker;
- `migration_summary`: the line `fireflow-worker migrate` prints and the operator reads;
- `dburl`: the database URL forms and how their passwords stay out of every output;
- `queues`, `run_request`, `js_encoding`, `schemas/`: the run contract with other languages (docs/run-contract.md);
- `resume`: how an ended run runs again, for the worker's client and the operator's kubectl plugin alike;
- `logformat`, `telemetry`: how every FireFlow process logs and traces, as log and trace pipelines see it.
"""
