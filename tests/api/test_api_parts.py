"""Pieces of the API: label selectors, continue tokens, the bearer token file, the state reader and the probes."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from grouper.api.health import liveness, readiness
from grouper.api.models import HealthResponse
from grouper.api.pagination import TokenError, decode_token, encode_token, query_fingerprint
from grouper.api.security import BearerAuth, TokenFileError
from grouper.api.selectors import Requirement, SelectorError, parse_selector
from grouper.api.state import AppState, HealthLimits, HealthSnapshot, StateReader
from grouper.api.views import kind_matches, plugin_matches

# ----------------------------------------------------------------------------------------------- selectors


@pytest.mark.parametrize(
    ("text", "requirements"),
    [
        ("", ()),
        ("a=b", (Requirement("a", "=", ("b",)),)),
        ("a==b", (Requirement("a", "=", ("b",)),)),
        (" a = b , c != d ", (Requirement("a", "=", ("b",)), Requirement("c", "!=", ("d",)))),
        ("x.io/k in (v2, v1)", (Requirement("x.io/k", "in", ("v1", "v2")),)),
        ("k notin (a),j", (Requirement("k", "notin", ("a",)), Requirement("j", "exists"))),
        ("!gone", (Requirement("gone", "!"),)),
        ("a=", (Requirement("a", "=", ("",)),)),
    ],
)
def test_selector_parses(text: str, requirements: tuple[Requirement, ...]) -> None:
    assert parse_selector(text).requirements == requirements


@pytest.mark.parametrize(
    "text",
    ["a in (b", "a in b)", "a in ()", "=b", "a=b=c", "a,,b", ",", "a b", "-a=b", "a=b c", "a=(b)",
     "a in ((b))", "x/y/z=1", "a!=b!=c", "a=" + "v" * 64, "UPPER.io/x=1"],
)
def test_selector_rejects(text: str) -> None:
    with pytest.raises(SelectorError):
        parse_selector(text)


def test_selector_matches() -> None:
    labels = {"app": "web", "tier": "front"}
    assert parse_selector("app=web,tier in (front,back)").matches(labels)
    assert parse_selector("app!=db,!gone,tier").matches(labels)
    assert parse_selector("missing!=x,missing notin (y)").matches(labels)
    assert not parse_selector("missing in (x)").matches(labels)
    assert not parse_selector("app=db").matches(labels)
    assert parse_selector("").matches(None)


def test_kind_and_plugin_matching() -> None:
    assert kind_matches("JobSet", "jobset.x-k8s.io/v1alpha2", "JobSet")
    assert kind_matches("jobset.jobset.x-k8s.io", "jobset.x-k8s.io/v1alpha2", "JobSet")
    assert kind_matches("JobSet.v1alpha2.jobset.x-k8s.io", "jobset.x-k8s.io/v1alpha2", "JobSet")
    assert not kind_matches("JobSet.batch", "jobset.x-k8s.io/v1alpha2", "JobSet")
    assert kind_matches("pod", "v1", "Pod")
    assert plugin_matches("jobset", "JobSet Grouper") and plugin_matches("Default Grouper", "Default Grouper")
    assert plugin_matches("karta", "Karta Grouper") and not plugin_matches("karta", "Default Grouper")
    assert not plugin_matches("x", None)


# ----------------------------------------------------------------------------------------------- tokens


def test_continue_token_round_trip() -> None:
    fp = query_fingerprint({"namespace": "a", "kind": None})
    assert fp == query_fingerprint({"kind": None, "namespace": "a"})
    token = encode_token(("ns", "pg-1"), fp)
    assert "=" not in token
    assert decode_token(token, fp) == ("ns", "pg-1")
    with pytest.raises(TokenError, match="other filters"):
        decode_token(token, query_fingerprint({"namespace": "b"}))
    for bad in ("", "!!!", "bnVsbA", encode_token(("a", "b"), fp)[:-3]):
        with pytest.raises(TokenError):
            decode_token(bad, fp)


# ----------------------------------------------------------------------------------------------- token file


def test_bearer_auth_file(tmp_path: Path) -> None:
    with pytest.raises(TokenFileError, match="cannot read"):
        BearerAuth(tmp_path / "missing")
    (tmp_path / "empty").write_text("  \n")
    with pytest.raises(TokenFileError, match="empty"):
        BearerAuth(tmp_path / "empty")
    f = tmp_path / "tok"
    f.write_text("abc\n")
    auth = BearerAuth(f)
    assert auth.check("Bearer abc") and auth.check("bearer abc ")
    assert not auth.check("Bearer abd") and not auth.check(None) and not auth.check("Bearer ")
    assert not auth.check("Bearer ab\u00e9")  # non-ASCII is compared as bytes, never raises
    f.unlink()
    assert auth.check("Bearer abc")  # keeps the last good token while the file is being replaced


# ----------------------------------------------------------------------------------------------- state reader


class _Status:
    """A controller as the API sees it: only the ControllerStatus protocol."""

    def __init__(self, snap: HealthSnapshot) -> None:
        self.snap = snap

    def health_snapshot(self) -> HealthSnapshot:
        return self.snap

    def objects(self) -> Any:
        return SimpleNamespace(get=lambda *a: {"kind": "X"})

    async def read_live(self, api_version: str, kind: str, namespace: str | None, name: str) -> Any:
        return {"live": name}


def test_health_before_the_controller_exists_is_starting() -> None:
    s = StateReader(AppState(settings=SimpleNamespace(leader_elect=True))).health()
    assert not s.started and s.role == "standby"
    assert readiness(s, HealthLimits()).status == "failing"
    assert liveness(s, HealthLimits()).status == "ok"  # starting is alive


def test_health_comes_from_the_controller_and_fatal_wins() -> None:
    now = time.monotonic()
    snap = HealthSnapshot(role="leader", informers={"Pod.v1": True}, last_api_contact=now, now=now)
    state = AppState(controller=_Status(snap))
    reader = StateReader(state)
    assert reader.health().role == "leader" and readiness(reader.health(), HealthLimits()).status == "ok"
    state.fatal = "task informer:pods crashed 5 times"
    assert reader.health().fatal == state.fatal
    body = liveness(reader.health(), HealthLimits())
    assert body.status == "failing" and any(c.message == state.fatal for c in body.checks)
    assert reader.object_source().get("v1", "Pod", "ns", "p") == {"kind": "X"}
    assert asyncio.run(reader.live("v1", "Pod", "ns", "p")) == {"live": "p"}  # type: ignore[misc]


def test_readiness_names_the_failing_informer_and_the_api_error() -> None:
    now = time.monotonic()
    snap = HealthSnapshot(
        role="single",
        informers={"Pod.v1": False, "PodGroup.v2alpha2.scheduling.run.ai": True},
        informer_messages={"Pod.v1": "watch down for 7.0s: 0 ConnectionError: refused"},
        last_api_contact=now - 20,
        api_error="/livez: 0 ConnectionError: refused",
        now=now,
    )
    body = readiness(snap, HealthLimits())
    assert body.status == "failing"
    msgs = {c.name: c.message for c in body.checks}
    assert "Pod.v1: watch down for 7.0s" in msgs["informers"]
    assert "limit 15s" in msgs["api-server"] and "refused" in msgs["api-server"]


def test_a_replica_whose_webhook_does_not_listen_is_not_ready() -> None:
    """The API server calls the webhook as soon as it is registered and admits a pod unchanged when the call
    is refused; a replica counted ready before its webhook listens is how a gang's pods went ungrouped."""
    now = time.monotonic()
    ready = {"role": "single", "informers": {"Pod.v1": True}, "last_api_contact": now, "now": now}
    assert [c.name for c in readiness(HealthSnapshot(**ready), HealthLimits()).checks] == [
        "informers", "api-server", "role"]  # no webhook configured: no check
    url = "https://0.0.0.0:9443/mutate-pods"
    body = readiness(HealthSnapshot(**ready, webhook=url, webhook_serving=False), HealthLimits())
    assert body.status == "failing" and body.http_status == 503
    assert {c.name: (c.ok, c.message) for c in body.checks}["webhook"] == (
        False, f"not serving at {url} yet: a pod admitted now would not be put in its group")
    body = readiness(HealthSnapshot(**ready, webhook=url, webhook_serving=True), HealthLimits())
    assert body.status == "ok"
    assert {c.name: c.message for c in body.checks}["webhook"] == f"serving admission at {url}"


