"""The fireflow-pool operator: reconciles FireflowWorkerPool resources."""
