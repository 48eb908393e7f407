"""A write the API server refuses is never reported as success (issue "Security and truth", item 2).

Against the real kube-apiserver, with its audit log counting the grouper's writes:

- a Job whose annotations total 262,100 bytes (valid on the Job: the limit is 262,144) made the PodGroup's
  copy too long (the grouper adds its own annotation): create 422, retried every minute forever, the pod
  never marked, and every read said "grouped". Now the copy is bounded: the PodGroup is created without
  the largest annotation, the pod is marked, and the decision, a log line and an Event say what was left out;
- a PodGroup that cannot be written (a ValidatingAdmissionPolicy denies it: 422) is ``failed`` with the API
  server's message in ``/pods``, ``/podgroups`` errors, ``grouper explain``, ``grouper get podgroups``
  (which does not list it) and the metrics; exactly one Warning Event however many resyncs; no retry on
  a timer (counted in the audit log); retried, and written, once the workload changes.
"""

from __future__ import annotations

import contextlib
import io
import time
from pathlib import Path
from typing import Any

from kube import Kube, KubeError, wait_until

from faults.conftest import Audit
from faults.process import GrouperProcess
from grouper.cli.main import main as cli

JOBS = "/apis/batch/v1/namespaces/{ns}/jobs"
PODS = "/api/v1/namespaces/{ns}/pods"
PGS = "/apis/scheduling.run.ai/v2alpha2/namespaces/{ns}/podgroups"
EVENTS = "/api/v1/namespaces/{ns}/events"
VAP = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
VAPB = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"
DEFAULTS = "/api/v1/namespaces/kai-system/configmaps"
DEFAULTS_NAME = "kai-pod-grouper-defaults"  # the name deploy/rbac.yaml lets the grouper watch
DENY_LABEL = "example.com/deny"
DENY_MESSAGE = "PodGroups must not carry the label example.com/deny"
LIMIT = 262_144


def _job(name: str, *, labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None
         ) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": labels or {}, "annotations": annotations or {}}
    return {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": meta,
        "spec": {"parallelism": 1, "completions": 1, "backoffLimit": 0,
                 "template": {"spec": {"schedulerName": "kai-scheduler", "restartPolicy": "Never",
                                       "containers": [{"name": "c", "image": "x"}]}}},
    }


def _pod_of(kube: Kube, ns: str, job: dict[str, Any]) -> dict[str, Any]:
    """The Job's pod (the controller manager creates it)."""
    return wait_until(lambda: next(iter(kube.list(PODS.format(ns=ns),
                                                  label_selector=f"batch.kubernetes.io/job-name={job['metadata']['name']}")),
                                   None), 60, what="the Job's pod")


def _annotation_bytes(annotations: dict[str, str]) -> int:
    return sum(len(k.encode()) + len(v.encode()) for k, v in annotations.items())


def _pg_writes(audit: Audit, ns: str) -> list[dict[str, Any]]:
    return [e for e in audit.writes(namespace=ns) if (e.get("objectRef") or {}).get("resource") == "podgroups"]


def _warnings(kube: Kube, ns: str, uid: str) -> list[dict[str, Any]]:
    return [e for e in kube.list(EVENTS.format(ns=ns))
            if e.get("type") == "Warning" and (e.get("involvedObject") or {}).get("uid") == uid
            and (e.get("source") or {}).get("component") == "pod-grouper"]


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli(list(argv))
    return code, out.getvalue(), err.getvalue()


def _codes(audit: Audit, ns: str) -> list[int]:
    """The HTTP status of each PodGroup write the grouper sent in ``ns``."""
    return [int((e.get("responseStatus") or {}).get("code") or 0) for e in _pg_writes(audit, ns)]


