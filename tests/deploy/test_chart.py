"""The Helm chart (deploy/chart) without a cluster: lint, the values schema, the flags it renders, and the
plain manifests (deploy/rbac.yaml, deploy/manifests/) kept equal to its default render.

``helm`` is built from its Go module (``make helm``; the first test builds it when missing).
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from devtools import chart
from grouper.runtime.settings import ALIASES, FLAGS, RunSettings, add_flags

REPO = Path(__file__).resolve().parents[2]


def camel(flag: str) -> str:
    head, *rest = flag.split("-")
    return head + "".join(p.capitalize() for p in rest)


def objects(rendered: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(rendered) if d]


def one(objs: list[dict[str, Any]], kind: str, name: str = "kai-pod-grouper") -> dict[str, Any]:
    found = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind} {name}: {len(found)} rendered"
    return found[0]


def container_args(objs: list[dict[str, Any]]) -> list[str]:
    return list(one(objs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"])


def parse_run_args(args: list[str]) -> RunSettings:
    """The rendered arguments through `grouper run`'s own parser (no environment)."""
    parser = argparse.ArgumentParser(exit_on_error=False)
    add_flags(parser, environ={})
    return RunSettings.from_args(parser.parse_args(args))


def template_fails(values: dict[str, Any]) -> str:
    with pytest.raises(RuntimeError) as e:
        chart.template(values)
    return str(e.value)


