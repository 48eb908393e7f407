"""The error the local control plane raises when it cannot start or a setup request is rejected."""


class ClusterError(RuntimeError):
    pass
