"""`kubectl fireflow`: what a platform team asks of a pool, from the API server and the pool's database.

    kubectl fireflow list [-A]                 pools with their phase, ready/asked workers and version
    kubectl fireflow status POOL               per version and executor: ready workers, PENDING and ENQUEUED
                                               runs; schema, last migration, connection budget, events
    kubectl fireflow runs list|cancel|resume POOL ...   the pool's runs
    kubectl fireflow migrate plan POOL         the operator's plan Job, run once with the target image
    kubectl fireflow recover EXECUTOR          hand a gone worker process's PENDING runs back to their queues

`-o json|yaml` prints the same facts as data. The database URL is the pool's Secret's (spec.database.secretRef),
read through the API server as the operator reads it; `--database-url` or `--database-host` (a forwarded port)
replace it. The modules: `facts` and `render` (pure), `kubeapi` (the API server), `rundb` (the database), `cli`.
"""

from __future__ import annotations

from fireflow_operator.kubectl_plugin.cli import main

__all__ = ["main"]
