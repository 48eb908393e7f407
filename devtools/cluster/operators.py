"""Real workload operators next to the local control plane: ``LocalCluster(operators=["jobset", "kuberay", "lws",
"kubeflow"])`` (and ``"trainer"``, which needs ``"jobset"`` beside it).

An operator is its stock controller binary, built from its pinned Go module by
:mod:`devtools.cluster.build` (``--only jobset kuberay lws kubeflow trainer``), run against the local API server as it runs in a
real cluster except for where it listens: its CRDs and admission webhook configurations are read from the
module's own ``config/`` at run time (the module cache, located with ``go list -m``), never from a copy;
its webhooks (where it needs them) are served on 127.0.0.1 with a certificate from the cluster's CA and
registered with a ``url`` client config instead of a Service; leader election is off; metrics and health
probes listen on free ports; it runs with the admin kubeconfig.

- ``jobset`` (``sigs.k8s.io/jobset``): configured by its ``--config`` file; webhooks served (it cannot run
  without them: defaulting, the pod priority label, immutable ``replicatedJobs``).
- ``kuberay`` (``github.com/ray-project/kuberay/ray-operator``): configured by flags; its only webhook (a
  RayCluster validator: name pattern, unique worker group names) is opt-in upstream (``ENABLE_WEBHOOKS``,
  off in its Helm chart) and not run: it never mutates an object and the controller checks the same spec.
- ``lws`` (``sigs.k8s.io/lws``, main package ``cmd``): configured by its ``--config`` file; webhooks served
  (LeaderWorkerSet defaulting and validation, and the pod webhook that gives every pod of a group its
  labels and annotations: group and worker index, group key, size, leader name).
- ``kubeflow`` (the Kubeflow training-operator, ``github.com/kubeflow/training-operator``, main package
  ``cmd/training-operator.v1``): configured by flags, only its PyTorchJob and MPIJob (``kubeflow.org/v1``)
  controllers enabled (``--enable-scheme``) and only their two CRDs installed. Its webhooks are validating
  only (PyTorchJob: replica types, the ``pytorch`` container, elastic policy; MPIJob has none: its setup is a
  no-op) and its controllers default the jobs themselves, so it could run without them; they are served and
  registered all the same (the API server then rejects what a real cluster rejects). It cannot start
  without its certificate rotator (open-policy-agent/cert-controller, always on, no flag): that needs the
  Secret ``training-operator-webhook-cert`` in the namespace ``MY_POD_NAMESPACE`` names (``kubeflow``,
  created empty; the rotator fills it with a CA and certificate of its own that nothing here uses) and a
  ``tls.crt`` under the fixed path ``/tmp/k8s-webhook-server/serving-certs`` (in a pod: the mounted
  Secret; it only checks the file exists, so one is written there when missing). The webhook server reads
  its certificate from ``$TMPDIR/k8s-webhook-server/serving-certs``: ``TMPDIR`` is the operator's own work
  directory, holding our certificate from the cluster CA. Its webhook configuration keeps its kustomize
  name under our ``kubeflow-`` prefix, so the rotator (which would inject its own CA into
  ``validator.training-operator.kubeflow.org``) finds nothing to rewrite and logs that once. The webhook
  server listens on all interfaces (its port is a flag, its host is not).
- ``trainer`` (Kubeflow Trainer v2, ``github.com/kubeflow/trainer/v2``, main package
  ``cmd/trainer-controller-manager``): TrainJob → JobSet, so it runs beside ``jobset`` (v2.1.0 is built
  against JobSet v0.10.1's API; the pinned v0.11.0 controller serves the same ``jobset.x-k8s.io/v1alpha2``
  JobSet). CRDs (TrainJob, TrainingRuntime, ClusterTrainingRuntime) from ``manifests/base/crds``.
  Configured by its ``--config`` file (``config.trainer.kubeflow.org/v1alpha1``, strict: no field it does
  not know) with ``certManagement.enable: false`` — otherwise its cert-controller writes a Secret and
  rewrites the ValidatingWebhookConfiguration for a Service — so it waits for no certificate and serves
  ours. Its Configuration has no certificate directory: controller-runtime's default,
  ``$TMPDIR/k8s-webhook-server/serving-certs``, is pointed at ours (the process gets its own ``TMPDIR``).
  Its webhooks only validate (TrainJob, TrainingRuntime, ClusterTrainingRuntime; no mutating webhook): it
  could run without them, but they are served so that an object a real cluster refuses is refused here.

So the Jobs and pods the tests and the demo group are the ones the real controller creates: if it names,
labels or owns them differently from the hand-written fixtures, the fixture test says so.
"""

from __future__ import annotations

