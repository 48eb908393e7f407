"""``make demo``: the whole path on a real, local control plane, end to end.

1. builds (first time only) and starts etcd + kube-apiserver + kube-controller-manager on 127.0.0.1;
2. runs the real JobSet controller (``sigs.k8s.io/jobset``, built from its Go module; its CRD and webhooks
   from that module), installs the PodGroup and Karta CRDs and the grouper's RBAC from ``deploy/``;
3. runs ``grouper run`` as a separate process with a ServiceAccount token bound to that ClusterRole;
4. submits only the JobSet of ``examples/jobset-demo.yaml`` (leader x1, workers x2, 4 GPUs per pod): the
   JobSet controller creates its Jobs and the Job controller their pods;
5. prints the PodGroup with its sub-groups, each pod's group and sub-group, and the grouper's decisions.

Then it keeps everything up until Ctrl-C (``--once`` exits right away) and stops it cleanly.

``--backend upstream`` (``make demo BACKEND=upstream``) runs the same workload through upstream gang
scheduling instead: the control plane also runs kube-scheduler (Workload API and gang scheduling on) and
kwok with 3 simulated nodes of 4 GPUs; the grouper runs with ``--backend=upstream`` and its admission
webhook (registered with a certificate signed by the cluster's CA), the pods ask for the default
scheduler; the demo prints the Workload and PodGroup and the pods bound to nodes together.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from devtools.cluster import LocalCluster, install_crds
from devtools.cluster.objects import create_manifest, create_object
from devtools.webhook_config import webhook_configuration as configuration

ROOT = Path(__file__).resolve().parents[1]
DEMO_FILE = ROOT / "examples" / "jobset-demo.yaml"
CRDS = [ROOT / "deploy" / "crds"]  # JobSet's own CRD comes with the operator, from its module
SA_NAMESPACE, SA_NAME = "kai-system", "kai-pod-grouper"
SCHED = "scheduling.k8s.io/v1beta1"
# what the upstream backend writes, beyond deploy/rbac.yaml (the chart gains it with the webhook objects)
UPSTREAM_RBAC = [
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "kai-pod-grouper-upstream"},
        "rules": [
            {
                "apiGroups": ["scheduling.k8s.io"],
                "resources": ["workloads", "podgroups"],
                "verbs": ["get", "list", "watch", "create", "update"],
            },
            # the PodGroup names a PriorityClass only when it exists (upstream admission checks it)
            {"apiGroups": ["scheduling.k8s.io"], "resources": ["priorityclasses"], "verbs": ["get"]},
        ],
    },
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "kai-pod-grouper-upstream"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "kai-pod-grouper-upstream",
        },
        "subjects": [{"kind": "ServiceAccount", "name": SA_NAME, "namespace": SA_NAMESPACE}],
    },
]

def say(msg: str) -> None:
    print(f"\033[1m==> {msg}\033[0m" if sys.stdout.isatty() else f"==> {msg}", flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(what: str, check: Any, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(0.25)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")


def http_json(url: str, token: str | None = None) -> Any:
    """GET the grouper's API; its endpoints (not the probes) need a token the API server accepts."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5) as resp:
        return json.loads(resp.read())


def webhook_configuration(port: int, ca_file: str) -> dict[str, Any]:
    """Pod CREATEs outside the system namespaces go to the grouper; admitted unchanged when it does not answer."""
    not_system = {"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", SA_NAMESPACE]}
    ]}
    return configuration("kai-pod-grouper", port, ca_file, not_system)


def _default_scheduler(doc: Any) -> None:
    """Point every pod template of the JobSet / Job at the default scheduler (the upstream backend)."""
    if isinstance(doc, dict):
        if "schedulerName" in doc:
            doc["schedulerName"] = "default-scheduler"
        for v in doc.values():
            _default_scheduler(v)
    elif isinstance(doc, list):
        for v in doc:
            _default_scheduler(v)


def show_bound(cluster: LocalCluster, namespace: str, name: str) -> None:
    for plural, kind in (("workloads", "Workload"), ("podgroups", "PodGroup")):
        _, objs = cluster.request("GET", f"/apis/{SCHED}/namespaces/{namespace}/{plural}")
        for obj in objs["items"]:  # list items carry no kind
            say(f"{kind} {namespace}/{obj['metadata']['name']} ({SCHED}) as stored in the API server")
            print(yaml.safe_dump({"spec": obj["spec"]}, sort_keys=False), end="")
    _, pods = cluster.request("GET", f"/api/v1/namespaces/{namespace}/pods")
    say(f"pods of JobSet {namespace}/{name} and the nodes the scheduler bound them to")
    print(f"{'POD':44} {'PHASE':8} {'NODE':12} SCHEDULING-GROUP")
    for pod in sorted(pods["items"], key=lambda p: p["metadata"]["name"]):
        group = (pod["spec"].get("schedulingGroup") or {}).get("podGroupName", "-")
        print(
            f"{pod['metadata']['name']:44} {pod['status'].get('phase', ''):8} "
            f"{pod['spec'].get('nodeName', '-'):12} {group}"
        )


