"""The web view in a real browser: Playwright drives Debian's Chromium (tests/realtools.py) against a real
grouper (``grouper.runtime.Service`` in-process, ``--http-auth=kubernetes``) on the local API server, with
real ServiceAccount tokens checked by TokenReview and SubjectAccessReview.

An admin sees both namespaces' workloads, filters them, opens a JobSet's page (its component tree, PodGroup
and sub-groups, the decision in words), the grouping errors (a message quoting markup stays text) and the
definitions; a tenant sees its namespace only and 403 for the rest; a token without rights sees 403 and no
data; no console errors and no CSP violations. Screenshots go to ``test-artifacts/test_ui_browser/``;
``GROUPER_UI_SCREENSHOTS=1`` (``make ui-screenshots``) also copies the README's into ``docs/images/``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from api.workloads import BAD_JOB, create_jobset
from controller.harness import GrouperThread, annotated, job, label_namespace, pod_groups, pods
from kai_status import (
    NOT_ENOUGH_RESOURCES,
    FitError,
    fit_errors_message,
    mark_unschedulable,
    pod_unschedulable,
    write_pod_condition,
    write_status,
)
from kube import Kube, KubeError, wait_until

from grouper.api.ui.routes import CSP

REPO = Path(__file__).resolve().parents[2]
README_IMAGES = REPO / "docs" / "images"
README_SHOTS = {"workloads-waiting.png": "webui-workloads.png", "waiting.png": "webui-waiting-gang.png"}
PG_GROUP = "scheduling.run.ai"
XSS = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=1</script>'
OTHER_JOB = "other-team-train"
GPU_MESSAGE = "2 node(s) didn't have enough resources: GPUs"
TENANT_RULES = [
    {"apiGroups": [PG_GROUP], "resources": ["podgroups"], "verbs": ["get", "list"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
]


@dataclass
class Env:
    base: str
    a: str
    b: str
    admin: str
    tenant: str
    nobody: str
    grouper: GrouperThread
    kube: Kube
    shots: list[Path] = field(default_factory=list)


def _rbac(kube: Kube, ns: str, sa_ns: str, sa: str) -> None:
    kube.create(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "grouper-reader"},
        "rules": TENANT_RULES})
    kube.create(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": sa},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "grouper-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": sa_ns}]})


@pytest.fixture(scope="module")
def env(cluster: Any, kube: Kube) -> Iterator[Env]:
    a, b = f"ml-team-{uuid.uuid4().hex[:6]}", f"research-{uuid.uuid4().hex[:6]}"
    for ns in (a, b):  # both in the scope of the grouper of `a`
        kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                           "metadata": {"name": ns, "labels": {"grouper-test": a}}})
        wait_until(lambda ns=ns: kube.exists(f"/api/v1/namespaces/{ns}/serviceaccounts/default"), 30,
                   what="default SA")
    label_namespace(kube, a)
    kube.apply_yaml(REPO / "deploy" / "rbac.yaml")
    cluster.create_service_account(a, "tenant")
    cluster.create_service_account(a, "nobody")
    _rbac(kube, a, a, "tenant")
    try:
        with GrouperThread(cluster, a, token=cluster.create_token("kai-system", "kai-pod-grouper"),
                           http_auth="kubernetes") as g:
            create_jobset(kube, a)
            kube.create(f"/apis/batch/v1/namespaces/{a}/jobs",
                        job("train", 2, annotations={"kai.scheduler/batch-min-member": "2"}))  # a gang of 2
            kube.create(f"/apis/batch/v1/namespaces/{a}/jobs",
                        job(BAD_JOB, 1, annotations={"kai.scheduler/batch-min-member": XSS}))
            kube.create(f"/apis/batch/v1/namespaces/{b}/jobs", job(OTHER_JOB, 1))
            wait_until(lambda: annotated(kube, b, 1), 60, what="the other namespace's Job grouped")
            wait_until(lambda: len([p for p in pods(kube, a) if (p["metadata"].get("annotations") or {})
                                    .get("pod-group-name")]) == 5, 60, what="JobSet and Job pods grouped")
            wait_until(lambda: g.store.failing_pods(a), 60, what="the bad Job's pod failed to group")
            base = f"http://127.0.0.1:{g.service.http_port}"

            def gangs_waiting() -> bool:
                """Every gang Waiting (no scheduler runs) in the grouper's own view: it follows the PodGroups
                by their watch, a moment behind the writes waited for above, and a page shows what the
                grouper has seen when it is opened (the State filter offers only the states listed)."""
                listed = httpx.get(f"{base}/workloads", headers={"Authorization": f"Bearer {cluster.admin_token}"},
                                   timeout=10).json()["items"]
                states = {w["name"]: w.get("state") for w in listed}
                return all(states.get(n) == "Waiting" for n in ("demo", "train", OTHER_JOB))

            wait_until(gangs_waiting, 60, what="every gang Waiting in the grouper's view")
            yield Env(base, a, b, cluster.admin_token,
                      cluster.create_token(a, "tenant"), cluster.create_token(a, "nobody"), g, kube)
    finally:
        for ns in (a, b):
            with contextlib.suppress(KubeError):
                kube.delete(f"/api/v1/namespaces/{ns}", ignore_missing=True)


class Tab:
    """One browser tab on the web view, recording console messages and page errors."""

    def __init__(self, browser: Any, env: Env, artifacts: Path) -> None:
        self.env, self.artifacts = env, artifacts
        self.page = browser.new_page(viewport={"width": 1360, "height": 860})
        self.console: list[tuple[str, str]] = []
        self.page.on("console", lambda m: self.console.append((m.type, m.text)))
        self.page.on("pageerror", lambda e: self.console.append(("pageerror", str(e))))

    def open(self, route: str, expect: str = "ready") -> Any:
        """A fresh load of ``/ui/#route`` (the token stays: sessionStorage belongs to the tab)."""
        self.page.goto("about:blank")
        response = self.page.goto(f"{self.env.base}/ui/#{route}")
        self.page.wait_for_selector(f"body[data-load={expect}]", timeout=15000)
        return response

    def use_token(self, token: str) -> str:
        """Paste ``token``; the load it starts ends ``ready`` or ``error`` (returned)."""
        self.page.fill("#token", token)
        self.page.click("#token-form button[type=submit]")  # its handler marks the page loading at once
        self.page.wait_for_selector("body:not([data-load=loading])", timeout=15000)
        return str(self.page.get_attribute("body", "data-load"))

    def rows(self, table: str = "#workloads") -> list[dict[str, str]]:
        return list(self.page.eval_on_selector_all(
            f"{table} tbody tr:not([hidden])",
            "rows => rows.map(r => ({...r.dataset, name: r.cells[2].textContent}))"))

    def text(self) -> str:
        return str(self.page.inner_text("#content"))

    def errors(self) -> list[tuple[str, str]]:
        """Console errors other than the browser's own line for a 401 / 403 answer the page then explains."""
        return [(t, m) for t, m in self.console if t in ("error", "pageerror")
                and not (m.startswith("Failed to load resource") and ("401" in m or "403" in m))]

    def shot(self, name: str) -> None:
        path = self.artifacts / name
        path.unlink(missing_ok=True)
        self.page.screenshot(path=str(path), full_page=True)
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        self.env.shots.append(path)


