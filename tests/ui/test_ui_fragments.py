"""The web view's server side over the in-memory world of tests/api (real decisions in a real DecisionStore):
the page shell is data-free and public, every response carries the Content-Security-Policy, and every value
from the cluster is escaped, wherever it lands (names, messages, scheduler reasons, Karta errors)."""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from api.fixtures import World, build_world, record

from grouper.api.app import create_app
from grouper.api.models import (
    EventView,
    GangReasonView,
    GangSubGroupView,
    GangView,
    WorkloadComponent,
    WorkloadDescribe,
    WorkloadRef,
    WorkloadSummaryView,
)
from grouper.api.state import AppState, StateReader
from grouper.api.ui import pages
from grouper.api.ui.html import el
from grouper.api.ui.routes import CSP, UI_PATHS
from grouper.api.views import worst_gang_state
from grouper.api.workload import Described
from grouper.core.lookups import InMemoryLookups
from grouper.writer.events import RecentEvent

XSS = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=1</script>'
CSP_DIRECTIVES = {"default-src 'none'", "script-src 'self'", "style-src 'self'", "img-src 'self'",
                  "connect-src 'self'", "frame-ancestors 'none'"}


def xss_job_objects() -> list[dict]:
    """A Job whose batch-min-member annotation is markup: the grouping error quotes it."""
    job = {"apiVersion": "batch/v1", "kind": "Job", "spec": {},
           "metadata": {"name": "xss", "namespace": "batch", "uid": "uid-xss",
                        "annotations": {"kai.scheduler/batch-min-member": XSS}}}
    pod = {"apiVersion": "v1", "kind": "Pod", "spec": {"schedulerName": "kai-scheduler"},
           "metadata": {"name": "xss-0", "namespace": "batch", "uid": "uid-xss-0", "ownerReferences": [
               {"apiVersion": "batch/v1", "kind": "Job", "name": "xss", "uid": "uid-xss", "controller": True}]}}
    return [job, pod]


@pytest.fixture(scope="module")
def world() -> World:
    w = build_world()
    objects = xss_job_objects()
    record(w.store, [w.state.grouper.decide(p, InMemoryLookups(objects)) for p in objects if p["kind"] == "Pod"])
    return w


@pytest.fixture(scope="module")
def client(world: World) -> Iterator[TestClient]:
    with TestClient(create_app(world.state)) as c:
        yield c


def no_markup_from(text: str, body: str) -> None:
    """``text`` (markup) appears in ``body`` only escaped."""
    assert "<img" not in body and "<script" not in body, body[:2000]


def test_every_web_view_response_carries_the_policy_and_the_shell_holds_no_data(
        client: TestClient, world: World) -> None:
    assert set(CSP.split("; ")) >= CSP_DIRECTIVES
    for path in (*UI_PATHS[1:], "/ui/fragments/workloads", "/ui/fragments/errors", "/ui/fragments/definitions",
                 "/ui/fragments/workloads/team-a/PyTorchJob/llama-finetune"):
        r = client.get(path)
        assert r.status_code == 200, (path, r.text)
        assert r.headers["content-security-policy"] == CSP
        assert r.headers["x-content-type-options"] == "nosniff" and r.headers["x-frame-options"] == "DENY"
        if "/fragments/" in path:
            assert r.headers["cache-control"] == "no-store" and r.headers["content-type"].startswith("text/html")
    r = client.get("/ui", follow_redirects=False)
    assert r.status_code == 307 and r.headers["location"] == "ui/"  # relative: keeps a proxy's path prefix
    shell = client.get("/ui/").text
    # no inline script or style, nothing from elsewhere, and no data of the world in it
    assert not re.search(r"<script(?![^>]*\bsrc=\"static/)", shell) and "<style" not in shell
    assert " style=" not in shell and "http" not in shell.replace('http-equiv', '')
    for name in ("llama-finetune", "team-a", "demo", "etl"):
        assert name not in shell
    # the static files are exactly the package's
    assert client.get("/ui/static/app.js").headers["content-type"].startswith("text/javascript")
    assert client.get("/ui/static/nope.js").status_code == 404


def test_a_grouping_error_quoting_markup_is_shown_as_text(client: TestClient) -> None:
    body = client.get("/ui/fragments/errors").text
    no_markup_from(XSS, body)
    assert "&lt;img src=x onerror=" in body and "&lt;script" in body and "InvalidWorkload" in body


