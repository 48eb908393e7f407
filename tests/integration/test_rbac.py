"""deploy/rbac.yaml grants what the grouper uses and nothing more.

(a) ``grouper run`` runs as the ServiceAccount, in a separate process, over a representative run (leader
election, the defaults ConfigMap, the namespace selector, a Job grouped and then made non-preemptible, a failing
Job that gets a Warning Event, API requests that are reviewed and a live workload read). Its own
``podgrouper_api_requests_total{verb,resource,code}`` must show every right of the ClusterRole and the
Roles used — apart from the commented allow-list of rights that only rarer paths need — and no 403.

(b) The ServiceAccount cannot read Secrets, write or read other Leases, delete or update pods, read other
ConfigMaps or write anything it has no business writing: 403 from the real API server.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from controller.harness import GROUPER, annotated, free_port, job, label_namespace, pod_groups, scope_label
from kube import Kube, wait_until
from prometheus_client.parser import text_string_to_metric_families

from grouper.writer.events import COMPONENT

REPO = Path(__file__).resolve().parents[2]
RBAC = REPO / "deploy" / "rbac.yaml"
SA_NS, SA = "kai-system", "kai-pod-grouper"
DEFAULTS_CM = "kai-pod-grouper-defaults"

# Rights granted for paths a short run does not reach; each says which request needs it.
ALLOWED_UNUSED: dict[tuple[str, str], str] = {
    ("get", "pods"): "/workloads/{ns}/Pod/{name}?live=true reads a bare pod (its own workload) live",
    ("get", "podgroups"): "the writer re-reads a PodGroup after a write conflict (grouper/writer/podgroups.py)",
    ("delete", "podgroups"): "removing PodGroups the grouper created that no pod names any more (issue 10, item 7)",
    ("patch", "events"): "bumping the count of a repeated Warning, at most once per 60 s (grouper/writer/events.py)",
    ("create", "leases"): "the first election in a cluster creates the Lease; later ones update it",
    ("patch", "workloadgroups/status"): "a WorkloadGroup's status (grouper/controller/workload_groups.py); this "
                                        "run has no WorkloadGroup (tests/integration/test_workload_groups_live.py)",
}
# The grouper's own kinds; every other rule of the ClusterRole is an owner kind it walks ownerReferences to.
OWN_RESOURCES = {"pods", "podgroups", "kartas", "priorityclasses", "namespaces", "events", "tokenreviews",
                 "subjectaccessreviews", "leases", "configmaps", "workloadgroups", "workloadgroups/status"}
OWNER_VERBS = {"get", "list", "watch"}  # list + watch: the owner informer; get: /workloads/...?live=true



def granted() -> dict[tuple[str, str], set[str]]:
    """(verb, resource) -> the API groups granting it, over the ClusterRole and Roles bound to the SA."""
    docs = [d for d in yaml.safe_load_all(RBAC.read_text()) if d]
    bound = {(d["roleRef"]["kind"], d["roleRef"]["name"]) for d in docs
             if d["kind"] in ("ClusterRoleBinding", "RoleBinding")
             and {"kind": "ServiceAccount", "name": SA, "namespace": SA_NS} in d["subjects"]}
    out: dict[tuple[str, str], set[str]] = defaultdict(set)
    for d in docs:
        if d["kind"] in ("ClusterRole", "Role") and (d["kind"], d["metadata"]["name"]) in bound:
            for rule in d["rules"]:
                for res in rule.get("resources", []):
                    for verb in rule["verbs"]:
                        for group in rule["apiGroups"]:
                            out[(verb, res)].add(group)
    return out


def sent_requests(metrics_text: str) -> dict[tuple[str, str], dict[str, float]]:
    """(verb, resource) -> code -> count, from ``podgrouper_api_requests_total``."""
    out: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    for family in text_string_to_metric_families(metrics_text):
        if family.name == "podgrouper_api_requests":
            for s in family.samples:
                if s.name.endswith("_total"):
                    out[(s.labels["verb"], s.labels["resource"])][s.labels["code"]] = s.value
    return out


# Owners between a known workload and its pods that no plugin or definition names as a kind of its own.
INTERMEDIATE_OWNERS = {
    ("serving.knative.dev", "configurations"): "Knative Service -> Configuration -> Revision -> Deployment",
    ("serving.knative.dev", "revisions"): "the Knative plugin reads the Revision's gang and topology settings",
    ("grove.io", "podcliques"): "PodCliqueSet / PodGangSet -> PodClique -> Pod",
    ("grove.io", "podcliquescalinggroups"): "PodCliqueSet -> PodCliqueScalingGroup -> PodClique",
    ("scheduler.grove.io", "podgangs"): "the Grove plugin reads the PodGang of a pod",
    ("nvidia.com", "dynamocomponentdeployments"): "DynamoGraphDeployment -> DynamoComponentDeployment",
    ("kubevirt.io", "virtualmachines"): "VirtualMachine -> VirtualMachineInstance -> Pod",
}


def plural(kind: str) -> str:
    """The resource name Kubernetes' default pluralization gives a kind (Sandbox → sandboxes)."""
    k = kind.lower()
    if k.endswith(("s", "x", "z", "ch", "sh")):
        return k + "es"
    if k.endswith("y") and k[-2:-1] not in "aeiou":
        return k[:-1] + "ies"
    return k + "s"