def test_admin_tenant_and_a_token_without_rights(browser: Any, env: Env, artifacts: Path) -> None:
    tab = Tab(browser, env, artifacts)
    a, b = env.a, env.b

    # the shell is public, data-free and carries the policy; without a token the fragment is a 401, explained
    response = tab.open("/workloads", expect="error")
    assert response.headers["content-security-policy"] == CSP
    assert tab.page.is_visible("div.error[data-status='401']") and "bearer token" in tab.text()

    # the admin: every namespace of this grouper
    assert tab.use_token(env.admin) == "ready"
    rows = tab.rows()
    assert {(r["namespace"], r["kind"], r["name"]) for r in rows} >= {
        (a, "JobSet", "demo"), (a, "Job", "train"), (b, "Job", OTHER_JOB)}, rows
    assert tab.page.inner_text("#token-state") == "token set for this tab"
    assert env.admin not in tab.page.content()  # the token is never written into the page
    tab.shot("workloads.png")

    # filters, in the browser, kept in the URL across a reload
    tab.page.select_option("#f-namespace", b)
    assert {r["namespace"] for r in tab.rows()} == {b} and tab.page.inner_text("#shown") == "1"
    assert f"namespace={b}" in tab.page.url
    tab.page.reload()
    tab.page.wait_for_selector("body[data-load=ready]")
    assert tab.page.input_value("#f-namespace") == b and [r["name"] for r in tab.rows()] == [OTHER_JOB]
    tab.page.select_option("#f-namespace", "")
    tab.page.select_option("#f-kind", "JobSet")
    assert [(r["namespace"], r["name"]) for r in tab.rows()] == [(a, "demo")]
    tab.page.select_option("#f-kind", "")
    tab.page.select_option("#f-state", "Waiting")  # every gang waits (no scheduler runs); the bad Job has none
    shown = tab.rows()
    assert {r["state"] for r in shown} == {"Waiting"} and BAD_JOB not in {r["name"] for r in shown}
    assert {"demo", "train", OTHER_JOB} <= {r["name"] for r in shown}
    tab.page.select_option("#f-state", "")

    # the JobSet's page: the component tree as `grouper describe` prints it, its PodGroup and sub-groups
    tab.page.click("#workloads a:text-is('demo')")
    tab.page.wait_for_selector("article.workload[data-workload=demo]")
    tree = tab.page.inner_text("pre.tree")
    assert tree.startswith(f"JobSet/demo   namespace: {a}") and "`-- replicatedjob" in tree and "Resources:" in tree
    podgroup = tab.page.locator("section.podgroup").first
    assert podgroup.get_attribute("data-podgroup", timeout=5000).startswith("pg-demo-")
    subgroups = tab.page.eval_on_selector_all("table.subgroups tbody tr", "rows => rows.map(r => r.dataset.subgroup)")
    assert {"leader", "worker"} <= set(subgroups), subgroups
    assert f"top owner is JobSet {a}/demo" in tab.text() and "kubectl events --for" in tab.text()
    tab.shot("workload.png")

    # grouping errors: the bad Job's message quotes its annotation, markup included, as text
    tab.open("/errors")
    assert BAD_JOB in tab.text() and "<img src=x onerror=" in tab.text() and "<script" in tab.text()
    assert tab.page.evaluate("window.__pwned") is None
    assert tab.page.locator("#content img, #content script").count() == 0
    tab.shot("errors.png")

    tab.open("/definitions")
    defs = tab.page.eval_on_selector_all("#definitions tbody tr", "rows => rows.map(r => r.dataset.origin)")
    assert "builtin" in defs
    tab.shot("definitions.png")
    assert tab.errors() == [], tab.console

    # a tenant of namespace a: its namespace only; another namespace's workload and the definitions are 403
    tab.page.click("#forget")
    tab.page.wait_for_selector("body[data-load=error]")
    tab.open("/workloads", expect="error")
    tab.use_token(env.tenant)
    wait_until(lambda: tab.open("/workloads") and {r["namespace"] for r in tab.rows()} == {a}, 20,
               what="the tenant's RoleBinding effective")
    assert OTHER_JOB not in tab.page.content()
    tab.open(f"/workload/{b}/Job/{OTHER_JOB}", expect="error")
    assert tab.page.is_visible("div.error[data-status='403']")
    assert f'cannot get resource "podgroups" in API group "{PG_GROUP}" in the namespace "{b}"' in tab.text()
    tab.shot("forbidden.png")
    tab.open("/errors")
    assert BAD_JOB in tab.text()
    tab.open("/definitions", expect="error")
    assert tab.page.is_visible("div.error[data-status='403']")
    assert OTHER_JOB not in tab.page.content()

    # a valid token without rights: 403 naming the missing right, no rows
    tab.page.click("#forget")
    tab.page.wait_for_selector("body[data-load=error]")
    tab.open("/workloads", expect="error")
    assert tab.use_token(env.nobody) == "error"
    assert tab.page.is_visible("div.error[data-status='403']")
    assert 'cannot list resource "podgroups"' in tab.text() and tab.page.locator("#workloads").count() == 0
    for route in ("/errors", f"/workload/{a}/JobSet/demo"):
        tab.open(route, expect="error")
        assert tab.page.is_visible("div.error[data-status='403']") and "demo" not in tab.text().replace(
            "/demo", "")
    assert tab.errors() == [], tab.console
    assert not [m for _, m in tab.console if "Content Security Policy" in m or "Refused" in m], tab.console
    tab.page.close()
    _refresh_readme(env.shots)


