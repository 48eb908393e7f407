"""Authentication and authorization of the API (``--http-auth=kubernetes``) over an in-memory API server that
answers TokenReview and SubjectAccessReview like the real one (the real-server tests are in
tests/integration/test_api_auth.py): who sees which namespaces, what 401 / 403 / 429 / 503 say, and that
reviews are cached, shared and bounded."""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from grouper.api.app import create_app
from grouper.api.auth import (
    ACCESS_REVIEWS,
    TOKEN_REVIEWS,
    ApiAccess,
    KubeAccess,
    NonResourceAttributes,
    ResourceAttributes,
    StaticTokenAccess,
    UserInfo,
    api_access,
    auth_mode,
)
from grouper.api.auth_cache import TTLCache
from grouper.core.lookups import InMemoryLookups
from grouper.kube.transport import ApiError
from grouper.runtime.settings import RunSettings

from .fixtures import World, batch_objects, build_world, record

PG = ("scheduling.run.ai", "podgroups")
EVERYWHERE = ""


class FakeApiServer:
    """``request("POST", ...)`` for the two review APIs. ``grants``: (user, verb, group, resource, namespace)
    with namespace "" = every namespace (a ClusterRoleBinding), or (user, verb, path) for non-resource URLs."""

    def __init__(self, users: dict[str, str], grants: set[tuple[str, ...]]) -> None:
        self.users, self.grants = dict(users), set(grants)
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.delay = 0.0
        self.fail: ApiError | None = None
        self.token_audiences = {"tok-aud": ["kai-pod-grouper"]}  # every other token: the API server's

    async def request(self, method: str, path: str, *, body: Any = None, timeout: float | None = None,
                      **_: Any) -> Any:
        assert method == "POST"
        self.calls.append((path, body))
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.fail is not None:
            raise self.fail
        if path == TOKEN_REVIEWS:
            token = body["spec"]["token"]
            user = self.users.get(token) or ("aud-user" if token in self.token_audiences else None)
            wanted = body["spec"].get("audiences") or ["https://kubernetes.default.svc"]
            matched = [a for a in wanted if a in self.token_audiences.get(token, ["https://kubernetes.default.svc"])]
            if user is None or not matched:
                return {"status": {"authenticated": False, "error": "invalid bearer token"}}
            return {"status": {"authenticated": True, "audiences": matched, "user": {
                "username": user, "uid": f"uid-{user}", "groups": ["system:authenticated"],
                "extra": {"authentication.kubernetes.io/pod-name": ["p-1"]}}}}
        assert path == ACCESS_REVIEWS
        spec = body["spec"]
        if "nonResourceAttributes" in spec:
            a = spec["nonResourceAttributes"]
            allowed = (spec["user"], a["verb"], a["path"]) in self.grants
        else:
            a = spec["resourceAttributes"]
            key = (spec["user"], a["verb"], a["group"], a["resource"])
            allowed = (*key, EVERYWHERE) in self.grants or (
                bool(a.get("namespace")) and (*key, a["namespace"]) in self.grants)
        return {"status": {"allowed": allowed, **({} if allowed else {"reason": "no RBAC rule"})}}

    def reviews(self, path: str) -> int:
        return sum(1 for p, _ in self.calls if p == path)


USERS = {"tok-admin": "admin", "tok-a": "tenant-a", "tok-b": "tenant-b", "tok-scraper": "scraper",
         "tok-none": "nobody"}
GRANTS: set[tuple[str, ...]] = {
    ("admin", "list", *PG, EVERYWHERE), ("admin", "get", *PG, EVERYWHERE), ("admin", "list", "run.ai", "kartas",
                                                                            EVERYWHERE),
    ("admin", "get", "", "pods", EVERYWHERE), ("admin", "get", "/metrics"),
    ("tenant-a", "list", *PG, "team-a"), ("tenant-a", "get", *PG, "team-a"), ("tenant-a", "get", "", "pods", "team-a"),
    ("tenant-a", "list", *PG, "batch"),
    ("tenant-b", "list", *PG, "team-b"),
    ("scraper", "get", "/metrics"),
}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def server() -> FakeApiServer:
    return FakeApiServer(USERS, set(GRANTS))