def test_a_job_with_262100_bytes_of_annotations_is_grouped_with_a_bounded_copy(
    fault_cluster: Any, fkube: Kube, ns: str, token_file: Path, tmp_path: Path, audit: Audit
) -> None:
    annotations = {"example.com/large": "a" * 200_000, "example.com/small": "b" * (262_100 - 200_000 - 34)}
    assert _annotation_bytes(annotations) == 262_100  # valid on the Job
    job = fkube.create(JOBS.format(ns=ns), _job("big", annotations=annotations))
    pod = _pod_of(fkube, ns, job)
    pg_name = f"pg-big-{job['metadata']['uid']}"
    with GrouperProcess(fault_cluster, token_file, tmp_path, identity="bounded") as g:
        g.wait_ready()
        # before: the PodGroup create got 422 (annotations too long) and the pod was never marked
        t0 = time.monotonic()
        try:
            marked = wait_until(lambda: (fkube.get(f"{PODS.format(ns=ns)}/{pod['metadata']['name']}")["metadata"]
                                         .get("annotations") or {}).get("pod-group-name"), 30, what="the pod marked")
        except TimeoutError:
            rec = g.get(f"/pods/{ns}/{pod['metadata']['name']}").json()  # type: ignore[union-attr]
            raise AssertionError(f"pod never marked in {time.monotonic() - t0:.0f}s: PodGroup writes answered "
                                 f"{_codes(audit, ns)}; /pods says outcome={rec.get('outcome')} "
                                 f"lastError={rec.get('lastError')}") from None
        assert marked == pg_name and _codes(audit, ns) == [201], _codes(audit, ns)
        pg = fkube.get(f"{PGS.format(ns=ns)}/{pg_name}")
        copied = pg["metadata"]["annotations"]
        assert _annotation_bytes(copied) <= LIMIT
        assert "kai.scheduler/top-owner-metadata" in copied and copied["example.com/small"] == annotations[
            "example.com/small"]
        assert "example.com/large" not in copied  # the largest goes first, and alone makes room
        rec = g.get(f"/pods/{ns}/{pod['metadata']['name']}").json()  # type: ignore[union-attr]
        assert rec["outcome"] == "grouped" and rec["lastError"] is None
        note = next(n for n in rec["notes"] if "not copied" in n)
        assert "example.com/large (200017 bytes)" in note
        events = wait_until(lambda: _warnings(fkube, ns, job["metadata"]["uid"]), 10, what="the Warning Event")
        assert any("example.com/large" in e["message"] and "not copied" in e["message"] for e in events)
        assert g.metric("podgrouper_write_failures_total") == 0


def _deny_podgroups(kube: Kube, ns: str) -> None:
    """A ValidatingAdmissionPolicy refusing (422) PodGroups in ``ns`` that carry ``DENY_LABEL``."""
    name = f"deny-{ns}"
    kube.create(VAP, {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": ["scheduling.run.ai"], "apiVersions": ["*"],
                                                    "operations": ["CREATE", "UPDATE"],
                                                    "resources": ["podgroups"]}]},
            "validations": [{"expression": f"!has(object.metadata.labels) || !('{DENY_LABEL}' in "
                                           "object.metadata.labels)", "message": DENY_MESSAGE}],
        },
    })
    kube.create(VAPB, {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"],
                 "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}}},
    })
    probe = {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
             "metadata": {"name": "probe", "labels": {DENY_LABEL: "yes"}}, "spec": {"minMember": 1}}

    def active() -> bool:
        try:
            kube.create(PGS.format(ns=ns), probe, dryRun="All")
        except KubeError as e:
            return e.status == 422 and DENY_MESSAGE in e.message
        return False

    wait_until(active, 30, what="the admission policy in force")


