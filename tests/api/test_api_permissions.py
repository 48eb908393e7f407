"""Every route is authorized by construction: the app's routes are exactly the permission table's, a route
without a declared permission is refused, and each route answers a caller with its right and refuses (401 /
403, never another namespace's data) one without. Over the in-memory review server of test_api_auth.py (the
real API server's version is tests/integration/test_api_auth.py)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from grouper.api.app import create_app
from grouper.api.auth import KubeAccess
from grouper.api.permissions import ROUTES, UI_TWINS, Authenticated, NamespaceList, Public, undeclared
from grouper.api.ui.routes import UI_PATHS

from .fixtures import SPARK_NS, World, build_world
from .test_api_app import PYTORCH_PG, SPARK_PG
from .test_api_auth import GRANTS, USERS, FakeApiServer, bearer

PYTORCH_POD = ("team-a", "llama-finetune-master-0")


@pytest.fixture(scope="module")
def world() -> World:
    return build_world()


@pytest.fixture
def api(world: World) -> Iterator[TestClient]:
    access = KubeAccess(FakeApiServer(USERS, set(GRANTS)))  # type: ignore[arg-type]
    with TestClient(create_app(world.state, access=access)) as c:
        yield c


def route_paths(world: World) -> set[str]:
    return {str(getattr(r, "path", "")) for r in create_app(world.state).router.routes}


def test_every_route_of_the_app_declares_a_permission(world: World) -> None:
    paths = route_paths(world)
    assert undeclared(paths) == [], "routes without a permission in grouper.api.permissions.ROUTES"
    assert paths == set(ROUTES), "ROUTES names a path the app does not serve (stale entry)"
    # open: the probes, and the web view's data-free page shell and static files
    assert {p for p, perm in ROUTES.items() if isinstance(perm, Public)} == {"/healthz", "/readyz", *UI_PATHS}
    assert undeclared(["/healthz", "/new"]) == ["/new"]


def test_a_route_added_without_a_permission_is_refused(world: World) -> None:
    app = create_app(world.state, access=KubeAccess(FakeApiServer(USERS, set(GRANTS))))  # type: ignore[arg-type]

    @app.get("/secrets")
    async def secrets() -> dict[str, str]:
        return {"leak": "everything"}

    with TestClient(app) as c:  # refused before any review, to everyone
        for headers in ({}, bearer("tok-admin")):
            r = c.get("/secrets", headers=headers)
            assert r.status_code == 403 and r.json() == {"detail": "forbidden: route /secrets declares no permission"}


@dataclass(frozen=True)
class Case:
    """One route: a request a caller with the right may make (``allowed`` token) and one without (``denied``);
    ``foreign`` is text of another namespace that must never reach the denied caller."""

    route: str
    url: str
    allowed: str | None  # None: no token needed
    denied: str
    denied_status: int = 403
    params: dict[str, str] | None = None


CASES = [
    Case("/healthz", "/healthz", None, "", 200),  # public: even without a token
    Case("/readyz", "/readyz", None, "", 200),
    Case("/docs", "/docs", "tok-none", "not-a-token", 401),
    Case("/openapi.json", "/openapi.json", "tok-none", "not-a-token", 401),
    Case("/metrics", "/metrics", "tok-scraper", "tok-a"),
    Case("/podgroups", "/podgroups", "tok-a", "tok-none"),
    Case("/podgroups", "/podgroups", "tok-a", "tok-b", params={"namespace": "team-a"}),
    Case("/podgroups/{namespace}/{name}", "/podgroups/{}/{}".format(*PYTORCH_PG), "tok-a", "tok-b"),
    Case("/pods/{namespace}/{name}", "/pods/{}/{}".format(*PYTORCH_POD), "tok-a", "tok-b"),
    Case("/workloads", "/workloads", "tok-b", "tok-none"),
    Case("/workloads", "/workloads", "tok-a", "tok-b", params={"namespace": "team-a"}),
    Case("/workloads/{namespace}/{kind}/{name}", "/workloads/team-a/PyTorchJob/llama-finetune", "tok-a", "tok-b"),
    Case("/definitions", "/definitions", "tok-admin", "tok-a"),
    # the web view: the shell and its files need no token, every fragment is guarded like its JSON twin
    *(Case(p, p, None, "", 200) for p in UI_PATHS),
    Case("/ui/fragments/workloads", "/ui/fragments/workloads", "tok-b", "tok-none"),
    Case("/ui/fragments/workloads", "/ui/fragments/workloads", "tok-a", "tok-b", params={"namespace": "team-a"}),
    Case("/ui/fragments/workloads/{namespace}/{kind}/{name}", "/ui/fragments/workloads/team-a/PyTorchJob/llama-finetune",
         "tok-a", "tok-b"),
    Case("/ui/fragments/definitions", "/ui/fragments/definitions", "tok-admin", "tok-a"),
    Case("/ui/fragments/errors", "/ui/fragments/errors", "tok-a", "tok-none"),
    Case("/ui/fragments/errors", "/ui/fragments/errors", "tok-a", "tok-b", params={"namespace": "team-a"}),
]


def test_every_route_has_a_case() -> None:
    assert {c.route for c in CASES} == set(ROUTES)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.route}{'?' if c.params else ''}")
def test_route_with_and_without_the_right(api: TestClient, case: Case) -> None:
    headers = bearer(case.allowed) if case.allowed else {}
    ok = api.get(case.url, headers=headers, params=case.params)
    assert ok.status_code == 200, ok.text
    if case.denied_status == 200:  # public
        return
    no = api.get(case.url, headers=bearer(case.denied), params=case.params)
    assert no.status_code == case.denied_status, no.text
    body = no.json()
    assert set(body) <= {"detail", "errors"} and "items" not in body
    if case.denied_status == 403:
        perm = ROUTES[case.route]
        assert body["detail"].startswith("forbidden: user ") and body["errors"], body
        if not isinstance(perm, Authenticated):
            assert body["errors"][0]["verb"] in ("get", "list")


def rows(body: dict[str, Any]) -> set[str]:
    return {i["namespace"] for i in body["items"]}


def test_workloads_are_narrowed_like_podgroups(api: TestClient) -> None:
    """Reproduction: a caller without rights once listed every namespace's workloads (GET /workloads had no
    authorization at all)."""
    admin = api.get("/workloads", headers=bearer("tok-admin")).json()
    assert rows(admin) == {"default", "team-a", SPARK_NS}
    b = api.get("/workloads", headers=bearer("tok-b")).json()
    assert rows(b) == {SPARK_NS} and b["count"] == len(b["items"]) == 1
    a = api.get("/workloads", headers=bearer("tok-a")).json()
    assert rows(a) == {"team-a"}
    r = api.get("/workloads", headers=bearer("tok-none"))
    assert r.status_code == 403 and "items" not in r.json()
    assert 'cannot list resource "podgroups" in API group "scheduling.run.ai" at the cluster scope' \
        in r.json()["detail"]
    r = api.get("/workloads", headers=bearer("tok-b"), params={"namespace": "team-a"})
    assert r.status_code == 403 and r.json()["detail"] == (
        'forbidden: user "tenant-b" cannot list resource "podgroups" in API group "scheduling.run.ai" in the '
        'namespace "team-a": no RBAC rule')
    assert api.get("/workloads").status_code == 401


def test_denied_single_objects_say_nothing_of_another_namespace(api: TestClient) -> None:
    r = api.get("/podgroups/{}/{}".format(*SPARK_PG), headers=bearer("tok-a"))
    assert r.status_code == 403 and "etl" not in r.text.replace(SPARK_PG[1], "")
    # unknown and existing objects of a foreign namespace answer alike
    assert api.get(f"/podgroups/{SPARK_NS}/nope", headers=bearer("tok-a")).status_code == 403


def test_namespace_list_kind_is_the_same_right_for_both_lists() -> None:
    assert ROUTES["/workloads"] == ROUTES["/podgroups"] and isinstance(ROUTES["/podgroups"], NamespaceList)


def test_every_web_view_fragment_needs_what_its_json_twin_needs() -> None:
    fragments = {p for p in ROUTES if p.startswith("/ui/") and p not in UI_PATHS}
    assert fragments == set(UI_TWINS)
    for fragment, twin in UI_TWINS.items():
        assert ROUTES[fragment] == ROUTES[twin], (fragment, twin)
