"""Kubernetes clusters for the tests: a real control plane with a node that runs pods as local processes,
or a kind cluster running the project's real images.

`controlplane` starts etcd, kube-apiserver and kube-controller-manager (built by `build-control-plane.sh`);
`process_node` plays the kubelet; `kind_cluster` makes a kind cluster from the images of `build-images.sh`
and the offline node image of `build-kind-node.sh`, with the sandbox mends of `kind`; `plugin` wires both
into pytest (`--cluster=local|kind`).
"""