def test_a_replica_shutting_down_is_not_ready_but_alive() -> None:
    now = time.monotonic()
    snap = HealthSnapshot(role="leader", informers={"Pod.v1": True}, last_api_contact=now, now=now, stopping=True)
    body = readiness(snap, HealthLimits())
    assert body.status == "failing"
    assert {c.name: (c.ok, c.message) for c in body.checks}["shutdown"] == (
        False, "shutting down: send nothing new here")
    assert liveness(snap, HealthLimits()).status == "ok"  # no restart for it: it is leaving


def test_health_bodies_are_what_the_api_schema_says() -> None:
    """The probes' bodies are built without pydantic (so ``grouper run`` answers them before importing it);
    the OpenAPI schema of ``/healthz`` and ``/readyz`` is ``HealthResponse``: each body is exactly a valid one."""
    now = time.monotonic()
    snapshots = [
        HealthSnapshot(role="single", started=False),
        HealthSnapshot(role="leader", informers={"Pod.v1": True}, last_api_contact=now, now=now),
        HealthSnapshot(role="standby", fatal="task http crashed", informers={"Pod.v1": False},
                       informer_errors={"Pod.v1": "forbidden"}, queue_depth=3, worker_heartbeat=now - 500,
                       last_api_contact=now - 60, api_error="refused", now=now),
    ]
    for snap in snapshots:
        for result in (liveness(snap, HealthLimits()), readiness(snap, HealthLimits())):
            body = result.body()
            assert HealthResponse.model_validate(body).model_dump() == body
            assert result.http_status == (200 if body["status"] == "ok" else 503)
