"""The FireflowWorkerPool resource: its spec model, the CRD generated from it, its condition vocabulary and
the names of its children (pure)."""
