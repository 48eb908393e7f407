"""An API-server audit log of the writes to pods and PodGroups: the server-side evidence the fault tests
count writes with, and the benchmark's ``--audit-log`` (who wrote what, to explain a write count)."""

from __future__ import annotations

from pathlib import Path


def write_audit_policy(path: Path, *, level: str = "Metadata") -> Path:
    """A policy logging every create / update / patch / delete of pods and PodGroups at ``level``
    (``Metadata``: who and when; ``Request``: with the body) and nothing else."""
    path.write_text(f"""\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: {level}
    verbs: [create, update, patch, delete]
    resources:
      - group: ""
        resources: [pods]
      - group: scheduling.run.ai
        resources: [podgroups]
  - level: None
""")
    return path


def audit_args(policy: Path, log: Path | str, *, mode: str = "blocking") -> tuple[str, ...]:
    """kube-apiserver flags for a JSON audit log at ``log`` under ``policy``."""
    return (f"--audit-policy-file={policy}", f"--audit-log-path={log}", "--audit-log-format=json",
            f"--audit-log-mode={mode}")