def _refresh_readme(shots: list[Path]) -> None:
    """``GROUPER_UI_SCREENSHOTS=1``: the README's screenshots come from this test."""
    if os.environ.get("GROUPER_UI_SCREENSHOTS") != "1":
        return
    README_IMAGES.mkdir(parents=True, exist_ok=True)
    for shot in shots:
        if shot.name in README_SHOTS:
            shutil.copyfile(shot, README_IMAGES / README_SHOTS[shot.name])


def test_http_auth_none_needs_no_token(browser: Any, cluster: Any, kube: Kube, namespace: str,
                                       artifacts: Path) -> None:
    label_namespace(kube, namespace)
    with GrouperThread(cluster, namespace, http_auth="none") as g:
        kube.create(f"/apis/batch/v1/namespaces/{namespace}/jobs", job("solo", 1))
        wait_until(lambda: annotated(kube, namespace, 1), 60, what="Job pod grouped")
        env = Env(f"http://127.0.0.1:{g.service.http_port}", namespace, "", "", "", "", g, kube)
        tab = Tab(browser, env, artifacts)
        tab.open("/workloads")
        assert [(r["namespace"], r["kind"], r["name"]) for r in tab.rows()] == [(namespace, "Job", "solo")]
        assert tab.page.inner_text("#token-state") == "no token"
        assert pod_groups(kube, namespace)
        assert tab.errors() == [], tab.console
        tab.page.close()