import base64
import copy
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from . import build
from .errors import ClusterError


@dataclass(frozen=True)
class Operator:
    name: str  # the binary (a build target) and the component name in logs
    module: str  # Go module path, pinned in devtools/cluster/go/<name>/go.mod
    crds: str  # CRD directory inside the module
    webhooks: str | None  # kustomize directory of the webhook configurations inside the module; None: not served
    config_api: str | None  # apiVersion of its --config Configuration; None: configured by flags
    crd_files: tuple[str, ...] = ()  # only these files of ``crds``; empty: every CRD there
    schemes: tuple[str, ...] = ()  # the kinds whose controllers and webhooks run; empty: all it has
    # CRDs it can use from modules it depends on: (module path, file inside it), located through its go.mod
    dependency_crds: tuple[tuple[str, str], ...] = ()


OPERATORS: dict[str, Operator] = {
    "jobset": Operator(
        name="jobset",
        module="sigs.k8s.io/jobset",
        crds="config/components/crd/bases",
        webhooks="config/components/webhook",
        config_api="config.jobset.x-k8s.io/v1alpha1",
    ),
    "kuberay": Operator(
        name="kuberay",
        module="github.com/ray-project/kuberay/ray-operator",
        crds="config/crd/bases",  # RayCluster, RayJob, RayService
        webhooks=None,
        config_api=None,
    ),
    "lws": Operator(
        name="lws",
        module="sigs.k8s.io/lws",
        crds="config/crd/bases",
        webhooks="config/webhook",
        config_api="config.lws.x-k8s.io/v1alpha1",
    ),
    "kubeflow": Operator(
        name="kubeflow",
        module="github.com/kubeflow/training-operator",
        crds="manifests/base/crds",
        webhooks="manifests/base/webhook",
        config_api=None,
        crd_files=("kubeflow.org_pytorchjobs.yaml", "kubeflow.org_mpijobs.yaml"),
        schemes=("PyTorchJob", "MPIJob"),
    ),
    "trainer": Operator(
        name="trainer",
        module="github.com/kubeflow/trainer/v2",
        crds="manifests/base/crds",
        webhooks="manifests/base/webhook",
        config_api="config.trainer.kubeflow.org/v1alpha1",
        # the scheduler-plugins PodGroup its coscheduling podGroupPolicy writes: Trainer looks for the CRD
        # once, at start-up ("PodGroup CRDs must be installed in advance")
        dependency_crds=(("sigs.k8s.io/scheduler-plugins", "config/crd/bases/scheduling.x-k8s.io_podgroups.yaml"),),
    ),
}
# the training-operator's certificate rotator: the namespace and Secret it reads (created before it starts)
# and the directory it waits for a tls.crt in (hard-coded in its pkg/cert; a mounted Secret in a pod)
KUBEFLOW_NAMESPACE = "kubeflow"
KUBEFLOW_CERT_SECRET = "training-operator-webhook-cert"
KUBEFLOW_ROTATOR_CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")


def operator(name: str) -> Operator:
    try:
        return OPERATORS[name]
    except KeyError:
        raise ClusterError(f"unknown operator {name!r}: known are {', '.join(OPERATORS)}") from None


