"""The web view's routes: a data-free page shell and its static files (public: they hold no cluster data),
and the HTML fragments the shell's script fetches with the person's bearer token. Each fragment route is
declared in :data:`grouper.api.permissions.ROUTES` with exactly the permission of its JSON twin, and is built
by the same view functions, so the web view shows nobody anything the JSON API would not."""

from __future__ import annotations

from collections.abc import Callable, Set
from functools import cache
from importlib import resources
from typing import Annotated

from fastapi import FastAPI, HTTPException, Query
from fastapi import Path as PathParam
from fastapi.requests import Request
from fastapi.responses import RedirectResponse, Response

from grouper.api.listing import visible_podgroups
from grouper.api.state import StateReader
from grouper.api.ui import pages
from grouper.api.ui.html import Safe
from grouper.api.views import ListFilters, Views, worst_gang_state
from grouper.api.workload import cached_workload, describe, workload_kinds

# No inline script or style, nothing from elsewhere, no framing; the one place the script inserts a fragment
# is a Trusted Types policy of its own (app.js), so no other code path can turn a string into markup.
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'; "
       "require-trusted-types-for 'script'; trusted-types grouper-fragment")
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}
STATIC = {  # file name -> media type: the only files served, read from the package
    "app.js": "text/javascript; charset=utf-8",
    "ui.css": "text/css; charset=utf-8",
    "icon.svg": "image/svg+xml",
}
UI_PATHS = ("/ui", "/ui/", *(f"/ui/static/{name}" for name in STATIC))


@cache
def _asset(name: str) -> bytes:
    return (resources.files("grouper.api.ui") / "static" / name).read_bytes()


def _response(body: bytes | str, media_type: str, *, private: bool) -> Response:
    headers = {**SECURITY_HEADERS, "Cache-Control": "no-store" if private else "no-cache"}
    if private:  # a fragment holds cluster data read with the caller's token: never cached, never shared
        headers["Vary"] = "Authorization"
    return Response(body, media_type=media_type, headers=headers)


def _fragment(html: Safe) -> Response:
    return _response(str(html), "text/html; charset=utf-8", private=True)


def add_ui(app: FastAPI, views: Views, state: StateReader,
           readable: Callable[[Request], Set[str] | None]) -> None:
    """Register the web view on ``app``. ``readable``: the namespaces the guard lets this caller list
    (None: all), as for ``/podgroups`` and ``/workloads``."""

    @app.get("/ui", include_in_schema=False)
    async def ui_root() -> Response:
        # relative, so a proxy's path prefix is kept (the shell's own links are relative too)
        return RedirectResponse("ui/", status_code=307, headers=SECURITY_HEADERS)

    @app.get("/ui/", include_in_schema=False)
    async def ui_shell() -> Response:
        return _response(_asset("index.html"), "text/html; charset=utf-8", private=False)

    def static_route(name: str, media_type: str) -> None:
        async def serve() -> Response:
            return _response(_asset(name), media_type, private=False)

        app.add_api_route(f"/ui/static/{name}", serve, methods=["GET"], include_in_schema=False,
                          name=f"ui_static_{name}")

    for name, media_type in STATIC.items():
        static_route(name, media_type)

    @app.get("/ui/fragments/workloads", include_in_schema=False)
    async def ui_workloads(
        request: Request, namespace: Annotated[str | None, Query()] = None
    ) -> Response:
        shown = readable(request)
        items = [w for w in views.workload_list(namespace or None) if shown is None or w.namespace in shown]
        matches, _ = visible_podgroups(views, ListFilters(namespace or None), shown)
        queues: dict[tuple[str, str, str], set[str]] = {}
        for rec in matches:  # the PodGroups' queues, for workloads without a gang state yet
            desired = rec.desired()
            queue = (desired.get("spec") or {}).get("queue") if isinstance(desired, dict) else None
            if queue:
                wl = views.workload_ref(rec, desired)
                queues.setdefault((rec.namespace, wl.kind, wl.name), set()).add(str(queue))
        return _fragment(pages.workloads(items, queues))

    @app.get("/ui/fragments/workloads/{namespace}/{kind}/{name}", include_in_schema=False)
    async def ui_workload(
        namespace: Annotated[str, PathParam()], kind: Annotated[str, PathParam()], name: Annotated[str, PathParam()]
    ) -> Response:
        candidates = workload_kinds(views, namespace, kind)
        workload = cached_workload(state, candidates, namespace, name) if candidates else None
        if workload is None:
            raise HTTPException(404, f"workload {kind} {namespace}/{name} is not in the grouper's cache")
        described = describe(views, state, workload, "cache")
        member = views.member_group(namespace, workload)
        if member is not None:  # its gang is its WorkloadGroup's (the group owns the rendered PodGroup)
            return _fragment(pages.workload(described, [], member[0].gangState, member))
        groups = [d for d in (views.podgroup_detail(namespace, pg) for pg in described.body.podGroups)
                  if d is not None]
        gang_state = worst_gang_state(g.gang for g in groups if g.gang is not None)
        return _fragment(pages.workload(described, groups, gang_state))

    @app.get("/ui/fragments/definitions", include_in_schema=False)
    async def ui_definitions() -> Response:
        return _fragment(pages.definitions(views.definitions()))

    @app.get("/ui/fragments/errors", include_in_schema=False)
    async def ui_errors(request: Request, namespace: Annotated[str | None, Query()] = None) -> Response:
        _, errors = visible_podgroups(views, ListFilters(namespace or None), readable(request))
        return _fragment(pages.errors(errors))


__all__ = ["CSP", "SECURITY_HEADERS", "STATIC", "UI_PATHS", "add_ui"]
