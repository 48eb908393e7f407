"""Which Kubernetes permission each route of the HTTP API needs: one declarative table, enforced in one place.

Every route the app serves must have an entry in :data:`ROUTES` (keyed by the route's path template);
``create_app`` refuses to build an app with a route missing from it, and the guard denies any request whose
route it cannot find there. An endpoint may check more (``/workloads/...?live=true`` also needs ``get`` on
the workload's own kind) but never less.

The kinds of permission:

- :class:`Public` — no token (the kubelet probes ``/healthz`` and ``/readyz``, and the web view's page shell
  and static files under ``/ui/``, which hold no cluster data);
- :class:`Authenticated` — a valid token, no particular right (``/docs``, ``/openapi.json``: the schema holds
  no cluster data; like the API server's own ``/openapi`` which ``system:discovery`` opens to every
  authenticated user). Anonymous callers get 401: the schema names the version, which helps nobody outside;
- :class:`NonResource` — a non-resource URL (``get /metrics``);
- :class:`Resource` — a resource request: its namespace and name taken from the path parameters
  ``namespace`` / ``name`` when ``in_namespace`` / ``named``, else cluster-scoped;
- :class:`NamespaceList` — a list over namespaces: with ``?namespace=X`` the right in X decides (403 naming
  it), without, the right cluster-wide shows everything, else the caller sees exactly the namespaces where
  it holds the right, and a caller holding it in none gets 403 naming the missing right (never an empty 200).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from grouper.api.auth import NonResourceAttributes, ResourceAttributes


@dataclass(frozen=True)
class Public:
    pass


@dataclass(frozen=True)
class Authenticated:
    pass


@dataclass(frozen=True)
class NonResource:
    verb: str
    path: str

    def attributes(self) -> NonResourceAttributes:
        return NonResourceAttributes(self.verb, self.path)


@dataclass(frozen=True)
class Resource:
    verb: str
    group: str
    resource: str
    in_namespace: bool = False
    named: bool = False

    def attributes(self, path_params: Mapping[str, str]) -> ResourceAttributes:
        ns = str(path_params.get("namespace", "")) if self.in_namespace else ""
        name = str(path_params.get("name", "")) if self.named else ""
        return ResourceAttributes(self.verb, self.group, self.resource, ns, name)


@dataclass(frozen=True)
class NamespaceList:
    verb: str
    group: str
    resource: str

    def attributes(self, namespace: str = "") -> ResourceAttributes:
        return ResourceAttributes(self.verb, self.group, self.resource, namespace)


Permission = Public | Authenticated | NonResource | Resource | NamespaceList

PODGROUPS = ("scheduling.run.ai", "podgroups")
PUBLIC = Public()
AUTHENTICATED = Authenticated()

# Path template -> permission. /workloads counts the same right as /podgroups (``list podgroups``): its rows
# are what the grouper made of the PodGroups it manages, and one right for both keeps the two lists showing
# the same namespaces; the workload's own kind varies per row and is only checked for ``?live=true`` reads.
ROUTES: Mapping[str, Permission] = {
    "/healthz": PUBLIC,
    "/readyz": PUBLIC,
    "/docs": AUTHENTICATED,
    "/openapi.json": AUTHENTICATED,
    "/metrics": NonResource("get", "/metrics"),
    "/podgroups": NamespaceList("list", *PODGROUPS),
    "/podgroups/{namespace}/{name}": Resource("get", *PODGROUPS, in_namespace=True, named=True),
    "/pods/{namespace}/{name}": Resource("get", "", "pods", in_namespace=True, named=True),
    "/workloads": NamespaceList("list", *PODGROUPS),
    "/workloads/{namespace}/{kind}/{name}": Resource("get", *PODGROUPS, in_namespace=True),
    "/definitions": Resource("list", "run.ai", "kartas"),
    # The web view (grouper.api.ui): its page shell and static files hold no cluster data (a browser's
    # navigation cannot carry a token, so they are public); every fragment holding data needs exactly what
    # its JSON twin needs.
    "/ui": PUBLIC,
    "/ui/": PUBLIC,
    "/ui/static/app.js": PUBLIC,
    "/ui/static/ui.css": PUBLIC,
    "/ui/static/icon.svg": PUBLIC,
    "/ui/fragments/workloads": NamespaceList("list", *PODGROUPS),  # = /workloads
    "/ui/fragments/workloads/{namespace}/{kind}/{name}": Resource("get", *PODGROUPS, in_namespace=True),
    "/ui/fragments/definitions": Resource("list", "run.ai", "kartas"),  # = /definitions
    "/ui/fragments/errors": NamespaceList("list", *PODGROUPS),  # = /podgroups, whose `errors` it shows
}

# Each fragment of the web view and the JSON route whose permission it must have (tests check they agree).
UI_TWINS: Mapping[str, str] = {
    "/ui/fragments/workloads": "/workloads",
    "/ui/fragments/workloads/{namespace}/{kind}/{name}": "/workloads/{namespace}/{kind}/{name}",
    "/ui/fragments/definitions": "/definitions",
    "/ui/fragments/errors": "/podgroups",
}

OPEN_PATHS = frozenset(path for path, p in ROUTES.items() if isinstance(p, Public))


def undeclared(paths: Iterable[str], table: Mapping[str, Permission] = ROUTES) -> list[str]:
    """The route paths that have no permission in ``table``."""
    return sorted({p for p in paths if p not in table})


__all__ = [
    "AUTHENTICATED",
    "OPEN_PATHS",
    "PODGROUPS",
    "PUBLIC",
    "ROUTES",
    "UI_TWINS",
    "Authenticated",
    "NamespaceList",
    "NonResource",
    "Permission",
    "Public",
    "Resource",
    "undeclared",
]