def module_source(op: Operator, module: str | None = None) -> Path:
    """The operator's module (or ``module``, one it depends on) in the Go module cache, at the version its
    go.mod pins (downloaded by the build; ``go list -m`` only reads the cache and go.mod)."""
    module = module or op.module
    go = shutil.which("go")
    if not go:
        raise ClusterError(f"the `go` toolchain is not on PATH (needed to locate the {op.module} module)")
    module_dir = build.repo_root() / build.GO_MODULES / op.name
    env = {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=readonly", "GOPROXY": "off"}
    proc = subprocess.run(
        [go, "list", "-m", "-f", "{{.Dir}}", module],
        cwd=module_dir, env=env, capture_output=True, text=True,
    )
    src = proc.stdout.strip()
    if proc.returncode != 0 or not src or not Path(src).is_dir():
        raise ClusterError(
            f"cannot locate the {module} module source from {module_dir}/go.mod "
            f"(build it first: python devtools/cluster/build.py --only {op.name}): {proc.stderr.strip()}"
        )
    return Path(src)


def crd_paths(op: Operator) -> list[Path]:
    crds = module_source(op) / op.crds
    own = [crds / f for f in op.crd_files] if op.crd_files else [crds]
    return [*own, *(module_source(op, mod) / path for mod, path in op.dependency_crds)]


def prerequisites(op: Operator) -> list[tuple[str, dict[str, Any]]]:
    """Objects (API path, body) the operator needs before it starts: the training-operator's certificate
    rotator exits unless its Secret exists (empty: the rotator fills it)."""
    if op.name != "kubeflow":
        return []
    ns = KUBEFLOW_NAMESPACE
    return [
        ("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        (f"/api/v1/namespaces/{ns}/secrets",
         {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": KUBEFLOW_CERT_SECRET, "namespace": ns}}),
    ]


def command(
    op: Operator,
    binary: Path,
    *,
    kubeconfig: str,
    work_dir: Path,
    webhook_port: int,
    cert_dir: Path,
    metrics_port: int,
    health_port: int,
) -> list[str]:
    """The operator's command line: leader election off, metrics and probes on 127.0.0.1 at the given
    ports, the webhook server (if it has one) on ``webhook_port`` with the certificate in ``cert_dir``."""
    if op.name == "kuberay":
        return [
            str(binary),
            f"--kubeconfig={kubeconfig}",
            "--enable-leader-election=false",
            f"--metrics-addr=127.0.0.1:{metrics_port}",
            f"--health-probe-bind-address=127.0.0.1:{health_port}",
            "--log-stdout-encoder=console",  # readable logs (its default is JSON)
        ]
    if op.name == "kubeflow":
        return _kubeflow_command(
            op, binary, kubeconfig=kubeconfig, work_dir=work_dir, webhook_port=webhook_port, cert_dir=cert_dir,
            metrics_port=metrics_port, health_port=health_port,
        )
    assert op.config_api, op
    if op.name == "trainer":
        return _trainer_command(
            op, binary, kubeconfig=kubeconfig, work_dir=work_dir, webhook_port=webhook_port, cert_dir=cert_dir,
            metrics_port=metrics_port, health_port=health_port,
        )
    config = config_file(
        work_dir / "config.yaml",
        api_version=op.config_api,
        webhook_port=webhook_port,
        cert_dir=cert_dir,
        metrics_port=metrics_port,
        health_port=health_port,
    )
    return [str(binary), f"--config={config}", f"--kubeconfig={kubeconfig}"]


def _kubeflow_command(
    op: Operator, binary: Path, *, kubeconfig: str, work_dir: Path, webhook_port: int, cert_dir: Path,
    metrics_port: int, health_port: int,
) -> list[str]:
    """The training-operator: flags, plus (through ``env``) ``TMPDIR`` (where its webhook server reads its
    certificate) and ``MY_POD_NAMESPACE`` (where its rotator reads its Secret)."""
    tmp = _serving_tmpdir(work_dir, cert_dir)
    # the rotator only checks that this file exists (shared by every instance on the machine: never replaced)
    KUBEFLOW_ROTATOR_CERT_DIR.mkdir(parents=True, exist_ok=True)
    if not (KUBEFLOW_ROTATOR_CERT_DIR / "tls.crt").exists():
        shutil.copy(cert_dir / "tls.crt", KUBEFLOW_ROTATOR_CERT_DIR / "tls.crt")
    env = shutil.which("env") or "/usr/bin/env"
    return [
        env, f"TMPDIR={tmp}", f"MY_POD_NAMESPACE={KUBEFLOW_NAMESPACE}",
        str(binary),
        f"--kubeconfig={kubeconfig}",
        "--leader-elect=false",
        f"--metrics-bind-address=127.0.0.1:{metrics_port}",
        f"--health-probe-bind-address=127.0.0.1:{health_port}",
        f"--webhook-server-port={webhook_port}",
        *(f"--enable-scheme={kind.lower()}" for kind in op.schemes),
    ]


def config_file(
    path: Path, *, api_version: str, webhook_port: int, cert_dir: Path, metrics_port: int, health_port: int
) -> Path:
    """The ``--config`` of JobSet (``config.jobset.x-k8s.io/v1alpha1``) and LWS (``config.lws.x-k8s.io/
    v1alpha1``), one Configuration shape: no leader election, no internal certificate rotation (it would
    write a Secret and patch webhook configurations that point at a Service), the webhook server on
    127.0.0.1 with our certificate, metrics and probes on free ports (JobSet serves its metrics with our
    certificate too; LWS's Configuration has no such field and serves them with a self-signed one)."""
    metrics: dict[str, str] = {"bindAddress": f"127.0.0.1:{metrics_port}"}
    if api_version.startswith("config.jobset."):
        metrics["certDir"] = str(cert_dir)
    cfg = {
        "apiVersion": api_version,
        "kind": "Configuration",
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(cert_dir)},
        "metrics": metrics,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
    }
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def _trainer_command(
    op: Operator,
    binary: Path,
    *,
    kubeconfig: str,
    work_dir: Path,
    webhook_port: int,
    cert_dir: Path,
    metrics_port: int,
    health_port: int,
) -> list[str]:
    """Kubeflow Trainer's command line: its own Configuration shape (``certManagement``, no
    ``internalCertManagement``, no webhook ``certDir``), and a ``TMPDIR`` whose
    ``k8s-webhook-server/serving-certs`` (controller-runtime's default certificate directory, the only one
    Trainer's webhook server reads) is ``cert_dir``."""
    cfg = {
        "apiVersion": op.config_api,
        "kind": "Configuration",
        "leaderElection": {"leaderElect": False},
        "certManagement": {"enable": False},
        "webhook": {"port": webhook_port, "host": "127.0.0.1"},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}"},  # HTTPS with a self-signed certificate
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
    }
    config = work_dir / "config.yaml"
    config.write_text(yaml.safe_dump(cfg, sort_keys=False))
    tmp = _serving_tmpdir(work_dir, cert_dir)
    env = shutil.which("env") or "/usr/bin/env"
    return [env, f"TMPDIR={tmp}", str(binary), f"--config={config}", f"--kubeconfig={kubeconfig}"]


def _serving_tmpdir(work_dir: Path, cert_dir: Path) -> Path:
    """A ``TMPDIR`` for an operator whose webhook server reads only controller-runtime's default certificate
    directory, ``$TMPDIR/k8s-webhook-server/serving-certs``: that directory is ``cert_dir``."""
    tmp = work_dir / "tmp"
    (tmp / "k8s-webhook-server").mkdir(parents=True, exist_ok=True)
    serving = tmp / "k8s-webhook-server" / "serving-certs"
    if not serving.exists():
        serving.symlink_to(cert_dir.resolve(), target_is_directory=True)
    return tmp


def _json_pointer_set(doc: Any, pointer: str, value: Any, op: str) -> None:
    parts = [p.replace("~1", "/").replace("~0", "~") for p in pointer.lstrip("/").split("/")]
    target = doc
    for part in parts[:-1]:
        target = target[int(part)] if isinstance(target, list) else target[part]
    last = parts[-1]
    if isinstance(target, list):
        if op == "add":
            target.insert(len(target) if last == "-" else int(last), value)
        else:
            target[int(last)] = value
    else:
        target[last] = value


def webhook_configurations(op: Operator, *, port: int, ca_file: str) -> list[dict[str, Any]]:
    """The module's Mutating/ValidatingWebhookConfigurations as its kustomization renders them (its JSON
    patches applied: e.g. the pod webhooks only see pods labelled ``jobset.sigs.k8s.io/jobset-name``), with
    each Service client config replaced by ``https://127.0.0.1:<port><path>`` and the cluster's CA."""
    if op.webhooks is None:
        return []
    src = module_source(op) / op.webhooks
    kustomization = yaml.safe_load((src / "kustomization.yaml").read_text())
    docs = [
        d
        for res in kustomization.get("resources") or []
        for d in yaml.safe_load_all((src / res).read_text())
        if isinstance(d, dict) and d.get("kind", "").endswith("WebhookConfiguration")
    ]
    for patch in kustomization.get("patches") or []:
        target = patch.get("target") or {}
        ops = yaml.safe_load((src / patch["path"]).read_text())
        for doc in docs:
            # a target without a name patches every object of its kind (kustomize)
            if doc["kind"] != target.get("kind") or target.get("name") not in (None, doc["metadata"]["name"]):
                continue
            for o in ops:
                if o.get("op") not in ("replace", "add"):
                    raise ClusterError(f"{src / patch['path']}: unsupported JSON patch op {o.get('op')!r}")
                _json_pointer_set(doc, o["path"], copy.deepcopy(o["value"]), o["op"])
    if op.schemes:  # only the webhooks of the kinds that run (the others have no handler)
        resources = {f"{kind.lower()}s" for kind in op.schemes}
        for doc in docs:
            doc["webhooks"] = [
                hook for hook in doc.get("webhooks") or []
                if any(resources & set(rule.get("resources") or []) for rule in hook.get("rules") or [])
            ]
        docs = [doc for doc in docs if doc["webhooks"]]
    ca = base64.b64encode(Path(ca_file).read_bytes()).decode()
    out = []
    for doc in docs:
        doc = copy.deepcopy(doc)
        doc["metadata"] = {"name": f"{op.name}-{doc['metadata']['name']}"}
        for hook in doc.get("webhooks") or []:
            svc = hook["clientConfig"].get("service") or {}
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{svc.get('path', '/')}", "caBundle": ca}
        out.append(doc)
    if not out:
        raise ClusterError(f"no webhook configurations found in {src}")
    return out
