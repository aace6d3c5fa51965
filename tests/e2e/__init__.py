"""End-to-end scenarios: the operator installed with Helm, pools applied, runs followed through the client."""