def test_a_refused_podgroup_is_failed_everywhere_reported_once_and_waits_for_a_change(
    fault_cluster: Any, fkube: Kube, ns: str, token_file: Path, tmp_path: Path, audit: Audit
) -> None:
    _deny_podgroups(fkube, ns)
    fkube.create(DEFAULTS, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": DEFAULTS_NAME},
                            "data": {"types": "[]"}})
    job = fkube.create(JOBS.format(ns=ns), _job("denied", labels={DENY_LABEL: "yes"}))
    uid = job["metadata"]["uid"]
    pod = _pod_of(fkube, ns, job)
    pod_name = pod["metadata"]["name"]
    pg_name = f"pg-denied-{uid}"
    args = ["--default-priorities-configmap-name", DEFAULTS_NAME, "--default-priorities-configmap-namespace",
            "kai-system"]
    with GrouperProcess(fault_cluster, token_file, tmp_path, identity="refused", args=args) as g:
        g.wait_ready()
        server = f"http://127.0.0.1:{g.port}"

        def record() -> dict[str, Any] | None:
            r = g.get(f"/pods/{ns}/{pod_name}")
            return r.json() if r is not None and r.status_code == 200 and r.json().get("lastError") else None

        wait_until(lambda: _pg_writes(audit, ns), 30, what="the grouper's first PodGroup write")
        first_refusal = time.monotonic()
        try:
            rec = wait_until(record, 5, what="the refusal recorded")
        except TimeoutError:  # before: outcome grouped, lastError None
            rec = g.get(f"/pods/{ns}/{pod_name}").json()  # type: ignore[union-attr]
        # the record: failed, with the API server's message (before: outcome grouped, lastError None)
        assert rec["outcome"] == "failed" and rec["reason"] == "PodGroupNotWritten", rec
        assert rec["podGroup"] == pg_name
        for text in (rec["message"], rec["lastError"]["message"]):
            assert "422" in text and DENY_MESSAGE in text, text
        # /podgroups: not listed (it does not exist), its workload among the errors with the message
        body = g.get(f"/podgroups?namespace={ns}").json()  # type: ignore[union-attr]
        assert body["items"] == []
        [err] = body["errors"]
        assert err["workload"] == {"apiVersion": "batch/v1", "kind": "Job", "name": "denied"}
        assert err["reason"] == "PodGroupNotWritten" and DENY_MESSAGE in err["message"] and err["pods"] == [pod_name]
        assert not fkube.exists(f"{PGS.format(ns=ns)}/{pg_name}")
        # grouper get podgroups --server: lists nothing, says why on stderr
        code, out, errs = _cli("get", "podgroups", "--server", server, "-n", ns)
        assert code == 0 and pg_name not in out, out
        assert "NOT GROUPED" in errs and "Job/denied" in errs and DENY_MESSAGE in errs, errs
        # grouper explain --server: not grouped, and why
        code, out, _ = _cli("explain", pod_name, "-n", ns, "--server", server)
        assert code == 0 and "is NOT grouped" in out and DENY_MESSAGE in out and "belongs to" not in out, out
        # the metric, by bounded reason
        assert g.metric("podgrouper_write_failures_total", resource="podgroups", reason="Invalid",
                        retry="terminal") >= 1

        # no retry on a timer: the back-off (1 s, 2 s, 4 s, ...) would have sent more creates meanwhile
        refused = len(_pg_writes(audit, ns))
        assert refused >= 1
        time.sleep(max(0.0, first_refusal + 5.0 - time.monotonic()))
        assert len(_pg_writes(audit, ns)) == refused, "a refused PodGroup was retried on a timer"

        # resyncs (the defaults ConfigMap changed: every workload is decided again) report nothing new
        for i in range(3):
            before = g.metric("podgrouper_reconciles_total", result="failed")
            fkube.patch(f"{DEFAULTS}/{DEFAULTS_NAME}", {"data": {"types": "[]", "touch": str(i)}})
            wait_until(lambda b=before: g.metric("podgrouper_reconciles_total", result="failed") > b, 30,
                       what="the resync reconciled the workload")
        events = _warnings(fkube, ns, uid)
        assert len(events) == 1, [e["message"] for e in events]
        assert DENY_MESSAGE in events[0]["message"] and events[0].get("count", 1) == 1
        print(f"\n[measure] refused PodGroup: {refused} create(s) answered {_codes(audit, ns)[:refused]}, none more in "
              f"the 5 s after the first; {len(_pg_writes(audit, ns)) - refused} more over 3 resyncs; "
              f"{len(events)} Warning Event")

        # the workload changes (the label the policy denies is removed): retried at once, and written
        fkube.patch(f"{JOBS.format(ns=ns)}/denied", {"metadata": {"labels": {DENY_LABEL: None}}})
        marked = wait_until(lambda: (fkube.get(f"{PODS.format(ns=ns)}/{pod_name}")["metadata"]
                                     .get("annotations") or {}).get("pod-group-name"), 30, what="the pod marked")
        assert marked == pg_name and fkube.exists(f"{PGS.format(ns=ns)}/{pg_name}")
        rec = g.get(f"/pods/{ns}/{pod_name}").json()  # type: ignore[union-attr]
        assert rec["outcome"] == "grouped", rec
        body = g.get(f"/podgroups?namespace={ns}").json()  # type: ignore[union-attr]
        assert [i["name"] for i in body["items"]] == [pg_name] and body["errors"] == []
    fkube.delete(f"{DEFAULTS}/{DEFAULTS_NAME}", ignore_missing=True)
    fkube.delete(f"{VAPB}/deny-{ns}", ignore_missing=True)
    fkube.delete(f"{VAP}/deny-{ns}", ignore_missing=True)
