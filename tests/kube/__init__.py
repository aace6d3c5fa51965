"""A real Kubernetes control plane for the tests, and a node that runs pods as local processes.

`controlplane` starts etcd, kube-apiserver and kube-controller-manager (built by
`build-control-plane.sh`); `process_node` plays the kubelet; `plugin` wires both into pytest and
offers the same fixtures against a kind cluster (`--cluster=kind`).
"""
