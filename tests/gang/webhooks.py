"""Helpers: run a scoped grouper with its admission webhook and register it with the API server."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from controller.harness import GrouperThread
from kube import Kube

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
        try:
            yield g
        finally:
            if register:
                kube.delete(f"/apis/{ADMISSION}/mutatingwebhookconfigurations/{name}", ignore_missing=True)