def test_helm_lint_passes_with_default_and_full_values() -> None:
    full = {
        "extraOwnerKinds": [{"group": "example.com", "kind": "Batchling", "resource": "batchlings"}],
        "metricsReaders": [{"name": "prometheus", "namespace": "monitoring"}],
        "kartas": [{"name": "k", "spec": {"structureDefinition": {"rootComponent": {"name": "r"}}}}],
        "args": {"backend": "upstream"},
        "webhook": {"enabled": True, "clientCA": "PEM"},
    }
    for values in ({}, full):
        proc = subprocess.run(
            [chart.helm(), "lint", "--strict", str(chart.CHART), "--values", "-"],
            input=json.dumps(values), capture_output=True, text=True,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "0 chart(s) failed" in proc.stdout


def test_rendered_manifests_are_current() -> None:
    """deploy/rbac.yaml and deploy/manifests/ are the default render (`make manifests` rewrites them)."""
    for path, text in chart.rendered_files().items():
        assert path.read_text() == text, f"{path.relative_to(REPO)} is stale: run `make manifests`"


def test_chart_crds_are_deploy_crds() -> None:
    """Helm installs the CRDs from the chart's crds/; deploy/crds (used by the tests and kustomize) is the same."""
    ours = {p.name: p.read_bytes() for p in (chart.CHART / "crds").glob("*.yaml")}
    theirs = {p.name: p.read_bytes() for p in (REPO / "deploy" / "crds").glob("*.yaml")}
    assert ours == theirs


def test_values_cover_every_grouper_run_flag() -> None:
    """KAI's `podgrouper.args` convention: one camelCase value per flag in values.yaml; the schema also accepts
    KAI's own names for the flags that have an alias (gangScheduleKnative, gangScheduleDeployment)."""
    schema = json.loads((chart.CHART / "values.schema.json").read_text())
    values = yaml.safe_load((chart.CHART / "values.yaml").read_text())
    expected = {camel(f) for f in FLAGS}
    aliases = {camel(a) for names in ALIASES.values() for a in names}
    assert set(schema["properties"]["args"]["properties"]) == expected | aliases
    assert set(values["args"]) == expected


def test_default_render_runs_as_documented() -> None:
    objs = objects(chart.template())
    args = container_args(objs)
    settings = parse_run_args([a.replace("$(POD_NAME)", "kai-pod-grouper-abc") for a in args])
    assert settings.leader_elect is True  # two replicas
    assert (settings.leader_election_namespace, settings.leader_election_id) == ("kai-system", "kai-pod-grouper")
    assert settings.default_priorities_configmap_name == "kai-pod-grouper-defaults"
    assert settings.default_priorities_configmap_namespace == "kai-system"
    assert settings.identity == "kai-pod-grouper-abc"
    # the pod address explicitly: outside the chart `grouper run` binds only loopback
    assert settings.http_bind_address == "0.0.0.0:8080" != RunSettings().http_bind_address == "127.0.0.1:8080"
    assert settings.http_auth == "kubernetes"  # the default, not overridden
    # the Roles name exactly the Lease and ConfigMap the flags name
    lease = one(objs, "Role", "kai-pod-grouper-leader-election")
    assert lease["metadata"]["namespace"] == "kai-system"
    assert lease["rules"][0]["resourceNames"] == ["kai-pod-grouper"]
    defaults = one(objs, "Role", "kai-pod-grouper-defaults")
    assert defaults["rules"][0]["resourceNames"] == ["kai-pod-grouper-defaults"]

    dep = one(objs, "Deployment")
    spec = dep["spec"]["template"]["spec"]
    assert dep["spec"]["replicas"] == 2
    c = spec["containers"][0]
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["resources"]["requests"] and c["resources"]["limits"]["memory"]
    assert spec["topologySpreadConstraints"][0]["topologyKey"] == "kubernetes.io/hostname"
    assert one(objs, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1
    assert one(objs, "Service")["spec"]["ports"][0]["port"] == 8080
    assert not [o for o in objs if o["kind"] in ("ServiceMonitor", "Karta")]
    # /metrics needs a token: no prometheus.io/scrape annotations sending annotation-following scrapers to a 401
    assert not any(k.startswith("prometheus.io/") for k in dep["spec"]["template"]["metadata"].get("annotations") or {})
    with_annotations = one(objects(chart.template({"podAnnotations": {"prometheus.io/scrape": "true"}})), "Deployment")
    assert with_annotations["spec"]["template"]["metadata"]["annotations"] == {"prometheus.io/scrape": "true"}


def test_notes_port_forward_does_not_block_the_curl() -> None:
    """Reproduction: NOTES said `kubectl port-forward ... && curl ...`; port-forward never exits, so the curl
    never ran. Now port-forward goes to the background on its own line, the curl follows on the next."""
    notes = (REPO / "deploy" / "chart" / "templates" / "NOTES.txt").read_text()
    forward = next(line for line in notes.splitlines() if "kubectl" in line and "port-forward" in line)
    assert "&&" not in forward and "curl" not in forward and forward.rstrip().endswith("&")
    curl = notes.splitlines()[notes.splitlines().index(forward) + 1]
    assert curl.lstrip().startswith("curl -H \"Authorization: Bearer ") and "/podgroups" in curl


def test_every_arg_value_reaches_its_flag() -> None:
    """Each args.<camelCase> value is rendered as --kebab-case=value and parsed by `grouper run` back to it."""
    values = {
        "schedulerName": "other-scheduler", "queueLabelKey": "q", "nodepoolLabelKey": "", "qps": 12.5,
        "burst": 40, "maxConcurrentReconciles": 3, "leaderElect": True, "leaderElectionNamespace": "elsewhere",
        "leaderElectionId": "my-lease", "genericKartaFallback": False, "knativeGangSchedule": False,
        "searchLegacyPg": False, "deploymentGangSchedule": False, "defaultPrioritiesConfigmapName": "cm", "defaultPrioritiesConfigmapNamespace": "cmns",
        "podLabelSelector": "a=b,c=d", "namespaceLabelSelector": "team=x", "definitions": "/defs",
        "kubeconfig": "/kc", "context": "ctx", "server": "https://api:6443", "tokenFile": "/t",
        "certificateAuthority": "/ca", "httpBindAddress": "127.0.0.1:9000", "httpAuth": "none",
        "httpAuthAudiences": "kai-pod-grouper", "httpAuthTokenFile": "/tok", "logLevel": "debug",
        "logFormat": "text", "shutdownDrainSeconds": 2.5, "batchWindowSeconds": 0.05, "watchList": False, "eventLoop": "asyncio", "identity": "me", "extraOwnerKinds": "Foo.example.com",
        "backend": "upstream", "webhookBindAddress": "0.0.0.0:9443", "webhookCertFile": "/certs/tls.crt",
        "webhookKeyFile": "/certs/tls.key", "webhookClientCa": "/certs/client-ca.crt",
        "webhookAllowUnauthenticated": True, "webhookShutdownDelaySeconds": 7.5, "workloadInfoMetrics": True,
    }
    assert set(values) == {camel(f) for f in FLAGS}
    objs = objects(chart.template({"args": values, "replicas": 1}))
    args = container_args(objs)
    settings = parse_run_args(args)
    for key, value in values.items():
        attr = "".join("_" + ch.lower() if ch.isupper() else ch for ch in key)
        assert getattr(settings, attr) == value, f"args.{key}: rendered {args}"
    assert len(args) == len(values)
    assert one(objs, "Role", "kai-pod-grouper-leader-election")["metadata"]["namespace"] == "elsewhere"
    assert one(objs, "Role", "kai-pod-grouper-leader-election")["rules"][0]["resourceNames"] == ["my-lease"]
    assert one(objs, "Role", "kai-pod-grouper-defaults")["metadata"]["namespace"] == "cmns"


def test_kai_arg_names_are_accepted() -> None:
    """KAI's Helm `podgrouper.args.gangScheduleKnative` / `gangScheduleDeployment` reach the same settings."""
    args = container_args(objects(chart.template({"args": {"gangScheduleKnative": False,
                                                           "gangScheduleDeployment": False}})))
    assert "--gang-schedule-knative=false" in args
    settings = parse_run_args(args)
    assert settings.knative_gang_schedule is False
    assert settings.deployment_gang_schedule is False


def test_one_replica_has_no_pdb_and_no_election_unless_asked() -> None:
    objs = objects(chart.template({"replicas": 1}))
    assert parse_run_args(container_args(objs)).leader_elect is False
    assert not [o for o in objs if o["kind"] == "PodDisruptionBudget"]
    assert parse_run_args(container_args(objects(chart.template({"replicas": 1, "args": {"leaderElect": True}})))
                          ).leader_elect is True


def test_no_defaults_configmap_means_no_role() -> None:
    objs = objects(chart.template({"args": {"defaultPrioritiesConfigmapName": ""}}))
    assert not [o for o in objs if "defaults" in o["metadata"]["name"]]
    settings = parse_run_args(container_args(objs))
    assert settings.default_priorities_configmap_name == ""
    assert settings.default_priorities_configmap_namespace == ""


def test_extra_owner_kinds_grant_rbac_and_pass_the_flag() -> None:
    objs = objects(chart.template({
        "extraOwnerKinds": [
            {"group": "example.com", "kind": "Batchling", "resource": "batchlings"},
            {"group": "", "kind": "ConfigMap", "resource": "configmaps"},
        ],
        "args": {"extraOwnerKinds": "Gadget.example.org"},
    }))
    rules = one(objs, "ClusterRole")["rules"]
    assert {"apiGroups": ["example.com"], "resources": ["batchlings"], "verbs": ["get", "list", "watch"]} in rules
    assert {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]} in rules
    settings = parse_run_args(container_args(objs))
    assert settings.extra_owner_kinds == "Gadget.example.org,Batchling.example.com,ConfigMap"


def test_kartas_and_metrics_readers() -> None:
    karta = yaml.safe_load((REPO / "examples" / "batchling-karta.yaml").read_text())
    objs = objects(chart.template({
        "kartas": [{"name": karta["metadata"]["name"], "labels": karta["metadata"]["labels"], "spec": karta["spec"]}],
        "metricsReaders": [{"name": "prometheus", "namespace": "monitoring"}],
    }))
    rendered = one(objs, "Karta", karta["metadata"]["name"])
    assert rendered["spec"] == karta["spec"]
    assert karta["metadata"]["labels"].items() <= rendered["metadata"]["labels"].items()
    binding = one(objs, "ClusterRoleBinding", "kai-pod-grouper-metrics-reader-monitoring-prometheus")
    assert binding["roleRef"]["name"] == "kai-pod-grouper-metrics-reader"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "prometheus", "namespace": "monitoring"}]