def submit_workload(cluster: LocalCluster, *, upstream: bool = False) -> tuple[str, str]:
    """Create the JobSet only (the file's Jobs are fixtures for ``grouper plan``): the JobSet controller
    creates its Jobs, the Job controller their pods."""
    doc = next(d for d in yaml.safe_load_all(DEMO_FILE.read_text()) if d and d.get("kind") == "JobSet")
    if upstream:
        _default_scheduler(doc)
    meta = doc["metadata"]
    for key in ("uid", "resourceVersion", "creationTimestamp"):
        meta.pop(key, None)
    obj = create_object(cluster, doc)
    jobset_ns, jobset_name = obj["metadata"]["namespace"], obj["metadata"]["name"]
    say(f"created {obj['kind']} {jobset_ns}/{jobset_name}; the JobSet controller creates its Jobs")
    return jobset_ns, jobset_name


def grouper_cli(cluster: LocalCluster, *args: str) -> str:
    """``grouper ARGS`` against the demo cluster (as its admin), its output."""
    proc = subprocess.run([sys.executable, "-m", "grouper.cli.main", *args, "--kubeconfig", cluster.kubeconfig_path],
                          capture_output=True, text=True, timeout=60)
    return proc.stdout + (proc.stderr if proc.returncode else "")


def show_result(cluster: LocalCluster, namespace: str, api: str, token: str) -> None:
    say(f"grouper describe jobset/demo -n {namespace}   (the workload tree, as kli describe prints it)")
    print(grouper_cli(cluster, "describe", "jobset/demo", "-n", namespace), end="")
    say(f"grouper get workloads -n {namespace}")
    print(grouper_cli(cluster, "get", "workloads", "-n", namespace), end="")
    _, pgs = cluster.request("GET", f"/apis/scheduling.run.ai/v2alpha2/namespaces/{namespace}/podgroups")
    for pg in pgs["items"]:
        view = {
            "apiVersion": pg["apiVersion"],
            "kind": pg["kind"],
            "metadata": {
                k: pg["metadata"][k]
                for k in ("name", "namespace", "labels", "ownerReferences")
                if k in pg["metadata"]
            },
            "spec": pg["spec"],
        }
        say(f"PodGroup {namespace}/{pg['metadata']['name']} as stored in the API server")
        print(yaml.safe_dump(view, sort_keys=False), end="")
    _, pods = cluster.request("GET", f"/api/v1/namespaces/{namespace}/pods")
    say("pods and their groups")
    print(f"{'POD':44} {'PHASE':8} {'POD-GROUP (annotation)':48} SUB-GROUP (label)")
    for pod in sorted(pods["items"], key=lambda p: p["metadata"]["name"]):
        meta = pod["metadata"]
        print(
            f"{meta['name']:44} {pod['status'].get('phase', ''):8} "
            f"{(meta.get('annotations') or {}).get('pod-group-name', '-'):48} "
            f"{(meta.get('labels') or {}).get('kai.scheduler/subgroup-name', '-')}"
        )
    say("decisions (from the grouper's HTTP API)")
    for pg in pgs["items"]:
        try:
            detail = http_json(f"{api}/podgroups/{namespace}/{pg['metadata']['name']}", token)
        except OSError as exc:
            print(f"  (HTTP API not available: {exc})")
            continue
        print(json.dumps(detail.get("decision") or detail, indent=2)[:4000])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m devtools.demo",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--once", action="store_true", help="exit after printing the result")
    ap.add_argument(
        "--backend",
        choices=("kai", "upstream"),
        default="kai",
        help="upstream: also run kube-scheduler and 3 simulated 4-GPU nodes, write upstream Workload/PodGroup",
    )
    args = ap.parse_args(argv)
    upstream = args.backend == "upstream"

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())

    say("starting the local control plane and the JobSet controller (the first run builds them from source: "
        "several minutes)")
    with LocalCluster(
        scheduler=upstream, kwok_nodes=3 if upstream else 0, node_gpus=4, operators=["jobset"]
    ) as cluster:
        say(f"control plane and JobSet controller ready in {cluster.started_in:.1f}s at {cluster.server}")
        if upstream:
            say(
                f"kube-scheduler and kwok running; simulated nodes with 4 GPUs each: {', '.join(cluster.nodes)}"
            )
        names = install_crds(cluster, CRDS)
        say(f"installed CRDs: {', '.join(sorted(names))}")
        create_manifest(cluster, ROOT / "deploy" / "rbac.yaml")
        if upstream:
            for doc in UPSTREAM_RBAC:
                create_object(cluster, doc)
        token = cluster.create_token(SA_NAMESPACE, SA_NAME, expiration_seconds=24 * 3600)
        assert cluster.data_dir is not None
        kubeconfig = cluster.write_kubeconfig(
            cluster.data_dir / "grouper.kubeconfig",
            token=token,
            user=f"system:serviceaccount:{SA_NAMESPACE}:{SA_NAME}",
        )
        say(f"RBAC applied; the grouper runs as ServiceAccount {SA_NAMESPACE}/{SA_NAME}")

        port = free_port()
        api = f"http://127.0.0.1:{port}"
        log_path = cluster.data_dir / "grouper.log"
        extra: list[str] = []
        webhook_port = free_port()
        if upstream:
            cert, key = cluster.serving_cert("grouper-webhook")
            extra = [
                "--backend=upstream",
                "--scheduler-name=default-scheduler",
                f"--webhook-bind-address=127.0.0.1:{webhook_port}",
                f"--webhook-cert-file={cert}",
                f"--webhook-key-file={key}",
                f"--webhook-client-ca={cluster.webhook_client_ca}",  # only the API server may call it
                "--webhook-shutdown-delay-seconds=0",  # no Service in front of it: nothing to wait out at exit
            ]
            # Registered first, as a chart installs it with the Deployment: the API server has picked the
            # configuration up long before the grouper is ready (its readiness includes the webhook listening),
            # so no pod of the JobSet is created before its admission reaches the grouper.
            create_object(cluster, webhook_configuration(webhook_port, cluster.ca_file))
            say(f"admission webhook registered: https://127.0.0.1:{webhook_port}/mutate-pods")
        with open(log_path, "wb") as log:
            grouper = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "grouper.cli.main",
                    "run",
                    "--kubeconfig",
                    str(kubeconfig),
                    "--http-bind-address",
                    f"127.0.0.1:{port}",
                    "--log-format",
                    "text",
                    *extra,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        try:

            def ready() -> bool:
                if grouper.poll() is not None:
                    raise RuntimeError(
                        f"grouper exited with {grouper.returncode}:\n{log_path.read_text()[-3000:]}"
                    )
                try:
                    return bool(http_json(f"{api}/readyz"))
                except OSError:
                    return False

            wait_for("the grouper to be ready", ready)
            say(f"grouper running (pid {grouper.pid}), HTTP API at {api}")

            wait_for(
                "the default ServiceAccount",
                lambda: (
                    cluster.request("GET", "/api/v1/namespaces/default/serviceaccounts/default")[0] == 200
                ),
            )
            if upstream:
                t0 = time.monotonic()
                namespace, name = submit_workload(cluster, upstream=True)

                def all_bound() -> bool:
                    _, pods = cluster.request("GET", f"/api/v1/namespaces/{namespace}/pods")
                    items = pods["items"]
                    return len(items) >= 3 and all(p["spec"].get("nodeName") for p in items)

                wait_for("the gang to be bound", all_bound, timeout=90)
                say(
                    f"all pods of JobSet {namespace}/{name} bound {time.monotonic() - t0:.2f}s after submission"
                )

                def all_ready() -> bool:  # kwok marks bound pods Running and Ready right after binding
                    _, pods = cluster.request("GET", f"/api/v1/namespaces/{namespace}/pods")
                    return all(
                        any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or [])
                        for p in pods["items"]
                    )

                # the table after kwok ran them: on a busy machine a pod shown right after binding was Pending
                wait_for("the gang's pods to be Ready", all_ready, timeout=60)
                show_bound(cluster, namespace, name)
                say(f"grouper describe jobset/{name} -n {namespace}")
                print(grouper_cli(cluster, "describe", f"jobset/{name}", "-n", namespace), end="")
                if not args.once:
                    say("Ctrl-C to stop")
                    stop.wait()
                return 0
            namespace, name = submit_workload(cluster)

            def grouped() -> bool:
                _, pods = cluster.request("GET", f"/api/v1/namespaces/{namespace}/pods")
                items = pods["items"]
                return len(items) >= 3 and all(
                    (p["metadata"].get("annotations") or {}).get("pod-group-name") for p in items
                )

            t0 = time.monotonic()
            wait_for("pods to be created and grouped", grouped, timeout=90)
            say(
                f"all pods of JobSet {namespace}/{name} grouped {time.monotonic() - t0:.2f}s after submission"
            )
            show_result(cluster, namespace, api, token)
            say("the grouper's log (decisions and writes)")
            lines = log_path.read_text().splitlines()
            for line in [ln for ln in lines if "podgroup" in ln.lower() or "decision" in ln.lower()][-15:]:
                print("  " + line[:300])
            if not args.once:
                say(
                    f"everything stays up; try:  KUBECONFIG={cluster.kubeconfig_path} "
                    f".venv/bin/grouper get podgroups -A --server {api}"
                )
                say("Ctrl-C to stop")
                stop.wait()
        finally:
            say("stopping the grouper and the control plane")
            grouper.send_signal(signal.SIGTERM)
            try:
                grouper.wait(timeout=20)
            except subprocess.TimeoutExpired:
                grouper.kill()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
