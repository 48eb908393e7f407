"""The FastAPI application factory. One port serves health, metrics and the API.

``grouper run --http-bind-address`` (default ``127.0.0.1:8080``, loopback only; the chart binds the pod's
``0.0.0.0:<service.port>``) serves this app with uvicorn
on the controller's asyncio loop. Every endpoint is ``async`` and only reads in-memory state, so it never
races the controller and never waits on the API server — except ``/workloads/...?live=true``, which reads
that one workload from the API server.

- ``GET /healthz`` / ``GET /readyz`` — liveness / readiness with each check named (503 when failing).
- ``GET /metrics`` — Prometheus text format, OpenMetrics when the ``Accept`` header asks for it.
- ``GET /podgroups`` — managed PodGroups, filtered and paginated, plus ``errors``: workloads that failed to
  group (no PodGroup); ``GET /podgroups/{ns}/{name}`` — one in full.
- ``GET /pods/{ns}/{name}`` — one pod's decision record (what ``grouper explain --server`` prints).
- ``GET /workloads`` — one summary row per workload (kind, phase, components, GPUs).
- ``GET /workloads/{ns}/{kind}/{name}`` — the describe tree of one workload.
- ``GET /definitions`` — loaded Karta definitions with their validation errors.
- ``GET /docs``, ``GET /openapi.json`` — the schema.
- ``GET /ui/`` — the read-only web view (:mod:`grouper.api.ui`): a data-free page shell whose script fetches
  HTML fragments (``/ui/fragments/...``) with the person's bearer token, each guarded like its JSON twin.

Read-only: GET (and HEAD) only, anything else is 405. Who may read what: each route's permission is
declared in :data:`grouper.api.permissions.ROUTES` and checked by one guard before the endpoint runs (an app
with a route missing from the table is not built); ``access`` (an :class:`grouper.api.auth.ApiAccess`;
``grouper run`` passes TokenReview + SubjectAccessReview, see :mod:`grouper.api.auth`) answers the checks:
every path except ``/healthz`` and ``/readyz`` needs a bearer token (401), and each route the Kubernetes
permission the table names (403 naming it). ``/podgroups`` and ``/workloads`` show only the namespaces where
the caller may ``list podgroups`` (everything with the right cluster-wide; 403 when none). Without ``access``
the app is open, or guarded by one static token when ``AppState.auth_token_file`` /
``settings.http_auth_token_file`` is set.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import FastAPI, HTTPException, Query, Request
from fastapi import Path as PathParam
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client.exposition import choose_encoder
from starlette.datastructures import Headers, QueryParams
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Receive, Scope, Send

from grouper import __version__
from grouper.api import health
from grouper.api.auth import (
    ANONYMOUS,
    ApiAccess,
    Attributes,
    AuthError,
    ResourceAttributes,
    StaticTokenAccess,
    UserInfo,
)
from grouper.api.listing import visible_podgroups
from grouper.api.models import (
    DefinitionList,
    ErrorResponse,
    HealthResponse,
    PodDecision,
    PodGroupDetail,
    PodGroupList,
    WorkloadDescribe,
    WorkloadList,
)
from grouper.api.pagination import TokenError, decode_token, encode_token, query_fingerprint
from grouper.api.permissions import (
    AUTHENTICATED,
    ROUTES,
    NamespaceList,
    NonResource,
    Permission,
    Public,
    Resource,
    undeclared,
)
from grouper.api.selectors import SelectorError, parse_selector
from grouper.api.state import AppState, HealthSnapshot, StateReader
from grouper.api.ui import add_ui
from grouper.api.views import ListFilters, Views
from grouper.api.workload import cached_workload, describe, workload_kinds

log = logging.getLogger(__name__)

ALLOWED_METHODS = ("GET", "HEAD")
LIVE_TIMEOUT = 10.0

_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorResponse, "description": "Missing or invalid bearer token"},
    403: {"model": ErrorResponse, "description": "The caller lacks the Kubernetes permission this endpoint needs"},
    405: {"model": ErrorResponse, "description": "Only GET is allowed"},
    422: {"model": ErrorResponse, "description": "A query or path parameter is malformed"},
}
_NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"model": ErrorResponse, "description": "Unknown object"}}


def _error(status: int, detail: str, errors: list[dict[str, Any]] | None = None,
           headers: dict[str, str] | None = None) -> JSONResponse:
    body = ErrorResponse(detail=detail, errors=errors).model_dump(exclude_none=True)
    return JSONResponse(body, status_code=status, headers=headers)


def _validation_errors(exc: RequestValidationError) -> tuple[str, list[dict[str, Any]]]:
    errors = []
    parts = []
    for e in exc.errors():
        loc = [str(x) for x in e.get("loc", ())]
        where = f"{loc[0]} parameter {'.'.join(loc[1:])}" if len(loc) > 1 else ".".join(loc)
        msg = str(e.get("msg", "invalid"))
        parts.append(f"{where}: {msg}")
        errors.append({"loc": loc, "msg": msg, "type": str(e.get("type", ""))})
    return "; ".join(parts) or "invalid request", jsonable_encoder(errors)


@dataclass(frozen=True)
class Visible:
    """The namespaces a namespace-narrowed list may show this caller: ``namespaces`` None means all."""

    namespaces: frozenset[str] | None

    def allows(self, namespace: str) -> bool:
        return self.namespaces is None or namespace in self.namespaces


_SHOW_NOTHING = Visible(frozenset())


class _Guard:
    """Read-only methods, then each route's permission from :data:`grouper.api.permissions.ROUTES`: the
    bearer token (all routes but the probes'), then the Kubernetes right the table names. The caller and,
    for namespace-narrowed lists, the namespaces it may see are left in the request's state. A path no route
    serves still needs a valid token (then 404); a route missing from the table is refused (fail closed).
    Plain ASGI: Starlette's ``BaseHTTPMiddleware`` (``@app.middleware``) runs each request through a task
    group and memory streams, ~6% of the grouper's CPU under the benchmark's 20 probes a second
    (``docs/perf-journal.md``)."""

    def __init__(self, app: ASGIApp, *, access: ApiAccess, guarded: bool, routes: Callable[[], list[BaseRoute]],
                 namespaces: Callable[[], Iterable[str]]) -> None:
        self.app, self.access, self.guarded = app, access, guarded
        self.routes, self.namespaces = routes, namespaces

    def _route(self, scope: Scope) -> tuple[str | None, dict[str, Any]]:
        for route in self.routes():
            match, child = route.matches(scope)
            if match != Match.NONE:
                return str(getattr(route, "path", "")), dict(child.get("path_params") or {})
        return None, {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method = scope["method"]
        if method not in ALLOWED_METHODS:
            response = _error(405, f"method {method} not allowed: this API is read-only (GET)",
                              headers={"Allow": ", ".join(ALLOWED_METHODS)})
            await response(scope, receive, send)
            return
        template, params = self._route(scope)
        permission = AUTHENTICATED if template is None else ROUTES.get(template)
        try:
            if permission is None:  # create_app refuses such apps; never serve one unguarded
                raise AuthError(403, f"forbidden: route {template} declares no permission")
            state = scope.setdefault("state", {})
            state["visible"] = await self._authorize(scope, permission, params)
        except AuthError as e:
            await _error(e.status, e.detail, e.errors, headers=e.headers)(scope, receive, send)
            return
        await self.app(scope, receive, send)

    async def _authorize(self, scope: Scope, permission: Permission, params: dict[str, Any]) -> Visible:
        if isinstance(permission, Public) or not self.guarded:
            return Visible(None)
        client = scope.get("client")
        user = await self.access.authenticate(Headers(scope=scope).get("authorization"),
                                              source=str(client[0]) if client else "")
        scope["state"]["user"] = user
        if isinstance(permission, NonResource):
            await self.access.require(user, permission.attributes())
        elif isinstance(permission, Resource):
            await self.access.require(user, permission.attributes(params))
        elif isinstance(permission, NamespaceList):
            namespace = QueryParams(scope.get("query_string", b"")).get("namespace") or ""
            if namespace:
                await self.access.require(user, permission.attributes(namespace))
                return Visible(frozenset({namespace}))
            attrs = permission.attributes()
            readable = await self.access.allowed_namespaces(
                user, attrs.verb, attrs.group, attrs.resource, self.namespaces())
            if readable is None:
                return Visible(None)
            if not readable:  # nothing at all to show: say which right is missing, not an empty 200
                raise AuthError(
                    403,
                    f'forbidden: user "{user.username}" cannot {attrs.describe()}, nor in any namespace this '
                    f"grouper has workloads in; pass ?namespace= to ask about one namespace",
                    errors=[attrs.fields()])
            return Visible(frozenset(readable))
        return Visible(None)




def create_app(service_state: AppState, *, access: ApiAccess | None = None) -> FastAPI:
    """The application over ``service_state`` (read on every request, so it may still be filling in
    while the service starts).

    ``access`` authenticates and authorizes requests; None keeps the embedder's old default: one static
    token when the state names a token file, else no authentication at all."""
    state = StateReader(service_state)
    if access is None:
        token_file = state.token_file()
        access = StaticTokenAccess(token_file) if token_file else ApiAccess()
    guarded = access.mode != "none"
    views = Views(state)
    app = FastAPI(
        swagger_ui_oauth2_redirect_url=None,  # no OAuth2 here: one route less to guard
        title="kai-pod-grouper",
        version=__version__,
        description=(
            "Read-only view of a running pod grouper: health, metrics, the PodGroups it manages and why, "
            "workload describe trees and Karta definitions. GET only."
            + (" Bearer token required except on /healthz and /readyz." if guarded else "")
        ),
        docs_url="/docs",
        redoc_url=None,
        responses=_ERRORS,
    )
    app.state.grouper = service_state

    def snapshot() -> HealthSnapshot:
        return state.health()

    def caller(request: Request) -> UserInfo:
        user = getattr(request.state, "user", None)
        return user if isinstance(user, UserInfo) else ANONYMOUS

    def visible(request: Request) -> Visible:
        """What the guard decided this caller may see of a namespace-narrowed list (nothing if it did not)."""
        decided = getattr(request.state, "visible", None)
        return decided if isinstance(decided, Visible) else _SHOW_NOTHING

    async def need(request: Request, attrs: Attributes) -> None:
        """403 unless the caller may do ``attrs`` (as an HTTPException, so the error handler shapes it)."""
        try:
            await access.require(caller(request), attrs)
        except AuthError as e:
            raise _AuthHTTPError(e) from None

    app.add_middleware(_Guard, access=access, guarded=guarded, routes=lambda: app.router.routes,
                       namespaces=lambda: state.decision_source().namespaces())

    @app.exception_handler(RequestValidationError)
    async def on_validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        detail, errors = _validation_errors(exc)
        return _error(422, detail, errors)

    @app.exception_handler(StarletteHTTPException)
    async def on_http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        errors = exc.auth.errors if isinstance(exc, _AuthHTTPError) else None
        return _error(exc.status_code, str(exc.detail), errors, headers=getattr(exc, "headers", None))

    # -------------------------------------------------------------------------------------- health

    def _health(result: health.Health) -> JSONResponse:
        return JSONResponse(result.body(), status_code=result.http_status)

    health_responses: dict[int | str, dict[str, Any]] = {503: {"model": HealthResponse, "description": "Failing"}}

    @app.get("/healthz", response_model=HealthResponse, responses=health_responses, tags=["health"])
    async def healthz() -> JSONResponse:
        """Liveness: the event loop serves requests, nothing fatal happened and the workers make progress."""
        return _health(health.liveness(snapshot(), state.limits))

    @app.get("/readyz", response_model=HealthResponse, responses=health_responses, tags=["health"])
    async def readyz() -> JSONResponse:
        """Readiness: pod and PodGroup informers synced, the API server reached recently; role in the body."""
        return _health(health.readiness(snapshot(), state.limits))

    # -------------------------------------------------------------------------------------- metrics

    @app.get(
        "/metrics",
        response_class=Response,
        tags=["metrics"],
        responses={
            200: {
                "description": "Prometheus text format (OpenMetrics when asked for in Accept)",
                "content": {
                    "text/plain": {"schema": {"type": "string"}},
                    "application/openmetrics-text": {"schema": {"type": "string"}},
                },
            }
        },
    )
    async def metrics(request: Request) -> Response:
        """All ``podgrouper_*`` metrics of this process (its own registry, no process defaults)."""
        encoder, content_type = choose_encoder(request.headers.get("accept") or "")
        return Response(encoder(state.registry()), media_type=content_type)

    # -------------------------------------------------------------------------------------- podgroups

    @app.get("/podgroups", response_model=PodGroupList, tags=["podgroups"])
    async def list_podgroups(
        request: Request,
        namespace: Annotated[str | None, Query(description="Only this namespace")] = None,
        kind: Annotated[
            str | None, Query(description="Workload kind: Kind, Kind.group or Kind.version.group (case-insensitive)")
        ] = None,
        plugin: Annotated[str | None, Query(description="Grouping plugin name, e.g. jobset, karta, default")] = None,
        queue: Annotated[str | None, Query(description="spec.queue of the PodGroup")] = None,
        label_selector: Annotated[
            str | None,
            Query(alias="labelSelector", description="On the PodGroup's labels: k=v,k2!=v,k3 in (a,b),k4,!k5"),
        ] = None,
        limit: Annotated[int, Query(ge=1, le=1000, description="Page size")] = 500,
        continue_: Annotated[
            str | None, Query(alias="continue", description="Token from the previous page's `continue`")
        ] = None,
    ) -> PodGroupList:
        """The PodGroups this grouper manages, ordered by namespace and name.

        ``errors`` lists the workloads that failed to group and so have no PodGroup here (namespace and kind
        filters only; not paginated, at most 100).
        """
        try:
            selector = parse_selector(label_selector)
        except SelectorError as e:
            raise HTTPException(422, f"query parameter labelSelector: {e}") from e
        fingerprint = query_fingerprint(
            {"namespace": namespace, "kind": kind, "plugin": plugin, "queue": queue, "labelSelector": label_selector}
        )
        after: tuple[str, str] | None = None
        if continue_:
            try:
                after = decode_token(continue_, fingerprint)
            except TokenError as e:
                raise HTTPException(422, f"query parameter continue: {e}") from e
        filters = ListFilters(namespace, kind, plugin, queue, selector)
        matches, errors = visible_podgroups(views, filters, visible(request).namespaces)
        if after is not None:
            matches = [m for m in matches if (m.namespace, m.name) > after]
        page = matches[:limit]  # only the page is rendered
        objects = state.object_source()
        items = [views.summary(objects, rec) for rec in page]
        token = None
        if len(matches) > limit and items:
            token = encode_token((items[-1].namespace, items[-1].name), fingerprint)
        return PodGroupList.model_validate({"items": items, "errors": errors, "continue": token})

    @app.get("/podgroups/{namespace}/{name}", response_model=PodGroupDetail, responses=_NOT_FOUND,
             tags=["podgroups"])
    async def get_podgroup(
        request: Request, namespace: Annotated[str, PathParam()], name: Annotated[str, PathParam()]
    ) -> PodGroupDetail:
        """One PodGroup as decided, its sub-groups and pods, and the decision record explaining it."""
        detail = views.podgroup_detail(namespace, name)
        if detail is None:
            raise HTTPException(404, f"PodGroup {namespace}/{name} is not managed by this grouper")
        return detail

    @app.get("/pods/{namespace}/{name}", response_model=PodDecision, responses=_NOT_FOUND, tags=["pods"])
    async def get_pod(
        request: Request, namespace: Annotated[str, PathParam()], name: Annotated[str, PathParam()]
    ) -> PodDecision:
        """One pod's decision record: its PodGroup and sub-group, the plugin, owners and provenance, last error."""
        rec = views.pod_decision(namespace, name)
        if rec is None:
            raise HTTPException(404, f"Pod {namespace}/{name} has no decision (not handled by this grouper)")
        return rec

    # -------------------------------------------------------------------------------------- workloads

    @app.get("/workloads", response_model=WorkloadList, tags=["workloads"])
    async def list_workloads(
        request: Request,
        namespace: Annotated[str | None, Query(description="Only this namespace")] = None,
    ) -> WorkloadList:
        """Every workload this grouper grouped pods for: kind, phase, components (``leader(1), worker(2)``)
        and requested GPUs, from the caches (what ``grouper get workloads --server`` prints). Like
        ``/podgroups``: only the namespaces where the caller may ``list podgroups``."""
        shown = visible(request)
        items = [w for w in views.workload_list(namespace or None) if shown.allows(w.namespace)]
        return WorkloadList(items=items, count=len(items))

    @app.get("/workloads/{namespace}/{kind}/{name}", response_model=WorkloadDescribe, tags=["workloads"],
             responses={**_NOT_FOUND, 502: {"model": ErrorResponse, "description": "Live read failed"}})
    async def get_workload(
        request: Request,
        namespace: Annotated[str, PathParam()],
        kind: Annotated[str, PathParam(description="Kind, Kind.group or Kind.version.group")],
        name: Annotated[str, PathParam()],
        live: Annotated[bool, Query(description="Read the workload from the API server, not the cache")] = False,
    ) -> WorkloadDescribe:
        """The describe tree of one workload (components, instances, pods, PodGroups) from the caches."""
        candidates = workload_kinds(views, namespace, kind)
        if not candidates:
            raise HTTPException(404, f"no workload kind {kind!r} is known to this grouper in namespace {namespace}")
        workload = cached_workload(state, candidates, namespace, name)
        source = "cache"
        reader = state.live
        if live and reader is not None:
            for av, k in candidates:
                if access.checks_rights:  # the caller's own right to read this object from the API server
                    resource = await _resource_of(state, av, k)
                    if resource is None:
                        continue
                    await need(request, ResourceAttributes("get", resource[0], resource[1], namespace, name))
                try:
                    fresh = await asyncio.wait_for(reader(av, k, namespace, name), LIVE_TIMEOUT)
                except Exception as e:  # the API server is the one failing: say so
                    raise HTTPException(502, f"live read of {k} {namespace}/{name} failed: {e}") from e
                if fresh is not None:
                    workload, source = fresh, "live"
                    break
        if workload is None:
            hint = "" if live else " (add ?live=true to read it from the API server)"
            raise HTTPException(404, f"{candidates[0][1]} {namespace}/{name} is not in the grouper's cache{hint}")
        return describe(views, state, workload, source).body

    # -------------------------------------------------------------------------------------- definitions

    @app.get("/definitions", response_model=DefinitionList, tags=["definitions"])
    async def list_definitions(request: Request) -> DefinitionList:
        """Loaded Karta definitions: origin, root GVK, validity and validation errors."""
        return views.definitions()

    add_ui(app, views, state, lambda request: visible(request).namespaces)

    missing = undeclared(str(getattr(r, "path", "")) for r in app.router.routes)
    if missing:  # every route is authorized by construction: one without a declared permission is a bug
        raise RuntimeError(f"routes without a permission in grouper.api.permissions.ROUTES: {', '.join(missing)}")
    return app


class _AuthHTTPError(StarletteHTTPException):
    def __init__(self, auth: AuthError) -> None:
        super().__init__(auth.status, auth.detail, headers=auth.headers)
        self.auth = auth


async def _resource_of(state: StateReader, api_version: str, kind: str) -> tuple[str, str] | None:
    """(group, plural) of a kind through the controller's discovery; None when unknown or not served."""
    controller = state.controller
    if controller is None:
        return None
    try:
        return await asyncio.wait_for(controller.resource_of(api_version, kind), LIVE_TIMEOUT)
    except Exception:  # discovery failing: the object cannot be read live either
        return None


__all__ = ["create_app"]
