"""The FireFlow worker: executes flows as durable DBOS workflows."""

__version__ = "0.1.0"