def test_workload_rows_and_gang_reasons_are_escaped() -> None:
    gang = GangView(podGroup="pg-" + XSS, state="Waiting", since="2026-12-05T12:00:00Z", secondsInState=754,
                    required=3, present=3, scheduled=0, queue=XSS, requestedGPUs=6,
                    reasons=[GangReasonView(source="PodGroup", reason="NotEnoughResources" + XSS, message=XSS,
                                            nodePool=XSS)],
                    subGroups=[GangSubGroupView(name=XSS, parent=None, required=1, present=1, scheduled=0,
                                                satisfied=False)])
    row = WorkloadSummaryView(namespace=XSS, name=XSS, kind=XSS, apiVersion="x/v1", createdAt=None, phases=[XSS],
                              components=[WorkloadComponent(name=XSS, replicas=1)], gpus=6, pods=3, definition=XSS,
                              origin=XSS, warnings=[XSS], state="Waiting", gangs=[gang])
    body = pages.workloads([row], {})
    no_markup_from(XSS, body)
    assert 'data-state="Waiting"' in body and ">12m<" in body  # waiting for 754 s
    assert body.count("&lt;script&gt;") >= 5
    # the link's path segments are percent-encoded: a name cannot leave its segment or the attribute
    assert 'href="#/workload/%3Cimg%20src%3Dx%20onerror%3D%22window.__pwned%3D1%22%3E' in body


def test_the_element_builder_refuses_names_it_did_not_choose() -> None:
    with pytest.raises(ValueError):
        el("a", {"onclick=x y": "1"})
    with pytest.raises(ValueError):
        el("img src=x", None)
    assert el("td", {"data-x": '"><b>'}, "<b>") == '<td data-x="&quot;&gt;&lt;b&gt;">&lt;b&gt;</td>'


def test_the_workload_page_shows_the_describe_tree_podgroups_and_the_decision_in_words(client: TestClient) -> None:
    body = client.get("/ui/fragments/workloads/default/JobSet.v1alpha2.jobset.x-k8s.io/demo").text
    tree = re.search(r'<pre class="tree">(.*?)</pre>', body, re.S)
    assert tree is not None and "`-- replicatedjob" in tree.group(1) and "Resources:" in tree.group(1)
    assert 'data-podgroup="pg-demo-' in body and 'data-subgroup="worker-replica-1"' in body
    assert "The JobSet Grouper plugin grouped these pods because their top owner is JobSet default/demo" in body
    assert "No Event sent about it by this grouper" in body  # this world's grouper sent none
    assert client.get("/ui/fragments/workloads/default/JobSet/nope").status_code == 404


def test_a_workload_shows_its_worst_gang_state() -> None:
    def gangs(*states: str) -> list[GangView]:
        return [GangView(podGroup=f"pg-{i}", state=s, since="2026-12-05T12:00:00Z", secondsInState=1, required=1,
                         present=1, scheduled=0, queue="q", requestedGPUs=0) for i, s in enumerate(states)]

    assert worst_gang_state(gangs("Admitted", "Waiting", "Grouping")) == "Waiting"
    assert worst_gang_state(gangs("Admitted", "Degraded", "Error")) == "Error" and worst_gang_state([]) is None
    assert pages.duration(None) == "—" and pages.duration(59) == "59s" and pages.duration(3 * 3600) == "3h"


def test_the_workload_page_lists_the_events_the_grouper_sent_escaped() -> None:
    """The grouper holds no right to list Events: the page shows those its recorder sent (newest first)."""
    body = WorkloadDescribe(workload=WorkloadRef(apiVersion="batch/v1", kind="Job", name="train"), namespace="ml",
                            source="cache", definition=None, status=None, podGroups=[], pods=[],
                            events=[EventView(reason="GangDegraded", type="Warning", message=XSS,
                                              firstTime="2026-12-05T12:00:00Z", lastTime="2026-12-05T12:01:00Z",
                                              count=2)])
    page = pages.workload(Described(body, None), [], "Degraded")
    no_markup_from(XSS, page)
    assert 'data-reason="GangDegraded"' in page and ">2<" in page and "2026-12-05T12:01:00Z" in page


def test_the_recent_events_come_from_the_controllers_recorder() -> None:
    class Recorder:
        def recent(self, uid: str) -> list[RecentEvent]:
            return [RecentEvent("GangAdmitted", "Normal", "admitted", "t0", "t1", 1)] if uid == "u-train" else []

    class Controller:
        recorder = Recorder()

    reader = StateReader(AppState(controller=Controller()))  # type: ignore[arg-type]
    assert [e.reason for e in reader.recent_events("u-train")] == ["GangAdmitted"]
    assert reader.recent_events("u-other") == [] and reader.recent_events("") == []
    assert StateReader(AppState()).recent_events("u-train") == [], "no controller: none"
