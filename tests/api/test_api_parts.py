"""Pieces of the API: label selectors, continue tokens, the bearer token file, the controller health adapter."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from grouper.api.adapter import ControllerHealth
from grouper.api.health import liveness, readiness
from grouper.api.pagination import TokenError, decode_token, encode_token, query_fingerprint
from grouper.api.security import BearerAuth, TokenFileError
from grouper.api.selectors import Requirement, SelectorError, parse_selector
from grouper.api.state import AppState, HealthLimits, StateReader
from grouper.api.views import kind_matches, plugin_matches
from grouper.controller.queue import WorkQueue
from grouper.observability.metrics import Metrics

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


# ----------------------------------------------------------------------------------------------- adapter


class _Informer:
    def __init__(self, synced: bool = True, rv: str = "1") -> None:
        self.synced = asyncio.Event()
        if synced:
            self.synced.set()
        self.running = True
        self.error: Exception | None = None
        self.resource_version = rv


def _controller(metrics: Metrics, informers: dict[str, _Informer], leader: Any = None) -> Any:
    queue: WorkQueue[str] = WorkQueue()
    cache = SimpleNamespace(
        informer=lambda gvk: informers.get(gvk.kind),
        informers=lambda: list(informers.values()),
    )
    return SimpleNamespace(cache=cache, queue=queue, leader=leader, metrics=metrics, client=SimpleNamespace(),
                           started_at=time.monotonic(), store=None, definitions=None, grouper=None)


def test_controller_health_derives_progress_and_contact() -> None:
    metrics = Metrics()
    state = AppState(metrics=metrics)
    health = ControllerHealth(StateReader(state))
    s = health()
    assert not s.started and s.last_api_contact is None
    assert readiness(s, HealthLimits()).status != "ok"
    assert liveness(s, HealthLimits()).status == "ok"

    pods, pgs = _Informer(rv="10"), _Informer(synced=False)
    state.controller = _controller(metrics, {"Pod": pods, "PodGroup": pgs})
    s = health()
    assert s.started and s.informers == {"Pod.v1": True, "PodGroup.v2alpha2.scheduling.run.ai": False}
    assert s.last_api_contact is not None  # a cache at some resourceVersion proves contact
    assert s.worker_heartbeat is None and s.role == "single"
    pgs.synced.set()
    assert readiness(health(), HealthLimits()).status == "ok"

    first_contact = s.last_api_contact
    time.sleep(0.01)
    assert health().last_api_contact == first_contact  # nothing changed
    metrics.api_requests.labels(verb="list", resource="pods", code="200").inc()
    assert health().last_api_contact > first_contact  # type: ignore[operator]
    metrics.reconcile_duration.observe(0.1)
    beat = health().worker_heartbeat
    assert beat is not None
    state.controller.last_progress = 42.0
    assert health().worker_heartbeat == 42.0


def test_controller_health_role() -> None:
    metrics = Metrics()
    leading = SimpleNamespace(is_leader=lambda: True)
    waiting = SimpleNamespace(is_leader=lambda: False)
    state = AppState(metrics=metrics, controller=_controller(metrics, {}, leader=leading))
    assert ControllerHealth(StateReader(state))().role == "leader"
    state.controller = _controller(metrics, {}, leader=waiting)
    assert ControllerHealth(StateReader(state))().role == "standby"
    assert ControllerHealth(StateReader(AppState(settings=SimpleNamespace(leader_elect=True))))().role == "standby"
