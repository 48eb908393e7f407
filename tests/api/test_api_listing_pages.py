"""``GET /podgroups`` pages over the decision store's records before it renders: a listing of a store with many
PodGroups renders the pod records and summaries of its page only (counted, not timed)."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from grouper.api.app import create_app
from grouper.api.state import AppState
from grouper.api.views import Views
from grouper.core.decision import Decision
from grouper.core.lookups import InMemoryLookups
from grouper.model.podgroup import OwnerRef, PodGroupMetadata
from grouper.observability.metrics import Metrics
from grouper.records.decisions import DecisionStore

WORKLOADS, PODS = 60, 10  # 60 PodGroups of 10 pods


def _store() -> DecisionStore:
    store = DecisionStore()
    for w in range(WORKLOADS):
        top = OwnerRef("batch/v1", "Job", f"train-{w:02}", f"uid-{w}")
        md = PodGroupMetadata(name=f"pg-train-{w:02}", namespace="ns", owner=top, queue="q")
        names = [f"train-{w:02}-{i}" for i in range(PODS)]
        for name in names:
            store.record_decision(Decision("ns", name, f"uid-{name}", "grouped", "Grouped", f"PodGroup {md.name}",
                                           pod_group=md, plugin="BatchJob Grouper", owner_chain=[top],
                                           top_owner=top), f"Job.batch ns/train-{w:02}")
        store.record_pod_group("ns", md.name, workload=f"Job.batch ns/train-{w:02}", desired=md.to_object(),
                               operation="created", pods=names, notes=[], newest=names[-1])
    return store


@pytest.mark.parametrize("query", [{}, {"plugin": "batchjob"}, {"kind": "Job", "queue": "q"}])
def test_a_listing_renders_only_its_page(monkeypatch: pytest.MonkeyPatch, query: dict[str, str]) -> None:
    store = _store()
    renders: list[str] = []
    summaries: list[Any] = []
    render, summary = store._render, Views.summary

    def counted_render(namespace: str, name: str, *args: Any) -> Any:
        renders.append(name)
        return render(namespace, name, *args)

    def counted_summary(self: Views, *args: Any) -> Any:
        summaries.append(args)
        return summary(self, *args)

    monkeypatch.setattr(store, "_render", counted_render)
    monkeypatch.setattr(Views, "summary", counted_summary)
    state = AppState(metrics=Metrics(), store=store, objects=InMemoryLookups([]))
    with TestClient(create_app(state)) as client:
        body = client.get("/podgroups", params={**query, "limit": "5"}).json()
        assert [i["name"] for i in body["items"]] == [f"pg-train-{w:02}" for w in range(5)]
        assert [i["podsAssigned"] for i in body["items"]] == [PODS] * 5 and body["errors"] == []
        assert len(summaries) == 5
        # the page's representatives (the pod each PodGroup's write followed), and for a plugin filter each
        # PodGroup's one: never the 600 pods
        page = [f"train-{w:02}-{PODS - 1}" for w in range(5)]
        assert renders == (page if "plugin" not in query else [f"train-{w:02}-{PODS - 1}" for w in range(WORKLOADS)]
                           + page)

        renders.clear()
        nxt = client.get("/podgroups", params={**query, "limit": "5", "continue": body["continue"]}).json()
        assert [i["name"] for i in nxt["items"]] == [f"pg-train-{w:02}" for w in range(5, 10)]
        assert len(renders) == (5 if "plugin" not in query else WORKLOADS + 5)