@pytest.fixture
def world_with_errors() -> World:
    w = build_world()
    objects = batch_objects()  # namespace "batch": a grouped Job, a broken Job and an orphan pod
    lookups = InMemoryLookups(objects)
    record(w.store, [w.state.grouper.decide(p, lookups) for p in objects if p["kind"] == "Pod"])
    return w


@pytest.fixture
def api(world_with_errors: World, server: FakeApiServer) -> Iterator[TestClient]:
    access = KubeAccess(server)  # type: ignore[arg-type]  # the fake has KubeClient.request's shape
    with TestClient(create_app(world_with_errors.state, access=access)) as c:
        yield c


def namespaces(body: dict[str, Any]) -> set[str]:
    return {i["namespace"] for i in body["items"]}


# ----------------------------------------------------------------------------------------------- 401 / probes


def test_probes_open_everything_else_needs_a_valid_token(api: TestClient, server: FakeApiServer) -> None:
    assert api.get("/healthz").status_code == 200 and api.get("/readyz").status_code == 200
    for path in ("/podgroups", "/metrics", "/definitions", "/docs", "/openapi.json", "/pods/team-a/x",
                 "/workloads/team-a/JobSet/demo", "/no-such-path"):
        for headers in ({}, bearer("wrong"), {"Authorization": "Basic dG9rLWE="}, {"Authorization": "Bearer "},
                        bearer("x" * 20000)):
            r = api.get(path, headers=headers)
            assert r.status_code == 401, (path, headers, r.text)
            assert r.headers["www-authenticate"] == "Bearer" and "bearer token" in r.json()["detail"]
    # the schema needs only a valid token, no particular right
    assert api.get("/openapi.json", headers=bearer("tok-none")).status_code == 200
    assert api.get("/no-such-path", headers=bearer("tok-none")).status_code == 404
    # one review per distinct well-formed token (the oversized one is refused without asking)
    assert server.reviews(TOKEN_REVIEWS) == 2
    assert all(body["spec"]["token"] != "x" * 20000 for _, body in server.calls)


# ----------------------------------------------------------------------------------------------- namespaces


def test_cluster_reader_sees_everything(api: TestClient) -> None:
    body = api.get("/podgroups", headers=bearer("tok-admin")).json()
    assert namespaces(body) == {"default", "team-a", "team-b", "batch"}
    assert {e["namespace"] for e in body["errors"]} == {"batch"}


def test_tenant_sees_only_its_namespaces(api: TestClient, server: FakeApiServer) -> None:
    body = api.get("/podgroups", headers=bearer("tok-a")).json()
    assert namespaces(body) == {"team-a", "batch"}
    assert [(e["namespace"], e["workload"]["name"]) for e in body["errors"]] == [("batch", "broken"),
                                                                                 ("batch", "orphan")]
    b = api.get("/podgroups", headers=bearer("tok-b")).json()
    assert namespaces(b) == {"team-b"} and b["errors"] == []
    # a caller who may list PodGroups nowhere gets 403 naming the right, not an empty list
    r = api.get("/podgroups", headers=bearer("tok-none"))
    assert r.status_code == 403 and r.json()["detail"] == (
        'forbidden: user "nobody" cannot list resource "podgroups" in API group "scheduling.run.ai" at the '
        "cluster scope, nor in any namespace this grouper has workloads in; pass ?namespace= to ask about one "
        "namespace")
    assert r.json()["errors"] == [{"verb": "list", "group": "scheduling.run.ai", "resource": "podgroups",
                                   "namespace": None, "name": None}]
    # pagination over the filtered list: a tenant never sees another namespace on a later page either
    page = api.get("/podgroups", headers=bearer("tok-a"), params={"limit": 1}).json()
    seen = namespaces(page)
    while page["continue"]:
        page = api.get("/podgroups", headers=bearer("tok-a"), params={"limit": 1, "continue": page["continue"]}).json()
        seen |= namespaces(page)
    assert seen == {"team-a", "batch"}
    # asked about one namespace: that namespace's review decides, 403 names verb, resource and namespace
    assert namespaces(api.get("/podgroups", headers=bearer("tok-a"), params={"namespace": "team-a"}).json()) \
        == {"team-a"}
    r = api.get("/podgroups", headers=bearer("tok-a"), params={"namespace": "team-b"})
    assert r.status_code == 403
    assert r.json()["detail"] == ('forbidden: user "tenant-a" cannot list resource "podgroups" in API group '
                                  '"scheduling.run.ai" in the namespace "team-b": no RBAC rule')
    assert r.json()["errors"] == [{"verb": "list", "group": "scheduling.run.ai", "resource": "podgroups",
                                   "namespace": "team-b", "name": None}]


