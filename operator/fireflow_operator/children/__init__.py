"""The objects a pool owns: built by pure builders, kept as built by thin I/O."""
