"""What a pool author may get through the operator, decided before anything is built (pure)."""