def test_owner_kinds_are_kinds_the_code_knows() -> None:
    """Every owner kind the ClusterRole lets the grouper read is handled by a native plugin, named by a
    built-in Karta definition, or an intermediate owner between those and their pods; and every such kind
    is readable (no native kind left out)."""
    from grouper.karta import DefinitionRegistry
    from grouper.plugins.registry import RUNAI_SKIPPED_KINDS, native_plugins

    known = {(g, plural(k)) for g, _, k in native_plugins()} | {("run.ai", plural(k)) for k in RUNAI_SKIPPED_KINDS}
    for loaded in DefinitionRegistry(str(REPO / "definitions")).all():
        d = loaded.definition
        # additionalChildKinds (Services, routes) own no pods: the grouper does not read them
        kinds = [d.gvk, *(c.kind for c in d.components() if c.kind is not None)]
        known |= {(k.group, plural(k.kind)) for k in kinds if k.kind}
    docs = [d for d in yaml.safe_load_all(RBAC.read_text()) if d]
    role = next(d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] == SA)
    owners = {(g, r) for rule in role["rules"] for g in rule["apiGroups"] for r in rule.get("resources", [])
              if r not in OWN_RESOURCES}
    assert sorted(owners - known - set(INTERMEDIATE_OWNERS)) == [], "owner kinds nothing in the code handles"
    assert sorted(known - owners - {("", "pods")}) == [], "kinds the code handles that the grouper cannot read"


