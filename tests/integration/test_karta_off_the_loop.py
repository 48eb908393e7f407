"""A slow Karta definition from ``--definitions`` (the operator's own catalog, trusted but not vetted for
speed) is evaluated off the event loop: while its jq takes seconds in the sandbox, the loop keeps
answering (probes, watches, Lease renewals, other workloads). Before, only cluster Kartas were waited
for in a thread and a built-in one stalled the whole service for as long as its jq ran.

Against the real API server: the test plays the NIM operator (creates the NIMService and its pods)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import yaml
from controller.harness import ANNOTATION, REPO, GrouperThread, label_namespace, owned_pod
from kube import Kube, wait_until

NIMSERVICES = "/apis/apps.nvidia.com/v1alpha1/namespaces/{ns}/nimservices"
SLOW_KEY = '(("ab" * 8000) | [splits("a")] | length) as $_ | .metadata.labels["app.kubernetes.io/name"]'
PODS = 3


def slow_catalog(tmp_path: Path) -> Path:
    """The built-in NIMService definition with a group key that takes ~1 s of jq per pod on this box."""
    d = yaml.safe_load((REPO / "definitions" / "apps-nvidia-com-nimservice-v1alpha1.yaml").read_text())
    d["spec"]["optimizationInstructions"]["gangScheduling"]["podGroups"][0]["members"][0]["groupByKeyPaths"] = [SLOW_KEY]
    out = tmp_path / "catalog"
    out.mkdir()
    (out / "nimservice.yaml").write_text(yaml.safe_dump(d))
    return out


async def longest_stall(stop: asyncio.Event) -> float:
    """The longest the loop took to come back to a 10 ms sleep, until ``stop``."""
    worst = 0.0
    while not stop.is_set():
        t = time.monotonic()
        await asyncio.sleep(0.01)
        worst = max(worst, time.monotonic() - t - 0.01)
    return worst


def test_a_slow_built_in_definition_does_not_stall_the_loop(
    cluster: Any, kube: Kube, namespace: str, tmp_path: Path
) -> None:
    ns = namespace
    label_namespace(kube, ns)
    with GrouperThread(cluster, ns, definitions=str(slow_catalog(tmp_path))) as g:
        stop = asyncio.Event()
        probe = asyncio.run_coroutine_threadsafe(longest_stall(stop), g.loop)
        owner = kube.create(NIMSERVICES.format(ns=ns), {
            "apiVersion": "apps.nvidia.com/v1alpha1",
            "kind": "NIMService",
            "metadata": {"name": "llm"},
            "spec": {"replicas": PODS, "schedulerName": "kai-scheduler"},
        })
        t0 = time.monotonic()
        for i in range(PODS):
            kube.create(f"/api/v1/namespaces/{ns}/pods", owned_pod(f"llm-{i}", {"app.kubernetes.io/name": "llm"}, owner))
        pods = wait_until(
            lambda: (ps := kube.list(f"/api/v1/namespaces/{ns}/pods")) and len(ps) == PODS
            and all((p["metadata"].get("annotations") or {}).get(ANNOTATION) for p in ps) and ps,
            90,
            what="the NIMService's pods grouped",
        )
        took = time.monotonic() - t0
        g.call(asyncio.sleep(0))  # the probe saw the loop through the whole decision
        g.loop.call_soon_threadsafe(stop.set)
        stall = probe.result(10)
    assert {p["metadata"]["annotations"][ANNOTATION] for p in pods} == {f"pg-{owner['metadata']['uid']}-llm"}
    assert took >= 1.0, f"the slow key must have taken its second of jq per pod ({took:.2f} s)"
    assert stall < 0.5, f"the event loop stalled {stall:.2f} s while the definition's jq ran ({took:.2f} s)"
