"""The OCI image (Dockerfile, built with podman by tests/deploy/conftest.py) run against the local API server:
``--network=host``, read-only root filesystem, non-root, no capabilities, the chart's arguments and its
ServiceAccount's token (TokenRequest). It groups a Job and answers /healthz, /readyz and, for a ServiceAccount
bound to the chart's metrics-reader ClusterRole, /metrics.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from controller.harness import annotated, job, label_namespace, scope_label
from deploy_support import credentials, default_args, running
from kube import Kube, wait_until

from devtools.image import image_size, podman

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.image


def test_image_contents(image: str) -> None:
    """Runtime package only: the wheel (with the Karta catalog) in a venv, no pip, no tests, no devtools."""
    script = (
        "import importlib.util as u, os, grouper, sys;"
        "d = os.path.dirname(grouper.__file__);"
        "print(os.getuid(), sys.prefix, len([f for f in os.listdir(os.path.join(d, 'definitions')) if f.endswith('.yaml')]),"
        " [m for m in ('pip', 'pytest', 'devtools', 'tests', 'hypothesis', 'ruff') if u.find_spec(m)])"
    )
    out = subprocess.run(
        podman("run", "--rm", "--read-only", "--network=none", "--ulimit", "nofile=1024:1024",
               "--ulimit", "nproc=1024:1024", "--entrypoint", "python3", image, "-c", script),
        capture_output=True, text=True, check=True,
    ).stdout.split()
    assert out[0] == "65532", "runs as the non-root user"
    assert out[1] == "/opt/grouper"
    assert int(out[2]) == len(list((REPO / "definitions").glob("*.yaml"))), "the Karta catalog ships as package data"
    assert out[3] == "[]", f"development modules in the image: {out[3:]}"
    print(f"\n[measure] image {image}: {image_size(image) / 1e6:.0f} MB")


def test_image_groups_a_job_as_the_chart_service_account(
    image: str, cluster: Any, kube: Kube, namespace: str, tmp_path: Path
) -> None:
    ns = namespace
    label_namespace(kube, ns)
    kube.apply_yaml(REPO / "deploy" / "rbac.yaml")  # the chart's RBAC, rendered with the default values
    creds = credentials(tmp_path, cluster, "kai-system", "kai-pod-grouper")
    # a scraper ServiceAccount bound to the chart's metrics-reader ClusterRole
    kube.create(f"/api/v1/namespaces/{ns}/serviceaccounts",
                {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "scraper"}})
    kube.apply_yaml({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": f"metrics-reader-{ns}"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "kai-pod-grouper-metrics-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "scraper", "namespace": ns}],
    })
    scraper = cluster.create_token(ns, "scraper")
    other = cluster.create_token(ns, "default")
    args = [*default_args(), f"--namespace-label-selector={scope_label(ns)}"]
    try:
        with running(args, cluster, creds, tmp_path / "image.log", image=image) as g:
            ready = g.wait_ready()
            assert g.http.get("/healthz").status_code == 200
            created = kube.create(f"/apis/batch/v1/namespaces/{ns}/jobs", job("in-image", 2))
            ps = wait_until(lambda: annotated(kube, ns, 2, "job-name=in-image"), 60, what="Job pods grouped")
            assert {p["metadata"]["annotations"]["pod-group-name"] for p in ps} == {
                f"pg-in-image-{created['metadata']['uid']}"
            }
            assert g.http.get("/metrics").status_code == 401
            assert g.http.get("/metrics", headers={"Authorization": f"Bearer {other}"}).status_code == 403
            metrics = g.http.get("/metrics", headers={"Authorization": f"Bearer {scraper}"})
            assert metrics.status_code == 200
            assert "podgrouper_" in metrics.text
            lease = kube.get("/apis/coordination.k8s.io/v1/namespaces/kai-system/leases/kai-pod-grouper")
            assert lease["spec"]["holderIdentity"] == g.name, "--identity=$(POD_NAME) from the chart"
            rc = g.stop()
        assert rc == 0, f"exit {rc} after SIGTERM:\n{g.logs()[-2000:]}"
        assert "Read-only file system" not in g.logs()
        print(f"\n[measure] image ready {ready:.1f}s after `podman run`")
    finally:
        kube.delete(f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/metrics-reader-{ns}", ignore_missing=True)