@pytest.mark.parametrize("watch_list", ["false", "true"], ids=["lists", "streaming-lists"])
def test_every_granted_right_is_used(cluster: Any, kube: Kube, namespace: str, tmp_path: Path, watch_list: str) -> None:
    """With paginated LISTs (``--watch-list=false``, what the grouper falls back to on an API server that
    refuses streaming lists) every right is used; with streaming lists (the default) every right but the
    ``list`` of the cached resources, which a streaming list does not need (it is authorized as a watch)."""
    ns = namespace
    label_namespace(kube, ns)
    kube.apply_yaml(RBAC)
    cluster.create_service_account(ns, "scraper")
    scraper_binding = f"scraper-{ns}"  # non-resource URLs: only a ClusterRoleBinding grants them
    kube.apply_yaml([{
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": scraper_binding},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "kai-pod-grouper-metrics-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "scraper", "namespace": ns}],
    }])
    scraper = cluster.create_token(ns, "scraper")
    token_file = tmp_path / "token"
    token_file.write_text(cluster.create_token(SA_NS, SA))
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GROUPER_") and k != "KUBECONFIG"}
    argv = [str(GROUPER), "run", "--server", cluster.server, "--token-file", str(token_file),
            "--certificate-authority", cluster.ca_file, "--http-bind-address", f"127.0.0.1:{port}",
            "--definitions", str(REPO / "definitions"), "--log-format", "text",
            # what deploy/grouper.yaml passes, scoped to this test's namespace
            "--leader-elect=true", "--leader-election-namespace", SA_NS, "--leader-election-id", SA,
            "--default-priorities-configmap-name", DEFAULTS_CM, "--default-priorities-configmap-namespace", SA_NS,
            "--namespace-label-selector", scope_label(ns), f"--watch-list={watch_list}"]
    log_path = tmp_path / "grouper.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
    api = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10)
    try:
        def leading() -> bool:
            assert proc.poll() is None, log_path.read_text()[-3000:]
            try:
                return api.get("/readyz").json().get("role") == "leader"
            except httpx.HTTPError:
                return False

        wait_until(leading, 90, what="grouper leads")
        # a Job grouped, then made non-preemptible (PodGroup update)
        kube.create(f"/apis/batch/v1/namespaces/{ns}/jobs", job("e2e", 2, labels={"kai.scheduler/queue": "q1"}))
        wait_until(lambda: annotated(kube, ns, 2, "job-name=e2e"), 60, what="Job pods grouped")
        kube.patch(f"/apis/batch/v1/namespaces/{ns}/jobs/e2e",
                   {"metadata": {"labels": {"kai.scheduler/preemptibility": "non-preemptible"}}})
        wait_until(lambda: [pg for pg in pod_groups(kube, ns).values()
                            if pg["spec"].get("preemptibility") == "non-preemptible"], 30, what="PodGroup updated")
        # a Job that cannot be grouped: a Warning Event
        kube.create(f"/apis/batch/v1/namespaces/{ns}/jobs",
                    job("broken", 1, annotations={"kai.scheduler/batch-min-member": "abc"}))
        # the grouper's own Event: the Job controller's SuccessfulCreate Events land in this namespace too
        wait_until(lambda: [e for e in kube.list(f"/api/v1/namespaces/{ns}/events")
                            if e.get("reportingComponent") == COMPONENT and e.get("type") == "Warning"],
                   60, what="the grouper's Warning Event")
        # reviewed API requests, one reading the workload live through the grouper's client
        admin = {"Authorization": f"Bearer {cluster.admin_token}"}
        live = api.get(f"/workloads/{ns}/Job/e2e", params={"live": "true"}, headers=admin)
        assert live.status_code == 200 and live.json()["source"] == "live", live.text
        wait_until(lambda: api.get("/metrics", headers={"Authorization": f"Bearer {scraper}"}).status_code == 200,
                   15, what="metrics-reader binding effective")

        def renewed() -> dict[tuple[str, str], dict[str, float]] | None:  # the leader renewed its Lease once
            got = sent_requests(api.get("/metrics", headers={"Authorization": f"Bearer {scraper}"}).text)
            return got if got.get(("update", "leases")) else None

        sent = wait_until(renewed, 30, interval=0.5, what="a Lease renewal")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        kube.delete(f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{scraper_binding}", ignore_missing=True)

    used = {key for key, codes in sent.items() if any(c.startswith("2") for c in codes)}
    forbidden = {key: codes for key, codes in sent.items() if "403" in codes}
    assert not forbidden, f"requests the RBAC refused: {forbidden}\n{log_path.read_text()[-3000:]}"
    rights = granted()
    streaming = watch_list == "true"
    unused = []
    for (verb, res), groups in sorted(rights.items()):
        if res not in OWN_RESOURCES:
            assert verb in OWNER_VERBS, f"owner kind {res}: only {sorted(OWNER_VERBS)} are used, not {verb}"
            continue
        if (verb, res) not in used and (verb, res) not in ALLOWED_UNUSED:
            unused.append(f"{verb} {res} ({', '.join(sorted(g or 'core' for g in groups))})")
    cached = ["configmaps (core)", "kartas (run.ai)", "namespaces (core)", "podgroups (scheduling.run.ai)",
              "pods (core)", "priorityclasses (scheduling.k8s.io)", "workloadgroups (grouper.kai-pod-grouper.io)"]
    if streaming:  # every cache was filled by a streaming list: no LIST at all
        assert unused == [f"list {r}" for r in cached], unused
        assert not [k for k in used if k[0] == "list"], sorted(used)
    else:
        assert not unused, f"granted but never sent (remove them or add them to ALLOWED_UNUSED with a reason): {unused}"
    # the owner-kind rules are represented by the Job: the informer lists (or stream-lists) and watches it, the
    # live read gets it
    assert {("watch", "jobs"), ("get", "jobs")} <= used and (("list", "jobs") in used) != streaming
    # the allow-list does not rot: each entry is still granted, and is really unused in this run
    # (else it belongs in neither list)
    for key in ALLOWED_UNUSED:
        assert key in rights, f"ALLOWED_UNUSED names {key}, which rbac.yaml no longer grants"
        if key != ("create", "leases"):  # used or not depending on whether an earlier test made the Lease
            assert key not in used, f"{key} was used in this run: drop it from ALLOWED_UNUSED"
    # everything the grouper sent is granted under the same resource name (the metric and RBAC agree)
    assert {k for k in used if k[1] != "discovery"} <= set(rights), sorted(used - set(rights))
    print(f"\n[measure] RBAC: {len(rights)} (verb, resource) rights granted, {len(used)} distinct requests used, "
          f"{len(ALLOWED_UNUSED)} allow-listed for rarer paths")


def test_service_account_is_refused_what_it_does_not_need(cluster: Any, kube: Kube, namespace: str) -> None:
    ns = namespace
    kube.apply_yaml(RBAC)
    lease_api = "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"
    other_lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                   "metadata": {"name": f"other-controller-{ns}"}, "spec": {"holderIdentity": "someone"}}
    kube.create(lease_api.format(ns=SA_NS), other_lease)
    kube.create(f"/api/v1/namespaces/{SA_NS}/configmaps",
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"other-{ns}"}, "data": {"k": "v"}})
    pod = kube.create(f"/api/v1/namespaces/{ns}/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "c", "image": "x"}]}})
    with kube.with_token(cluster.create_token(SA_NS, SA)) as sa:
        wait_until(lambda: sa.request("GET", f"/api/v1/namespaces/{ns}/pods").status_code == 200, 10,
                   what="RBAC effective")

        def status(method: str, path: str, body: Any = None, **params: str) -> int:
            headers = {"Content-Type": "application/merge-patch+json"} if method == "PATCH" else {}
            return sa.request(method, path, json=body, params=params, headers=headers).status_code

        other = f"{lease_api.format(ns=SA_NS)}/{other_lease['metadata']['name']}"
        refused = {
            "read Secrets in a namespace": status("GET", f"/api/v1/namespaces/{ns}/secrets"),
            "read Secrets cluster-wide": status("GET", "/api/v1/secrets"),
            "read another Lease": status("GET", other),
            "update another Lease": status("PUT", other, kube.get(other)),
            "patch another Lease": status("PATCH", other, {"spec": {"holderIdentity": "grouper"}}),
            "delete another Lease": status("DELETE", other),
            "create a Lease outside the election namespace": status(
                "POST", lease_api.format(ns=ns), {**other_lease, "metadata": {"name": SA}}),
            "list Leases": status("GET", lease_api.format(ns=SA_NS)),
            "delete a pod": status("DELETE", f"/api/v1/namespaces/{ns}/pods/p"),
            "update a pod": status("PUT", f"/api/v1/namespaces/{ns}/pods/p", pod),
            "read another ConfigMap": status("GET", f"/api/v1/namespaces/{SA_NS}/configmaps/other-{ns}"),
            "list ConfigMaps of the namespace": status("GET", f"/api/v1/namespaces/{SA_NS}/configmaps"),
            "list ConfigMaps cluster-wide": status("GET", "/api/v1/configmaps"),
            "patch a PodGroup": status("PATCH", f"/apis/scheduling.run.ai/v2alpha2/namespaces/{ns}/podgroups/x",
                                       {"spec": {}}),
            "write a Job": status("POST", f"/apis/batch/v1/namespaces/{ns}/jobs", {}),
            "update a Job's finalizers": status("PUT", f"/apis/batch/v1/namespaces/{ns}/jobs/x/finalizers", {}),
            "update a pod's finalizers": status("PUT", f"/api/v1/namespaces/{ns}/pods/p/finalizers", {}),
            "read CRDs": status("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"),
            "create events.k8s.io Events": status("POST", f"/apis/events.k8s.io/v1/namespaces/{ns}/events", {}),
        }
        assert {what: code for what, code in refused.items() if code != 403} == {}
        # and what it does need still works: a pod PATCH, the defaults ConfigMap by field selector
        assert status("PATCH", f"/api/v1/namespaces/{ns}/pods/p", {"metadata": {"labels": {"x": "y"}}}) == 200
        assert status("GET", f"/api/v1/namespaces/{SA_NS}/configmaps",
                      fieldSelector=f"metadata.name={DEFAULTS_CM}") == 200
        assert status("GET", f"/api/v1/namespaces/{SA_NS}/configmaps", fieldSelector=f"metadata.name={DEFAULTS_CM}",
                      watch="true", timeoutSeconds="1") == 200
    kube.delete(other, ignore_missing=True)
    kube.delete(f"/api/v1/namespaces/{SA_NS}/configmaps/other-{ns}", ignore_missing=True)
