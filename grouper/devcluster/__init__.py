"""A real local Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager built from source).

Used by the test suite (``tests/conftest.py``) and the demo; ``python -m grouper.devcluster`` runs one
until Ctrl-C.
"""

from .build import BuildError, ensure_binaries
from .cluster import DEFAULT_CONTROLLERS, ClusterError, LocalCluster

__all__ = ["DEFAULT_CONTROLLERS", "BuildError", "ClusterError", "LocalCluster", "ensure_binaries"]