def test_single_objects_need_get_in_their_namespace(api: TestClient) -> None:
    from .test_api_app import PYTORCH_PG, SPARK_PG

    assert api.get("/podgroups/{}/{}".format(*PYTORCH_PG), headers=bearer("tok-a")).status_code == 200
    r = api.get("/podgroups/{}/{}".format(*SPARK_PG), headers=bearer("tok-a"))
    assert r.status_code == 403 and f'named "{SPARK_PG[1]}"' in r.json()["detail"]
    # 403 before 404: a tenant cannot probe which objects exist elsewhere
    assert api.get("/podgroups/team-b/nope", headers=bearer("tok-a")).status_code == 403
    assert api.get("/podgroups/team-a/nope", headers=bearer("tok-a")).status_code == 404
    assert api.get("/pods/team-a/llama-finetune-master-0", headers=bearer("tok-a")).status_code in (200, 404)
    r = api.get("/pods/team-b/etl-driver", headers=bearer("tok-a"))
    assert r.status_code == 403 and 'cannot get resource "pods" named "etl-driver" in API group ""' \
        ' in the namespace "team-b"' in r.json()["detail"]
    assert api.get("/pods/team-b/etl-driver", headers=bearer("tok-admin")).status_code == 200
    assert api.get("/workloads/team-b/SparkApplication/etl", headers=bearer("tok-a")).status_code == 403
    assert api.get("/workloads/team-a/PyTorchJob/llama-finetune", headers=bearer("tok-a")).status_code == 200


def test_definitions_and_metrics_rights(api: TestClient) -> None:
    assert api.get("/definitions", headers=bearer("tok-admin")).status_code == 200
    r = api.get("/definitions", headers=bearer("tok-a"))
    assert r.status_code == 403 and 'cannot list resource "kartas" in API group "run.ai" at the cluster scope' \
        in r.json()["detail"]
    assert api.get("/metrics", headers=bearer("tok-scraper")).status_code == 200
    assert "podgrouper_" in api.get("/metrics", headers=bearer("tok-scraper")).text
    r = api.get("/metrics", headers=bearer("tok-a"))
    assert r.status_code == 403 and r.json()["detail"].startswith('forbidden: user "tenant-a" cannot get path "/metrics"')
    assert api.get("/podgroups", headers=bearer("tok-scraper")).status_code == 403  # metrics right only


def test_too_many_namespaces_to_review_asks_for_a_namespace(world_with_errors: World, server: FakeApiServer) -> None:
    access = KubeAccess(server, max_namespace_reviews=2)  # type: ignore[arg-type]
    with TestClient(create_app(world_with_errors.state, access=access)) as c:
        r = c.get("/podgroups", headers=bearer("tok-a"))
        assert r.status_code == 403 and "pass ?namespace=" in r.json()["detail"]
        assert c.get("/podgroups", headers=bearer("tok-a"), params={"namespace": "team-a"}).status_code == 200
        assert c.get("/podgroups", headers=bearer("tok-admin")).status_code == 200  # cluster-wide right


# ----------------------------------------------------------------------------------------------- caching


