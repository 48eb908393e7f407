"""A real Kubernetes control plane on 127.0.0.1: etcd + kube-apiserver + kube-controller-manager.

Built from source by :mod:`devtools.cluster.build`; no kubelet and, by default, no scheduler (pods stay
Pending). Opt in per test to a real kube-scheduler and simulated nodes (kwok)::

    with LocalCluster(scheduler=True, kwok_nodes=2, node_gpus=4) as c:   # or later:
        c.start_scheduler(); c.add_nodes(3, gpus=4)

``workload_api`` (default: on with ``scheduler``) turns on the Workload API and gang scheduling
(:mod:`devtools.cluster.gang`: feature gates on the API server, controller manager and scheduler, and
``scheduling.k8s.io/v1beta1`` + ``v1alpha3`` in ``--runtime-config``).
``pod_gc`` (default: on with ``scheduler`` or ``kwok_nodes``) runs kube-controller-manager's pod garbage
collector: :meth:`LocalCluster.delete_node` then loses its pods as a real cluster does, 40-80 s later.
``operators=["jobset", "kuberay", "lws", "kubeflow"]`` runs real workload operators (:mod:`devtools.cluster.operators`): their CRDs are
installed from their Go module, their controller starts once the control plane is up, its webhooks are
registered once its readiness probe answers, and it stops first.
The API server presents a client certificate to every admission webhook (``--admission-control-config-file``);
a webhook that requires one signed by :attr:`LocalCluster.webhook_client_ca` accepts it and nobody else.
Every start gets a fresh temporary data directory (PKI, etcd data, kubeconfig, process logs) and free
ports; :meth:`LocalCluster.stop` stops the controller manager, then the API server, then etcd, and
removes the directory.

    with LocalCluster() as c:
        print(c.server, c.kubeconfig_path)
        token = c.create_token("default", "default")

Faults for tests of clients that must survive them:

- ``LocalCluster(apiserver_args=["--min-request-timeout=5"])`` starts the API server with extra flags;
  that one makes it end every watch that gave no ``timeoutSeconds`` after 5-10 s instead of 30-60 min.
- :meth:`LocalCluster.stop_apiserver` stops only kube-apiserver (SIGTERM: open watches are closed
  within 2 s, then it exits, about 1 s in all; or SIGKILL with ``graceful=False``); connections to :attr:`LocalCluster.server` are then refused. etcd and the controller
  manager keep running. :meth:`LocalCluster.start_apiserver` starts it again on the same port with the same
  etcd data, serving certificate, token file and ServiceAccount signing key (so objects, resourceVersions,
  kubeconfigs and issued tokens stay valid) and returns once ``/readyz`` answers 200;
  :meth:`LocalCluster.restart_apiserver` does both.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import ctypes
import json
import os
import queue
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Self

import yaml

from . import build, gang, pki
from . import operators as ops
from .crds import install_crds
from .errors import ClusterError

DEFAULT_CONTROLLERS = (
    "garbagecollector",
    "namespace",
    "job",
    "cronjob",
    "replicaset",
    "deployment",
    "statefulset",
    "serviceaccount",
    "serviceaccount-token",
)
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager")
# what operators expect of a real cluster beyond DEFAULT_CONTROLLERS: the kube-root-ca.crt ConfigMap in
# every namespace (pods' projected service-account volumes name it)
OPERATOR_CONTROLLERS = ("root-ca-cert-publisher",)
# what a cluster with real Node objects (a scheduler and kwok nodes) runs beyond DEFAULT_CONTROLLERS: the pod
# garbage collector (1.37's name; alias `podgc`), which force-deletes the pods bound to a node that no longer
# exists, as in any real cluster. Its quarantine is fixed in its code, no flag shortens it (pkg/controller/
# podgc: a pass every 20 s, a missing node confirmed 40 s after first seen missing): pods go 40-80 s after
# their node. Not in clusters without nodes: their tests bind pods to made-up node names, which it would
# delete after the same quarantine.
NODE_CONTROLLERS = ("pod-garbage-collector-controller",)


def _free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _get_ok(url: str, ctx: ssl.SSLContext | None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2, context=ctx) as resp:
            return bool(resp.status == 200)
    except urllib.error.HTTPError:
        return False


def _terminate(proc: subprocess.Popen[bytes], timeout: float) -> None:
    """SIGTERM, then SIGKILL after ``timeout`` seconds (right away when 0)."""
    if proc.poll() is None:
        if timeout > 0:
            proc.terminate()
            try:
                proc.wait(timeout)
                return
            except subprocess.TimeoutExpired:
                pass
        proc.kill()
    proc.wait()


class _Spawner:
    """A daemon thread that forks the components.

    PR_SET_PDEATHSIG fires when the *thread* that forked the child exits, not the process. This thread
    lives until the cluster stops (or the process ends: a daemon thread is never joined), whichever thread
    (a test, ``asyncio.to_thread``) starts or restarts a component.
    """

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]] | None] = queue.SimpleQueue()
        threading.Thread(target=self._run, name="devcluster-spawner", daemon=True).start()

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            fn, fut = job
            try:
                fut.set_result(fn())
            except BaseException as e:
                fut.set_exception(e)

    def call(self, fn: Callable[[], Any]) -> Any:
        fut: Future[Any] = Future()
        self._jobs.put((fn, fut))
        return fut.result()

    def close(self) -> None:
        self._jobs.put(None)


def _die_with_parent() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class LocalCluster:
    """A local control plane. Attributes are valid after :meth:`start`.

    ``server`` (https URL), ``ca_file`` (CA that signed the serving certificate), ``admin_token``
    (member of ``system:masters``), ``kubeconfig_path`` (admin kubeconfig), ``data_dir``.
    """

    def __init__(
        self,
        *,
        bin_dir: str | os.PathLike[str] | None = None,
        base_dir: str | os.PathLike[str] | None = None,
        controller_manager: bool = True,
        crds: Iterable[str | os.PathLike[str]] = (),
        controllers: Iterable[str] = DEFAULT_CONTROLLERS,
        apiserver_args: Iterable[str] = (),
        controller_manager_args: Iterable[str] = (),
        scheduler: bool = False,
        kwok_nodes: int = 0,
        node_gpus: int = 4,
        workload_api: bool | None = None,
        pod_gc: bool | None = None,
        kube_api_qps: int = 200,
        kube_api_burst: int = 400,
        startup_timeout: float = 90.0,
        die_with_parent: bool = True,
        keep_data_dir: bool | None = None,
        quiet: bool = False,
        operators: Iterable[str] = (),
    ) -> None:
        """``crds``: CRD files/directories installed (and Established) before the controller manager starts,
        so its garbage collector knows the custom kinds from the beginning (it rediscovers resources only
        every 30 s). ``apiserver_args``: extra kube-apiserver flags (they come last, so they win).
        ``scheduler``: start kube-scheduler and the kwok controller too; ``kwok_nodes``: that many simulated
        nodes with ``node_gpus`` GPUs each are added at start (implies the kwok controller).
        ``workload_api``: the gang-scheduling feature gates and API versions (default: on with either).
        ``pod_gc``: run the pod garbage collector (``NODE_CONTROLLERS``; default: on with either), which
        deletes pods bound to a node that does not exist: off for clusters whose tests bind pods to made-up
        node names.
        ``die_with_parent``: the components get SIGKILL when this process dies (PR_SET_PDEATHSIG), so a
        killed test run leaves nothing behind; they are spawned from the cluster's own thread, so any thread
        (e.g. ``asyncio.to_thread``) may start or restart them. ``keep_data_dir`` (default: env ``DEVCLUSTER_KEEP_DATA=1``): keep the data dir
        (logs, PKI, etcd) after stop. ``operators``: workload operators to run (see
        :mod:`devtools.cluster.operators`; built on first use like the control plane), with
        ``OPERATOR_CONTROLLERS`` added to ``controllers``.
        """
        self._bin_dir = Path(bin_dir).resolve() if bin_dir else None
        self._base_dir = base_dir
        self._with_kcm = controller_manager
        self._with_scheduler = scheduler
        self._initial_nodes, self._node_gpus = kwok_nodes, node_gpus
        self.workload_api = scheduler or kwok_nodes > 0 if workload_api is None else workload_api
        self.nodes: list[str] = []  # simulated nodes added by add_nodes()
        self._node_seq = 0
        self._crds = [Path(p) for p in crds]
        self._operators = tuple(ops.operator(name).name for name in operators)
        self._controllers = tuple(controllers)
        if self._operators:
            self._controllers += tuple(c for c in OPERATOR_CONTROLLERS if c not in self._controllers)
        self.pod_gc = (scheduler or kwok_nodes > 0) if pod_gc is None else pod_gc
        if self.pod_gc:
            self._controllers += tuple(c for c in NODE_CONTROLLERS if c not in self._controllers)
        self._apiserver_args = tuple(apiserver_args)
        self._kcm_args = tuple(controller_manager_args)
        self._qps, self._burst = kube_api_qps, kube_api_burst
        self._timeout = startup_timeout
        self._die_with_parent = die_with_parent
        self._quiet = quiet
        if keep_data_dir is None:
            keep_data_dir = os.environ.get("DEVCLUSTER_KEEP_DATA", "") not in ("", "0")
        self._keep = keep_data_dir
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._argv: dict[str, list[str]] = {}  # how each component was started, to start it again
        self._spawner: _Spawner | None = None
        self._logs: dict[str, Any] = {}
        self._ssl: ssl.SSLContext | None = None
        self._bdir = Path()
        self.data_dir: Path | None = None
        self.server = ""
        self.ca_file = ""
        self.webhook_client_ca = ""  # CA of the client certificate the API server presents to webhooks
        self.pki: pki.Pki | None = None
        self.admin_token = ""
        self.kubeconfig_path = ""
        self.ports: dict[str, int] = {}
        self.started_in: float = 0.0  # seconds from start() to ready
        self.timings: dict[str, float] = {}  # seconds per startup phase
        self.crd_names: list[str] = []

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> Self:
        if not self.running:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def controllers(self) -> tuple[str, ...]:
        """The controllers kube-controller-manager runs (``--controllers``)."""
        return self._controllers

    @property
    def running(self) -> bool:
        """Every component is up (False while the API server is stopped by :meth:`stop_apiserver`)."""
        components = COMPONENTS if self._with_kcm else COMPONENTS[:2]
        procs = [self._procs.get(name) for name in components]
        return all(p is not None and p.poll() is None for p in procs)

    def cpu_seconds(self, component: str) -> float:
        """user + system CPU time of a running component so far (``/proc/<pid>/stat``): what a benchmark
        charges the control plane for serving it."""
        proc = self._procs.get(component)
        if proc is None or proc.poll() is not None:
            raise RuntimeError(f"{component} is not running")
        fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    @property
    def apiserver_running(self) -> bool:
        proc = self._procs.get("kube-apiserver")
        return proc is not None and proc.poll() is None

    def start(self) -> Self:
        if self._procs:
            raise ClusterError("cluster already started")
        t0 = time.monotonic()
        bdir = self._bin_dir or build.ensure_binaries(quiet=self._quiet, names=build.BINARIES + self._operators)
        self._bdir = bdir
        needed = list(COMPONENTS if self._with_kcm else COMPONENTS[:2]) + list(self._operators)
        if self._with_scheduler or self._initial_nodes:
            needed += ["kube-scheduler", "kwok"]
        for name in needed:
            if not (bdir / name).is_file():
                raise ClusterError(f"missing binary {bdir / name}")
        self.data_dir = Path(tempfile.mkdtemp(prefix="devcluster-", dir=self._base_dir))
        atexit.register(self.stop)
        try:
            self._start(bdir)
        except BaseException as e:
            msg = f"local cluster failed to start: {e}"
            tails = "".join(
                f"\n----- {name} log (last lines) -----\n{self.log_tail(name)}" for name in self._logs
            )
            print(f"[devcluster] {msg}{tails}", file=sys.stderr, flush=True)
            self.stop()
            if isinstance(e, ClusterError):
                raise ClusterError(msg + tails) from None
            raise
        self.started_in = time.monotonic() - t0
        return self

    def _start(self, bdir: Path) -> None:
        assert self.data_dir is not None
        d = self.data_dir
        (d / "logs").mkdir()
        mark = time.monotonic()

        def phase(name: str) -> None:
            nonlocal mark
            now = time.monotonic()
            self.timings[name] = round(now - mark, 2)
            mark = now

        certs = pki.generate(d / "pki")
        phase("pki")
        self.ca_file = str(certs.ca_cert)
        self.pki = certs
        etcd_port, etcd_peer, api_port = _free_ports(3)
        self.ports = {"etcd": etcd_port, "etcd-peer": etcd_peer, "kube-apiserver": api_port}
        self.server = f"https://127.0.0.1:{api_port}"
        self.admin_token = secrets.token_hex(24)
        (d / "tokens.csv").write_text(f'{self.admin_token},admin,admin,"system:masters"\n')
        (d / "tokens.csv").chmod(0o600)
        self.kubeconfig_path = str(self.write_kubeconfig(d / "admin.kubeconfig", token=self.admin_token))
        admission_config = self._webhook_client_config(d)

        # etcd
        self._spawn(
            "etcd",
            [
                str(bdir / "etcd"),
                f"-data-dir={d / 'etcd'}",
                f"-client-port={etcd_port}",
                f"-peer-port={etcd_peer}",
            ],
        )
        self._wait("etcd", lambda: self._http_ok(f"http://127.0.0.1:{etcd_port}/health"))
        phase("etcd")

        # kube-apiserver
        self._argv["kube-apiserver"] = [
            str(bdir / "kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{etcd_port}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={api_port}",
            f"--cert-dir={d / 'apiserver-certs'}",
            f"--tls-cert-file={certs.serving_cert}",
            f"--tls-private-key-file={certs.serving_key}",
            f"--client-ca-file={certs.ca_cert}",
            f"--token-auth-file={d / 'tokens.csv'}",
            f"--admission-control-config-file={admission_config}",
            "--authorization-mode=RBAC",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={certs.sa_pub}",
            f"--service-account-signing-key-file={certs.sa_key}",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            "--endpoint-reconciler-type=none",
            "--allow-privileged=true",
            "--profiling=false",
            # on SIGTERM close open watches within 2 s; without it the server waits for its 60 s
            # request timeout while the controller manager's watches are open
            "--shutdown-watch-termination-grace-period=2s",
            *self._workload_flags(runtime_config=True),
        ]
        self._start_apiserver()
        phase("kube-apiserver")

        # CRDs before the controller manager: its garbage collector then watches the custom kinds from the
        # start (it only rediscovers resources every 30 s, so CRDs installed later are collected late)
        crds = [*self._crds, *(p for name in self._operators for p in ops.crd_paths(ops.operator(name)))]
        if crds:
            self.crd_names = install_crds(self, crds)
            phase("crds")

        # kube-controller-manager
        if self._with_kcm:
            self._spawn(
                "kube-controller-manager",
                [
                    str(bdir / "kube-controller-manager"),
                    f"--kubeconfig={self.kubeconfig_path}",
                    "--bind-address=127.0.0.1",
                    "--secure-port=0",  # no HTTPS endpoint needed (and no delegated authn/authz)
                    "--leader-elect=false",
                    f"--controllers={','.join(self._controllers)}",
                    f"--service-account-private-key-file={certs.sa_key}",
                    f"--root-ca-file={certs.ca_cert}",
                    f"--kube-api-qps={self._qps}",
                    f"--kube-api-burst={self._burst}",
                    "--profiling=false",
                    *self._workload_flags(),
                    *self._kcm_args,
                ],
            )
            if "serviceaccount" in self._controllers:
                # the serviceaccount controller creating `default` in `default` = controllers are running
                path = "/api/v1/namespaces/default/serviceaccounts/default"
                self._wait("kube-controller-manager", lambda: self.request("GET", path)[0] == 200)
            phase("kube-controller-manager")

        if self._with_scheduler or self._initial_nodes:
            self.start_scheduler()
            phase("kube-scheduler+kwok")
        if self._initial_nodes:
            self.add_nodes(self._initial_nodes, gpus=self._node_gpus)
            phase("nodes")
        for name in self._operators:
            self._start_operator(ops.operator(name))
            phase(name)

    def _webhook_client_config(self, d: Path) -> Path:
        """The API server presents a client certificate (of a CA of its own, :attr:`webhook_client_ca`) to
        every admission webhook: an AdmissionConfiguration whose kubeconfig gives it for any host ("*")."""
        ca, cert, key = pki.webhook_client(d / "pki")
        self.webhook_client_ca = str(ca)
        users = [{"name": "*", "user": {"client-certificate": str(cert), "client-key": str(key)}}]
        kubeconfig = d / "admission-webhooks.kubeconfig"
        kubeconfig.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "users": users}))
        plugin = {
            "apiVersion": "apiserver.config.k8s.io/v1",
            "kind": "WebhookAdmissionConfiguration",
            "kubeConfigFile": str(kubeconfig),
        }
        plugins = [
            {"name": name, "configuration": plugin}
            for name in ("MutatingAdmissionWebhook", "ValidatingAdmissionWebhook")
        ]
        config = d / "admission.yaml"
        config.write_text(
            yaml.safe_dump(
                {"apiVersion": "apiserver.config.k8s.io/v1", "kind": "AdmissionConfiguration", "plugins": plugins}
            )
        )
        return config

    def _workload_flags(self, *, runtime_config: bool = False) -> list[str]:
        if not self.workload_api:
            return []
        flags = [gang.feature_gates_flag()]
        return [*flags, gang.runtime_config_flag()] if runtime_config else flags

    def _start_operator(self, op: ops.Operator) -> None:
        """Run the operator's controller (its CRDs are installed already); return once its readiness probe
        answers and its webhook configurations are registered."""
        assert self.data_dir is not None
        d = self.data_dir / op.name
        cert_dir = d / "certs"
        cert_dir.mkdir(parents=True)
        cert, key = self.serving_cert(f"{op.name}-webhook")
        shutil.copy(cert, cert_dir / "tls.crt")
        shutil.copy(key, cert_dir / "tls.key")
        webhook_port, metrics_port, health_port = _free_ports(3)
        self.ports.update(
            {f"{op.name}-webhook": webhook_port, f"{op.name}-metrics": metrics_port, f"{op.name}-health": health_port}
        )
        argv = ops.command(
            op,
            self._bdir / op.name,
            kubeconfig=self.kubeconfig_path,
            work_dir=d,
            webhook_port=webhook_port,
            cert_dir=cert_dir,
            metrics_port=metrics_port,
            health_port=health_port,
        )
        for path, obj in ops.prerequisites(op):
            status, body = self.request("POST", path, obj)
            if status != 201:
                raise ClusterError(f"{op.name}: create {path} {obj['metadata']['name']}: {status} {body}")
        self._spawn(op.name, argv)
        # readyz answers 200 once the webhook server listens (JobSet's main adds that check)
        self._wait(op.name, lambda: _get_ok(f"http://127.0.0.1:{health_port}/readyz", None))
        configurations = ops.webhook_configurations(op, port=webhook_port, ca_file=self.ca_file)
        # LWS registers its webhook handlers after its manager starts: register the configurations only
        # once every path has a handler, so the API server never meets a 404 (failurePolicy Fail)
        urls = [hook["clientConfig"]["url"] for doc in configurations for hook in doc.get("webhooks") or []]
        self._wait(op.name, lambda: all(self._has_handler(url) for url in urls))
        for doc in configurations:
            kind = doc["kind"].lower() + "s"
            status, obj = self.request("POST", f"/apis/admissionregistration.k8s.io/v1/{kind}", doc)
            if status != 201:
                raise ClusterError(f"register {doc['kind']} {doc['metadata']['name']}: {status} {obj}")

    # ------------------------------------------------------------------ scheduler and simulated nodes

    def start_scheduler(self) -> None:
        """Start kube-scheduler (default profile; with the Workload API on it includes GangScheduling) and
        the kwok controller (manages the nodes :meth:`add_nodes` creates). Returns once both are ready."""
        if self.data_dir is None:
            raise ClusterError("cluster not started")
        if "kube-scheduler" in self._procs:
            raise ClusterError("kube-scheduler already started")
        d, bdir = self.data_dir, self._bdir
        sched_port, kwok_port = _free_ports(2)
        self.ports.update({"kube-scheduler": sched_port, "kwok": kwok_port})
        cfg = d / "kube-scheduler.yaml"
        cfg.write_text(yaml.safe_dump(gang.scheduler_config(self.kubeconfig_path, self._qps, self._burst)))
        self._spawn(
            "kube-scheduler",
            [
                str(bdir / "kube-scheduler"),
                f"--config={cfg}",
                "--bind-address=127.0.0.1",
                f"--secure-port={sched_port}",
                f"--authentication-kubeconfig={self.kubeconfig_path}",
                f"--authorization-kubeconfig={self.kubeconfig_path}",
                *self._workload_flags(),
            ],
        )
        self._spawn(
            "kwok",
            [
                str(bdir / "kwok"),
                f"--kubeconfig={self.kubeconfig_path}",
                f"--config={bdir / build.KWOK_STAGES}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-annotation-selector={gang.KWOK_NODE_ANNOTATION}={gang.KWOK_NODE_VALUE}",
                f"--server-address=127.0.0.1:{kwok_port}",
                "--node-ip=127.0.0.1",
                "--cidr=10.244.0.0/16",
            ],
        )
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE  # the scheduler's self-signed serving certificate
        self._wait("kube-scheduler", lambda: _get_ok(f"https://127.0.0.1:{sched_port}/readyz", insecure))
        self._wait("kwok", lambda: _get_ok(f"http://127.0.0.1:{kwok_port}/healthz", None))

    def add_nodes(
        self,
        n: int,
        *,
        gpus: int = 4,
        cpu: str = "32",
        memory: str = "256Gi",
        labels: dict[str, str] | None = None,
        prefix: str = "kwok-node",
    ) -> list[str]:
        """Create ``n`` simulated nodes with ``gpus`` GPUs each (``nvidia.com/gpu``) and extra ``labels``
        (e.g. a pool that a test's pods select, so tests sharing a cluster do not share nodes); returns
        their names once kwok has made every one Ready. Names continue the numbering of earlier calls."""
        if "kwok" not in self._procs:
            raise ClusterError("add_nodes needs start_scheduler() (the kwok controller) first")
        names = [f"{prefix}-{self._node_seq + i}" for i in range(n)]
        self._node_seq += n
        for name in names:
            node = gang.node_manifest(name, gpus=gpus, cpu=cpu, memory=memory, labels=labels)
            status, obj = self.request("POST", "/api/v1/nodes", node)
            if status != 201:
                raise ClusterError(f"create node {name}: {status} {obj}")
            self.nodes.append(name)
            # the TaintNodesByCondition admission plugin taints a new node not-ready; the node lifecycle
            # controller would lift it once Ready, but it is not run here (it would evict pods of
            # simulated nodes): lift it ourselves, kwok makes the node Ready right after
            status, obj = self.request(
                "PATCH",
                f"/api/v1/nodes/{name}",
                {"spec": {"taints": None}},
                content_type="application/merge-patch+json",
            )
            if status != 200:
                raise ClusterError(f"untaint node {name}: {status} {obj}")

        def ready() -> bool:
            return all(gang.node_ready(self.request("GET", f"/api/v1/nodes/{m}")[1]) for m in names)

        self._wait("kwok", ready)
        return names

    def serving_cert(self, name: str) -> tuple[Path, Path]:
        """A serving certificate for 127.0.0.1 signed by this cluster's CA (:attr:`ca_file`), e.g. for an
        admission webhook the API server calls; returns (certificate, key) paths in the data dir."""
        if self.pki is None or self.data_dir is None:
            raise ClusterError("cluster not started")
        return pki.issue_serving_cert(self.pki, self.data_dir / "pki" / "issued", name)

    def delete_node(self, name: str) -> None:
        """Delete a simulated node. Its pods stay bound to a node that no longer exists until the pod garbage
        collector (``pod_gc``) marks them Failed (condition ``DisruptionTarget``, reason ``DeletionByPodGC``)
        and force-deletes them, 40-80 s later; without it they stay."""
        status, obj = self.request("DELETE", f"/api/v1/nodes/{name}")
        if status not in (200, 404):
            raise ClusterError(f"delete node {name}: {status} {obj}")
        if name in self.nodes:
            self.nodes.remove(name)

    # ------------------------------------------------------------------ API server faults

    def stop_apiserver(self, *, graceful: bool = True, timeout: float = 15.0) -> None:
        """Stop kube-apiserver only; connections to :attr:`server` are refused until it starts again.

        ``graceful``: SIGTERM (open watches are closed, in-flight requests finish), SIGKILL after
        ``timeout`` seconds; ``graceful=False``: SIGKILL right away, like a crashed server.
        """
        proc = self._procs.pop("kube-apiserver", None)
        if proc is None:
            raise ClusterError("kube-apiserver is not running")
        _terminate(proc, timeout if graceful else 0.0)
        log = self._logs.pop("kube-apiserver", None)
        if log is not None:
            log.close()

    def start_apiserver(self, *, apiserver_args: Iterable[str] | None = None) -> None:
        """Start kube-apiserver again (after :meth:`stop_apiserver`) on the same port and etcd; return when
        ``/readyz`` answers 200. ``apiserver_args`` replaces the extra flags from the constructor for this
        and later starts."""
        if "kube-apiserver" not in self._argv:
            raise ClusterError("cluster not started")
        if self.apiserver_running:
            raise ClusterError("kube-apiserver is already running")
        self._procs.pop("kube-apiserver", None)  # one that exited on its own
        if apiserver_args is not None:
            self._apiserver_args = tuple(apiserver_args)
        self._start_apiserver()

    def restart_apiserver(
        self, *, graceful: bool = True, apiserver_args: Iterable[str] | None = None
    ) -> None:
        """:meth:`stop_apiserver` then :meth:`start_apiserver`; returns when it is ready again."""
        self.stop_apiserver(graceful=graceful)
        self.start_apiserver(apiserver_args=apiserver_args)

    def _start_apiserver(self) -> None:
        self._spawn("kube-apiserver", [*self._argv["kube-apiserver"], *self._apiserver_args])
        self._wait("kube-apiserver", lambda: self._http_ok(self.server + "/readyz"))

    def stop(self) -> None:
        """Stop controller manager, API server, etcd (SIGTERM, then SIGKILL) and remove the data dir."""
        atexit.unregister(self.stop)
        for name, p in self._procs.items():  # a component that died on its own: show why
            if p.poll() not in (None, 0):
                print(
                    f"[devcluster] {name} had exited with code {p.returncode}; last log lines:\n"
                    f"{self.log_tail(name)}",
                    file=sys.stderr,
                    flush=True,
                )
        for name, timeout in (
            *((op, 10) for op in self._operators),
            ("kwok", 5),
            ("kube-scheduler", 5),
            ("kube-controller-manager", 10),
            ("kube-apiserver", 15),
            ("etcd", 10),
        ):
            proc = self._procs.pop(name, None)
            if proc is not None:
                _terminate(proc, timeout)
        for f in self._logs.values():
            f.close()
        self._logs.clear()
        self._argv.clear()
        self.nodes.clear()
        if self._spawner is not None:
            self._spawner.close()
            self._spawner = None
        if self.data_dir is not None:
            if self._keep:
                print(f"[devcluster] kept {self.data_dir}", file=sys.stderr, flush=True)
            else:
                shutil.rmtree(self.data_dir, ignore_errors=True)
            self.data_dir = None

    # ------------------------------------------------------------------ processes

    def _spawn(self, name: str, argv: list[str]) -> None:
        assert self.data_dir is not None
        log = open(self.log_path(name), "ab")  # noqa: SIM115 - closed in stop() / stop_apiserver()
        self._logs[name] = log

        def popen() -> subprocess.Popen[bytes]:
            return subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.data_dir,
                start_new_session=True,  # Ctrl-C in a terminal reaches us, not the components
                preexec_fn=_die_with_parent if self._die_with_parent else None,
            )

        if not self._die_with_parent:
            self._procs[name] = popen()
            return
        if self._spawner is None:
            self._spawner = _Spawner()
        self._procs[name] = self._spawner.call(popen)

    def _wait(self, name: str, ready: Any) -> None:
        deadline = time.monotonic() + self._timeout
        proc = self._procs[name]
        while True:
            rc = proc.poll()
            if rc is not None:
                raise ClusterError(f"{name} exited with code {rc} during startup")
            try:
                if ready():
                    return
            except (OSError, ssl.SSLError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise ClusterError(f"{name} not ready after {self._timeout:.0f}s")
            time.sleep(0.1)

    def log_path(self, component: str) -> Path:
        if self.data_dir is None:
            raise ClusterError("cluster not started")
        return self.data_dir / "logs" / f"{component}.log"

    def log_tail(self, component: str, lines: int = 40) -> str:
        try:
            data = self.log_path(component).read_bytes()[-64_000:]
        except (OSError, ClusterError):
            return ""
        return "\n".join(data.decode(errors="replace").splitlines()[-lines:])

    # ------------------------------------------------------------------ HTTP

    def ssl_context(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = ssl.create_default_context(cafile=self.ca_file)
        return self._ssl

    def _has_handler(self, url: str) -> bool:
        """A webhook server (serving a certificate of the cluster's CA) has a handler at ``url``: an empty
        review gets any answer but 404."""
        req = urllib.request.Request(url, data=b"{}", method="POST", headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=2, context=self.ssl_context()):
                return True
        except urllib.error.HTTPError as e:
            return e.code != 404

    def _http_ok(self, url: str) -> bool:
        ctx = self.ssl_context() if url.startswith("https") else None
        req = urllib.request.Request(url, headers={"Authorization": f"Bearer {self.admin_token}"})
        try:
            with urllib.request.urlopen(req, timeout=2, context=ctx) as resp:
                return bool(resp.status == 200)
        except urllib.error.HTTPError:
            return False

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        token: str | None = None,
        content_type: str = "application/json",
        timeout: float = 30.0,
    ) -> tuple[int, Any]:
        """One API call; returns ``(status, decoded JSON body or text)``. Uses the admin token by default."""
        data = None
        headers = {"Authorization": f"Bearer {token or self.admin_token}", "Accept": "application/json"}
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            headers["Content-Type"] = content_type
        req = urllib.request.Request(self.server + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=self.ssl_context()) as resp:
                status, raw = resp.status, resp.read()
        except urllib.error.HTTPError as e:
            status, raw = e.code, e.read()
        try:
            return status, json.loads(raw) if raw else None
        except ValueError:
            return status, raw.decode(errors="replace")

    def create_service_account(self, namespace: str, name: str) -> dict[str, Any]:
        """Create a ServiceAccount (no error if it exists); returns the object."""
        body = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}
        status, obj = self.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts", body)
        if status == 409:
            status, obj = self.request("GET", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}")
        if status not in (200, 201):
            raise ClusterError(f"create serviceaccount {namespace}/{name}: {status} {obj}")
        return dict(obj)

    def create_token(
        self,
        namespace: str,
        service_account: str,
        *,
        expiration_seconds: int = 3600,
        audiences: list[str] | None = None,
    ) -> str:
        """A bound ServiceAccount token from the TokenRequest API."""
        spec: dict[str, Any] = {"expirationSeconds": expiration_seconds}
        if audiences:
            spec["audiences"] = audiences
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
        sa = urllib.parse.quote(service_account)
        status, obj = self.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{sa}/token", body)
        if status not in (200, 201):
            raise ClusterError(f"TokenRequest for {namespace}/{service_account}: {status} {obj}")
        return str(obj["status"]["token"])

    def write_kubeconfig(
        self, path: str | os.PathLike[str], *, token: str, user: str = "admin", namespace: str | None = None
    ) -> Path:
        """Write a kubeconfig for this cluster with the given bearer token (e.g. from :meth:`create_token`)."""
        ca = base64.b64encode(Path(self.ca_file).read_bytes()).decode()
        context: dict[str, Any] = {"cluster": "devcluster", "user": user}
        if namespace:
            context["namespace"] = namespace
        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "devcluster", "cluster": {"server": self.server, "certificate-authority-data": ca}}
            ],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": "devcluster", "context": context}],
            "current-context": "devcluster",
        }
        p = Path(path)
        p.write_text(yaml.safe_dump(cfg, sort_keys=False))
        p.chmod(0o600)
        return p