def test_a_waiting_gang_shows_the_schedulers_reason(browser: Any, env: Env, artifacts: Path) -> None:
    """KAI's scheduler holds Job ``train`` (status written as it writes it, tests/kai_status.py): the list shows
    the workload Waiting with the scheduler's message, its page the gang and the reasons verbatim."""
    a, now = env.a, datetime.now(UTC)
    (name, pg), = ((n, p) for n, p in pod_groups(env.kube, a).items()
                   if p["metadata"]["ownerReferences"][0]["name"] == "train")
    pg_path = f"/apis/{PG_GROUP}/v2alpha2/namespaces/{a}/podgroups/{name}"
    errors = [FitError(NOT_ENOUGH_RESOURCES, [GPU_MESSAGE])]
    assert mark_unschedulable(pg, errors, now=now)
    write_status(env.kube, pg_path, pg)
    message = fit_errors_message(errors)
    for p in pods(env.kube, a, "job-name=train"):
        write_pod_condition(env.kube, f"/api/v1/namespaces/{a}/pods/{p['metadata']['name']}",
                            pod_unschedulable(p, message, now=now))

    tab = Tab(browser, env, artifacts)
    tab.open("/workloads", expect="error")
    tab.use_token(env.admin)

    def waiting() -> bool:
        """``train`` alone listed Waiting, with the scheduler's reason. The other gangs wait too (no scheduler
        runs), without a word from it, and so did ``train`` until the grouper's watch brought the status just
        written: the page shows what the grouper has seen when it is opened."""
        tab.open(f"/workloads?namespace={a}&kind=Job&state=Waiting")
        return [r["name"] for r in tab.rows()] == ["train"] and \
            GPU_MESSAGE in tab.page.inner_text("#workloads tbody tr:not([hidden]) td.reason")

    wait_until(waiting, 30, what="Job train Waiting in the web view, with the scheduler's reason")
    assert tab.page.input_value("#f-state") == "Waiting"
    tab.open("/workloads")
    tab.shot("workloads-waiting.png")
    tab.open(f"/workloads?namespace={a}&kind=Job&state=Waiting")
    tab.page.click("#workloads a:text-is('train')")
    tab.page.wait_for_selector(f"section.podgroup[data-podgroup='{name}'] ul.reasons")
    section = tab.page.inner_text(f"section.podgroup[data-podgroup='{name}']")
    assert "Waiting" in section and f"PodGroup {NOT_ENOUGH_RESOURCES}" in section and GPU_MESSAGE in section
    assert f"PodGroup {NOT_ENOUGH_RESOURCES} (UnschedulableOnNodePool) on node pool default: {GPU_MESSAGE}" in section
    assert f"Pod Unschedulable (PodScheduled): {message} — pods train-" in section
    assert "0 / 2 / 2 pods" in section  # scheduled / present / required (batch-min-member 2)
    tab.shot("waiting.png")
    assert tab.errors() == [], tab.console
    tab.page.close()
    _refresh_readme(env.shots)