def test_reviews_are_cached_and_shared(api: TestClient, server: FakeApiServer) -> None:
    for _ in range(5):
        assert api.get("/podgroups", headers=bearer("tok-a")).status_code == 200
    assert server.reviews(TOKEN_REVIEWS) == 1
    # one cluster-wide review plus one per namespace with data (default, team-a, team-b, batch), once
    assert server.reviews(ACCESS_REVIEWS) == 5
    spec = next(b["spec"] for p, b in server.calls if p == ACCESS_REVIEWS)
    assert spec == {"user": "tenant-a", "uid": "uid-tenant-a", "groups": ["system:authenticated"],
                    "extra": {"authentication.kubernetes.io/pod-name": ["p-1"]},
                    "resourceAttributes": {"verb": "list", "group": "scheduling.run.ai", "resource": "podgroups"}}


async def test_expiry_and_single_flight() -> None:
    now = [0.0]
    server = FakeApiServer(USERS, set(GRANTS))
    access = KubeAccess(server, ttl=10, negative_ttl=2)  # type: ignore[arg-type]
    access.tokens = TTLCache(16, clock=lambda: now[0])
    access.decisions = TTLCache(16, clock=lambda: now[0])
    server.delay = 0.05
    users = await asyncio.gather(*(access.authenticate("Bearer tok-a") for _ in range(20)))
    assert {u.username for u in users} == {"tenant-a"} and server.reviews(TOKEN_REVIEWS) == 1
    attrs = ResourceAttributes("list", *PG, "team-b")
    assert await access.allowed(users[0], attrs) == (False, "no RBAC rule")
    now[0] = 1.9
    await access.allowed(users[0], attrs)
    assert server.reviews(ACCESS_REVIEWS) == 1  # denied: cached for negative_ttl
    now[0] = 2.1
    server.grants.add(("tenant-a", "list", *PG, "team-b"))  # a RoleBinding was added
    assert (await access.allowed(users[0], attrs))[0] is True and server.reviews(ACCESS_REVIEWS) == 2
    now[0] = 9.5
    await access.authenticate("Bearer tok-a")
    assert server.reviews(TOKEN_REVIEWS) == 1  # allowed / authenticated: cached for ttl
    now[0] = 10.5
    server.users.pop("tok-a")  # token revoked: noticed once the entry expires
    with pytest.raises(Exception, match="invalid bearer token"):
        await access.authenticate("Bearer tok-a")


def test_cache_is_bounded_and_failures_are_not_cached() -> None:
    cache: TTLCache[int] = TTLCache(3)
    for i in range(10):
        cache.put(i, i, 60)
    assert len(cache) == 3 and cache.get(9) == (True, 9) and cache.get(0) == (False, None)

    async def run() -> None:
        calls = 0

        async def boom() -> int:
            nonlocal calls
            calls += 1
            raise RuntimeError("down")

        for _ in range(2):
            with pytest.raises(RuntimeError):
                await cache.get_or_load("k", boom, lambda v: 60)
        assert calls == 2

    asyncio.run(run())


# ----------------------------------------------------------------------------------------------- failures


def test_api_server_trouble_is_503_not_a_hang(world_with_errors: World, server: FakeApiServer) -> None:
    access = KubeAccess(server, timeout=0.2)  # type: ignore[arg-type]
    with TestClient(create_app(world_with_errors.state, access=access)) as c:
        server.delay = 5
        r = c.get("/podgroups", headers=bearer("tok-a"))
        assert r.status_code == 503 and "did not answer within 0.2s" in r.json()["detail"]
        server.delay = 0
        server.fail = ApiError(403, "Forbidden", "cannot create tokenreviews")
        r = c.get("/podgroups", headers=bearer("tok-a"))
        assert r.status_code == 503 and r.json()["detail"] == \
            "cannot review the bearer token: the API server answered 403 Forbidden"
        server.fail = None
        assert c.get("/podgroups", headers=bearer("tok-a")).status_code == 200  # failures were not cached
        assert c.get("/healthz").status_code == 200


