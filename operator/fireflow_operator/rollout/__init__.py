"""A pool's versions and their StatefulSets: versioned rollouts, progress deadlines, pod problems."""
