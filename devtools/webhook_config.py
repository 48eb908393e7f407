"""The MutatingWebhookConfiguration that the demo and the tests register for a grouper's admission webhook on
this machine; the chart renders the production one (``deploy/chart/templates/webhook.yaml``) with the same
policy: pod CREATEs, ``failurePolicy: Ignore``, called again after a later webhook changed the pod."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

ADMISSION = "admissionregistration.k8s.io/v1"

# Above the grouper's wait of up to 3 s for an owner created moments before (grouper.webhook.decide), as the
# chart's default: the API server would otherwise give up first and admit the pod unchanged.
TIMEOUT_SECONDS = 5


def webhook_configuration(name: str, port: int, ca_file: str, namespace_selector: dict[str, Any]) -> dict[str, Any]:
    """Pods CREATEd in the namespaces ``namespace_selector`` selects go to https://127.0.0.1:port; admitted
    unchanged when the grouper does not answer."""
    return {
        "apiVersion": ADMISSION,
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [
            {
                "name": "pods.grouper.kai-pod-grouper.io",
                "clientConfig": {
                    "url": f"https://127.0.0.1:{port}/mutate-pods",
                    "caBundle": base64.b64encode(Path(ca_file).read_bytes()).decode(),
                },
                "rules": [
                    {"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}
                ],
                "namespaceSelector": namespace_selector,
                "failurePolicy": "Ignore",
                "sideEffects": "None",
                "timeoutSeconds": TIMEOUT_SECONDS,
                "admissionReviewVersions": ["v1"],
                # called again after a later webhook (an operator's, LeaderWorkerSet's) changed the pod
                "reinvocationPolicy": "IfNeeded",
            }
        ],
    }