def test_random_token_flood_hits_its_address_budget(world_with_errors: World, server: FakeApiServer) -> None:
    access = KubeAccess(server, source_reviews_per_second=0.001, source_review_burst=5)  # type: ignore[arg-type]
    with TestClient(create_app(world_with_errors.state, access=access)) as c:
        codes = [c.get("/podgroups", headers=bearer(f"random-{i}")).status_code for i in range(8)]
        assert codes == [401] * 5 + [429] * 3
        assert server.reviews(TOKEN_REVIEWS) == 5
        # a token that failed is refused without another review
        assert c.get("/podgroups", headers=bearer("random-0")).status_code == 401
        assert server.reviews(TOKEN_REVIEWS) == 5 and access.refused == {"source": 3}


def test_not_connected_yet_is_503(world_with_errors: World) -> None:
    with TestClient(create_app(world_with_errors.state, access=KubeAccess(lambda: None))) as c:
        r = c.get("/podgroups", headers=bearer("tok-a"))
        assert r.status_code == 503 and "still connecting" in r.json()["detail"]
        assert c.get("/readyz").status_code in (200, 503) and c.get("/healthz").status_code == 200


# ----------------------------------------------------------------------------------------------- modes


def test_modes_from_settings(tmp_path: Any, caplog: pytest.LogCaptureFixture) -> None:
    assert RunSettings().http_auth == "kubernetes" and auth_mode(RunSettings()) == "kubernetes"
    assert isinstance(api_access(RunSettings(), lambda: None), KubeAccess)
    with caplog.at_level("WARNING"):
        open_access = api_access(RunSettings(http_auth="none"), lambda: None)
    assert type(open_access) is ApiAccess and "authentication is OFF" in caplog.text
    token = tmp_path / "t"
    token.write_text("s3cret")
    caplog.clear()
    with caplog.at_level("WARNING"):
        static = api_access(RunSettings(http_auth="none", http_auth_token_file=str(token)), lambda: None)
    assert isinstance(static, StaticTokenAccess) and "despite --http-auth=none" in caplog.text


def test_http_auth_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse

    from grouper.runtime.settings import add_flags

    p = argparse.ArgumentParser()
    add_flags(p, environ={})
    assert p.parse_args([]).http_auth == "kubernetes"
    assert p.parse_args(["--http-auth", "None"]).http_auth == "none"
    with pytest.raises(SystemExit):
        p.parse_args(["--http-auth", "open"])
    p2 = argparse.ArgumentParser()
    add_flags(p2, environ={"GROUPER_HTTP_AUTH": "none"})
    assert p2.parse_args([]).http_auth == "none"


def test_audiences_limit_which_tokens_count(world_with_errors: World, server: FakeApiServer) -> None:
    access = api_access(RunSettings(http_auth_audiences="kai-pod-grouper, other"), lambda: server)  # type: ignore[arg-type,return-value]
    assert isinstance(access, KubeAccess) and access.audiences == ("kai-pod-grouper", "other")
    with TestClient(create_app(world_with_errors.state, access=access)) as c:
        assert c.get("/openapi.json", headers=bearer("tok-aud")).status_code == 200
        assert c.get("/openapi.json", headers=bearer("tok-admin")).status_code == 401  # API server audience
    assert server.calls[0][1]["spec"]["audiences"] == ["kai-pod-grouper", "other"]
    # a review that does not say which of our audiences matched is not trusted
    from grouper.api.auth import _user

    review = {"status": {"authenticated": True, "user": {"username": "u"}}}
    assert _user(review) == UserInfo("u") and _user(review, ("kai-pod-grouper",)) is None


async def test_attribute_descriptions() -> None:
    assert NonResourceAttributes("get", "/metrics").review() == {
        "nonResourceAttributes": {"verb": "get", "path": "/metrics"}}
    assert ResourceAttributes("get", "", "pods", "a", "p").describe() == \
        'get resource "pods" named "p" in API group "" in the namespace "a"'
    assert await ApiAccess().allowed(UserInfo("x"), ResourceAttributes("get", "", "pods")) == (True, "")
