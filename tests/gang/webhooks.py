"""Helpers: run a scoped grouper with its admission webhook and register it with the API server."""

from __future__ import annotations

import contextlib
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from controller.harness import GrouperThread
from kube import Kube, KubeError, wait_until

from devtools.cluster import LocalCluster
from devtools.webhook_config import ADMISSION
from devtools.webhook_config import webhook_configuration as configuration


def webhook_configuration(name: str, namespace: str, port: int, ca_file: str) -> dict[str, Any]:
    """Pods CREATEd in ``namespace`` go to the grouper at https://127.0.0.1:port; Ignore when it is down."""
    return configuration(name, port, ca_file, {"matchLabels": {"grouper-test": namespace}})


@contextlib.contextmanager
def grouper_with_webhook(
    cluster: LocalCluster, kube: Kube, namespace: str, *, register: bool = True, **settings: Any
) -> Iterator[GrouperThread]:
    cert, key = cluster.serving_cert(f"grouper-{namespace}")
    with GrouperThread(
        cluster,
        namespace,
        webhook_bind_address="127.0.0.1:0",
        webhook_shutdown_delay_seconds=settings.pop("webhook_shutdown_delay_seconds", 0.0),  # no Service here
        webhook_cert_file=str(cert),
        webhook_key_file=str(key),
        **{"webhook_client_ca": cluster.webhook_client_ca, **settings},
    ) as g:
        assert g.service.webhook is not None
        name = f"grouper-{namespace}"
        if register:
            kube.create(
                f"/apis/{ADMISSION}/mutatingwebhookconfigurations",
                webhook_configuration(name, namespace, g.service.webhook.port, cluster.ca_file),
            )
            called_by_the_api_server(kube, namespace, g)
        try:
            yield g
        finally:
            if register:
                kube.delete(f"/apis/{ADMISSION}/mutatingwebhookconfigurations/{name}", ignore_missing=True)


def called_by_the_api_server(kube: Kube, namespace: str, g: GrouperThread) -> None:
    """Wait until the API server calls the webhook for a pod CREATE in ``namespace``: it takes a configuration
    into its admission chain from its own watch, moments after it was created, and a pod created before that
    is admitted unchanged. The probe is a dry run (nothing is stored, the reconciler sees nothing)."""
    admission = g.service.admission
    assert admission is not None
    before = admission.admitted

    def called() -> bool:
        try:
            kube.create(f"/api/v1/namespaces/{namespace}/pods", bare_pod(f"probe-{uuid.uuid4().hex[:8]}"),
                        dryRun="All")
        except KubeError:  # the namespace's default ServiceAccount not made yet
            return False
        return admission.admitted > before

    wait_until(called, 30, what="the API server calling the webhook")


def bare_pod(name: str) -> dict[str, Any]:
    """A pod of no workload (the default grouper's own)."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