def test_service_monitor_needs_the_operator_crd() -> None:
    assert "no monitoring.coreos.com/v1 ServiceMonitor" in template_fails({"serviceMonitor": {"enabled": True}})
    objs = objects(chart.template(
        {"serviceMonitor": {"enabled": True}}, extra=("--api-versions", "monitoring.coreos.com/v1/ServiceMonitor")
    ))
    sm = one(objs, "ServiceMonitor")
    assert sm["spec"]["endpoints"][0]["path"] == "/metrics"
    assert sm["spec"]["endpoints"][0]["bearerTokenFile"].endswith("serviceaccount/token")


def _upstream_rules(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ClusterRole's scheduling.k8s.io rules beyond the PriorityClass informer's list / watch."""
    return [r for r in one(objs, "ClusterRole")["rules"]
            if "scheduling.k8s.io" in r["apiGroups"] and r["verbs"] != ["list", "watch"]]


def test_the_upstream_backend_gets_its_rbac_only_when_chosen() -> None:
    assert _upstream_rules(objects(chart.template())) == []
    assert not [o for o in objects(chart.template()) if o["kind"] == "MutatingWebhookConfiguration"]
    rules = _upstream_rules(objects(chart.template({"args": {"backend": "upstream"}})))
    assert rules == [
        # list / delete: a WorkloadGroup's objects, found by owner and replaced when its members change
        {"apiGroups": ["scheduling.k8s.io"], "resources": ["workloads", "compositepodgroups"],
         "verbs": ["get", "list", "create", "update", "delete"]},
        {"apiGroups": ["scheduling.k8s.io"], "resources": ["podgroups"],  # watched: the gang state
         "verbs": ["get", "list", "watch", "create", "update", "delete"]},
        {"apiGroups": ["scheduling.k8s.io"], "resources": ["priorityclasses"], "verbs": ["get"]},
    ]
    pods = [r for r in one(objects(chart.template({"args": {"backend": "upstream"}})), "ClusterRole")["rules"]
            if r["resources"] == ["pods"]]
    assert {"apiGroups": [""], "resources": ["pods"], "verbs": ["delete"]} in pods  # a member that left its group
    assert not [r for r in one(objects(chart.template()), "ClusterRole")["rules"]
                if r["resources"] == ["pods"] and "delete" in r["verbs"]], "KAI backend: pods are never deleted"


def test_the_webhook_renders_its_objects_and_flags() -> None:
    objs = objects(chart.template({"webhook": {"enabled": True, "clientCA": "PEM"}}))
    settings = parse_run_args(container_args(objs))
    assert settings.webhook_bind_address == "0.0.0.0:9443"
    assert settings.webhook_cert_file == "/etc/kai-pod-grouper/webhook-tls/tls.crt"
    assert settings.webhook_client_ca == "/etc/kai-pod-grouper/webhook-client-ca/ca.crt"
    assert settings.webhook_allow_unauthenticated is False
    tls = one(objs, "Secret", "kai-pod-grouper-webhook-tls")
    (hook,) = one(objs, "MutatingWebhookConfiguration")["webhooks"]
    assert hook["failurePolicy"] == "Ignore" and hook["clientConfig"]["caBundle"] == tls["data"]["ca.crt"]
    assert hook["timeoutSeconds"] == 5  # above the 3 s owner wait
    assert hook["namespaceSelector"]["matchExpressions"][0]["values"] == ["kube-system", "kai-system"]
    mounts = one(objs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    assert {m["mountPath"] for m in mounts} >= {"/etc/kai-pod-grouper/webhook-tls", "/etc/kai-pod-grouper/webhook-client-ca"}


def test_webhook_certificate_modes() -> None:
    cm = objects(chart.template({"webhook": {"enabled": True, "allowUnauthenticated": True, "tls": {
        "mode": "certManager", "certManager": {"issuerRef": {"name": "ca-issuer", "kind": "ClusterIssuer"}}}}}))
    cert = one(cm, "Certificate", "kai-pod-grouper-webhook")
    assert cert["spec"]["secretName"] == "kai-pod-grouper-webhook-tls"
    assert cert["spec"]["dnsNames"][0] == "kai-pod-grouper.kai-system.svc"
    hook = one(cm, "MutatingWebhookConfiguration")
    assert hook["metadata"]["annotations"] == {"cert-manager.io/inject-ca-from": "kai-system/kai-pod-grouper-webhook"}
    assert "caBundle" not in hook["webhooks"][0]["clientConfig"]
    assert not [o for o in cm if o["kind"] == "Secret"]
    assert parse_run_args(container_args(cm)).webhook_allow_unauthenticated is True
    own = objects(chart.template({"webhook": {"enabled": True, "clientCA": "PEM", "tls": {
        "mode": "secret", "secretName": "mine", "caBundle": "Q0E="}}}))
    assert not [o for o in own if o["kind"] in ("Secret", "Certificate")]
    assert one(own, "MutatingWebhookConfiguration")["webhooks"][0]["clientConfig"]["caBundle"] == "Q0E="
    volumes = one(own, "Deployment")["spec"]["template"]["spec"]["volumes"]
    assert {"name": "webhook-tls", "secret": {"secretName": "mine"}} in volumes


def test_webhook_values_that_cannot_work_fail_at_render_time() -> None:
    assert "webhook.clientCA" in template_fails({"webhook": {"enabled": True}})
    assert "webhook.tls.caBundle" in template_fails(
        {"webhook": {"enabled": True, "clientCA": "PEM", "tls": {"mode": "secret"}}})
    assert "issuerRef.name is required" in template_fails(
        {"webhook": {"enabled": True, "clientCA": "PEM", "tls": {"mode": "certManager"}}})


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"args": {"schedulerNmae": "x"}}, "schedulerNmae"),  # a typo in a flag name
        ({"args": {"qps": "fast"}}, "qps"),
        ({"args": {"burst": 0}}, "burst"),
        ({"args": {"leaderElect": "yes"}}, "leaderElect"),
        ({"args": {"logLevel": "verbose"}}, "logLevel"),
        ({"args": {"podLabelSelector": "a!=b"}}, "podLabelSelector"),
        ({"args": {"extraOwnerKinds": "batchlings"}}, "extraOwnerKinds"),
        ({"args": {"httpBindAddress": "8080"}}, "httpBindAddress"),
        ({"replicas": "two"}, "replicas"),
        ({"extraOwnerKinds": [{"group": "example.com", "kind": "Batchling"}]}, "resource"),
        ({"image": {"pullPolicy": "Sometimes"}}, "pullPolicy"),
        ({"topologySpread": {"whenUnsatisfiable": "Maybe"}}, "whenUnsatisfiable"),
        ({"replica": 3}, "replica"),
        ({"webhook": {"tls": {"mode": "selfsigned"}}}, "mode"),
        ({"webhook": {"enabeld": True}}, "enabeld"),
    ],
)
def test_wrong_values_fail_at_render_time(values: dict[str, Any], message: str) -> None:
    """values.schema.json: what `helm install` / `upgrade` / `template` reject, naming the value."""
    err = template_fails(values)
    assert "values don't meet the specifications of the schema" in err
    assert message in err
