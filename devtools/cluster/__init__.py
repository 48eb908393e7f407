"""A real local Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager built from source).

Used by the test suite (``tests/conftest.py``) and the demo; ``python -m devtools.cluster`` runs one
until Ctrl-C. Development tooling: not part of the installed ``grouper`` package.
"""

from .build import BuildError, ensure_binaries
from .cluster import DEFAULT_CONTROLLERS, LocalCluster
from .crds import install_crds
from .errors import ClusterError

__all__ = [
    "DEFAULT_CONTROLLERS",
    "BuildError",
    "ClusterError",
    "LocalCluster",
    "ensure_binaries",
    "install_crds",
]
