"""Who may read what from the HTTP API: authentication and authorization delegated to the API server.

``--http-auth=kubernetes`` (the default) works like controller-runtime's
``filters.WithAuthenticationAndAuthorization`` and kube-rbac-proxy:

- the bearer token is checked with a **TokenReview** (``authentication.k8s.io/v1``): missing or invalid
  token → 401;
- each request is authorized with a **SubjectAccessReview** (``authorization.k8s.io/v1``) for the user the
  review returned, on the Kubernetes resource the endpoint shows (see the table in docs/operations.md): e.g.
  ``/pods/{ns}/{name}`` needs ``get pods`` in ``ns``, ``/metrics`` the non-resource URL ``get /metrics``;
  denied → 403 naming the verb, resource and namespace;
- list endpoints filter: a caller allowed to ``list podgroups`` cluster-wide sees everything, any other
  caller only the namespaces where a per-namespace review allows it (at most ``max_namespace_reviews``
  namespaces are reviewed per request; beyond that the caller must pass ``?namespace=``).

Answers are cached briefly (authenticated tokens and allowed reviews ``ttl`` seconds, denials
``negative_ttl``, failed tokens ``bad_token_ttl``), the caches are bounded, identical concurrent reviews share
one request, and reviews have their own small rate budgets (429 past them, see :class:`KubeAccess`) so a flood
of random tokens can neither use up the controller's API request budget nor lock out authenticated callers. With ``audiences`` (``--http-auth-audiences``) only tokens bound to one of them are accepted
(like kube-rbac-proxy's ``--auth-token-audiences``): such tokens are no good against the API server itself. A review that does not answer within ``timeout`` seconds gives 503; nothing here blocks
the event loop.

``--http-auth-token-file`` keeps the older static mode (one shared token, full access);
``--http-auth=none`` turns authentication off (local development; logged as a warning).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from grouper.api.auth_cache import TTLCache
from grouper.api.security import BearerAuth
from grouper.kube.transport import ApiError, KubeClient

log = logging.getLogger(__name__)

AuthMode = Literal["kubernetes", "token", "none"]
AUTH_MODES: tuple[str, ...] = ("kubernetes", "none")

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
MAX_TOKEN_BYTES = 16 * 1024  # longer bearer tokens are rejected without a review


class AuthError(Exception):
    """A request that cannot go on: ``status`` 401, 403, 429 or 503 with a sentence saying why."""

    def __init__(self, status: int, detail: str, *, headers: dict[str, str] | None = None,
                 errors: list[dict[str, Any]] | None = None) -> None:
        super().__init__(detail)
        self.status, self.detail, self.headers, self.errors = status, detail, headers, errors


def unauthenticated(detail: str) -> AuthError:
    return AuthError(401, detail, headers={"WWW-Authenticate": "Bearer"})


@dataclass(frozen=True)
class UserInfo:
    """The caller as the TokenReview named it (``extra`` as sorted (key, values) pairs, so it hashes)."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


ANONYMOUS = UserInfo("system:anonymous", groups=("system:unauthenticated",))


@dataclass(frozen=True)
class ResourceAttributes:
    """A resource request as RBAC sees it; ``namespace`` "" means cluster-wide (all namespaces)."""

    verb: str
    group: str
    resource: str
    namespace: str = ""
    name: str = ""

    def describe(self) -> str:
        """In the API server's words: ``list resource "podgroups" in API group "scheduling.run.ai" in the
        namespace "a"``."""
        text = f'{self.verb} resource "{self.resource}" in API group "{self.group}"'
        if self.name:
            text = f'{self.verb} resource "{self.resource}" named "{self.name}" in API group "{self.group}"'
        return text + (f' in the namespace "{self.namespace}"' if self.namespace else " at the cluster scope")

    def review(self) -> dict[str, Any]:
        attrs = {"verb": self.verb, "group": self.group, "resource": self.resource}
        if self.namespace:
            attrs["namespace"] = self.namespace
        if self.name:
            attrs["name"] = self.name
        return {"resourceAttributes": attrs}

    def fields(self) -> dict[str, Any]:
        return {"verb": self.verb, "group": self.group, "resource": self.resource,
                "namespace": self.namespace or None, "name": self.name or None}


@dataclass(frozen=True)
class NonResourceAttributes:
    """A non-resource URL request (``get /metrics``), as in RBAC's ``nonResourceURLs``."""

    verb: str
    path: str

    def describe(self) -> str:
        return f'{self.verb} path "{self.path}"'

    def review(self) -> dict[str, Any]:
        return {"nonResourceAttributes": {"verb": self.verb, "path": self.path}}

    def fields(self) -> dict[str, Any]:
        return {"verb": self.verb, "path": self.path}


Attributes = ResourceAttributes | NonResourceAttributes
METRICS = NonResourceAttributes("get", "/metrics")


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, or None."""
    if not authorization:
        return None
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token


class ApiAccess:
    """Authentication and authorization of API requests. This base class lets everyone do everything
    (``--http-auth=none``); subclasses restrict it."""

    mode: AuthMode = "none"
    checks_rights = False  # False: every authenticated caller may do everything (no per-request review)

    async def authenticate(self, authorization: str | None, *, source: str = "") -> UserInfo:
        """The caller of a request with this ``Authorization`` header from client address ``source``;
        raises :class:`AuthError` (401/...)."""
        return ANONYMOUS

    async def allowed(self, user: UserInfo, attrs: Attributes) -> tuple[bool, str]:
        """(allowed, the authorizer's reason)."""
        return True, ""

    async def require(self, user: UserInfo, attrs: Attributes) -> None:
        """Raise a 403 :class:`AuthError` naming the verb, resource and namespace unless allowed."""
        ok, reason = await self.allowed(user, attrs)
        if not ok:
            detail = f'forbidden: user "{user.username}" cannot {attrs.describe()}'
            raise AuthError(403, detail + (f": {reason}" if reason else ""), errors=[attrs.fields()])

    async def allowed_namespaces(
        self, user: UserInfo, verb: str, group: str, resource: str, namespaces: Iterable[str]
    ) -> set[str] | None:
        """None when ``user`` may ``verb`` the resource cluster-wide, else the subset of ``namespaces`` it
        may. Raises a 403 when there are too many namespaces to review one by one."""
        return None


class StaticTokenAccess(ApiAccess):
    """``--http-auth-token-file``: one shared token (re-read when the file changes), full access."""

    mode: AuthMode = "token"

    def __init__(self, token_file: str) -> None:
        self.bearer = BearerAuth(token_file)

    async def authenticate(self, authorization: str | None, *, source: str = "") -> UserInfo:
        if not self.bearer.check(authorization):
            raise unauthenticated("missing or wrong bearer token")
        return UserInfo("kai-pod-grouper:static-token")


class KubeClientSource(Protocol):
    def __call__(self) -> KubeClient | None: ...


class _Budget:
    """Non-blocking token bucket: ``take()`` is False when the review budget is used up."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate, self.burst, self._clock = rate, float(burst), clock
        self._tokens, self._stamp = float(burst), clock()

    def take(self) -> bool:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + max(0.0, now - self._stamp) * self.rate)
        self._stamp = now
        if self._tokens < 1:
            return False
        self._tokens -= 1
        return True


class _SourceBudgets:
    """One :class:`_Budget` per client address, at most ``max_sources`` of them (the least recently used is
    dropped; a dropped source starts again with a full bucket, and all of them together are still held to
    the global budget of new tokens)."""

    def __init__(self, rate: float, burst: int, max_sources: int, clock: Callable[[], float]) -> None:
        self.rate, self.burst, self.max_sources, self._clock = rate, burst, max(1, max_sources), clock
        self._budgets: OrderedDict[str, _Budget] = OrderedDict()

    def __len__(self) -> int:
        return len(self._budgets)

    def take(self, source: str) -> bool:
        budget = self._budgets.get(source)
        if budget is None:
            budget = self._budgets[source] = _Budget(self.rate, self.burst, self._clock)
            while len(self._budgets) > self.max_sources:
                self._budgets.popitem(last=False)
        self._budgets.move_to_end(source)
        return budget.take()


class KubeAccess(ApiAccess):
    """TokenReview + SubjectAccessReview through the grouper's own :class:`KubeClient`.

    ``client`` is the client or a callable returning it (None while the service is still starting: 503).

    Reviews are sent from separate budgets, so that failed authentication never uses up what authenticated
    callers need (a flood of random tokens once locked everyone out of one shared budget):

    - a token that failed its review is refused without one for ``bad_token_ttl`` (kept apart from the good
      tokens, so a flood of bad ones never evicts them);
    - a token known valid (reviewed valid within ``known_ttl``) whose cached answer expired is reviewed again
      from the ``known`` budget (``reviews_per_second`` / ``review_burst``), which unknown tokens never touch;
    - a token never seen before is reviewed only while both its client address's budget
      (``source_reviews_per_second`` / ``source_review_burst``, at most ``max_sources`` addresses kept) and
      the budget of all new tokens (``new_token_reviews_per_second`` / ``new_token_burst``) allow it, so one
      flooding address spends its own small budget and leaves the rest to every other address;
    - SubjectAccessReviews are only sent for authenticated callers, from their own ``authorization`` budget
      (``reviews_per_second`` / ``review_burst``).

    Past a budget the request gets 429 with ``Retry-After``. A new token from the very address that floods
    waits for that address's budget to refill: nothing but the API server tells a new valid token from a
    random one.
    """

    mode: AuthMode = "kubernetes"
    checks_rights = True

    def __init__(
        self,
        client: KubeClient | KubeClientSource,
        *,
        timeout: float = 5.0,
        ttl: float = 10.0,
        negative_ttl: float = 2.0,
        max_entries: int = 4096,
        reviews_per_second: float = 20.0,
        review_burst: int = 100,
        new_token_reviews_per_second: float = 10.0,
        new_token_burst: int = 50,
        source_reviews_per_second: float = 1.0,
        source_review_burst: int = 10,
        max_sources: int = 1024,
        bad_token_ttl: float = 60.0,
        known_ttl: float = 3600.0,
        max_in_flight: int = 16,
        max_namespace_reviews: int = 64,
        audiences: tuple[str, ...] = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client: KubeClientSource = client if callable(client) else (lambda: client)
        self.timeout, self.ttl, self.negative_ttl = timeout, ttl, negative_ttl
        self.bad_token_ttl, self.known_ttl = bad_token_ttl, known_ttl
        self.max_namespace_reviews = max_namespace_reviews
        self.audiences = tuple(a for a in audiences if a)
        self.tokens: TTLCache[UserInfo | None] = TTLCache(max_entries, clock=clock)  # token hash -> user
        self.bad_tokens: TTLCache[bool] = TTLCache(max_entries, clock=clock)  # token hash: review failed
        self.known: TTLCache[bool] = TTLCache(max_entries, clock=clock)  # token hash: reviewed valid lately
        self.decisions: TTLCache[tuple[bool, str]] = TTLCache(max_entries, clock=clock)
        self._known_budget = _Budget(reviews_per_second, review_burst, clock)
        self._new_budget = _Budget(new_token_reviews_per_second, new_token_burst, clock)
        self._sources = _SourceBudgets(source_reviews_per_second, source_review_burst, max_sources, clock)
        self._access_budget = _Budget(reviews_per_second, review_burst, clock)
        self._in_flight = asyncio.Semaphore(max_in_flight)
        self.reviews_sent = 0
        self.refused: Counter[str] = Counter()  # 429s by budget: known, new, source, authorization

    # ------------------------------------------------------------------ the API server

    def _admit(self, budget: str, ok: bool, why: str) -> None:
        """429 unless ``ok`` (the budget ``budget`` allowed one more review)."""
        if not ok:
            self.refused[budget] += 1
            raise AuthError(429, f"too many {why}; retry later", headers={"Retry-After": "1"})

    async def _post(self, path: str, body: dict[str, Any], what: str) -> dict[str, Any]:
        client = self._client()
        if client is None:
            raise AuthError(503, f"cannot {what} yet: the grouper is still connecting to the API server",
                            headers={"Retry-After": "1"})

        async def send() -> Any:
            async with self._in_flight:
                self.reviews_sent += 1
                return await client.request("POST", path, body=body, timeout=self.timeout)

        try:
            answer = await asyncio.wait_for(send(), self.timeout)
        except TimeoutError as e:
            raise AuthError(503, f"cannot {what}: the API server did not answer within {self.timeout:g}s",
                            headers={"Retry-After": "1"}) from e
        except ApiError as e:
            log.warning("cannot %s: %s", what, e)
            answer_text = f"answered {e.status} {e.reason}".rstrip() if e.status else "could not be reached"
            raise AuthError(503, f"cannot {what}: the API server {answer_text}",
                            headers={"Retry-After": "1"}) from e
        if not isinstance(answer, dict):
            raise AuthError(503, f"cannot {what}: unexpected answer from the API server")
        return answer

    # ------------------------------------------------------------------ authentication

    async def authenticate(self, authorization: str | None, *, source: str = "") -> UserInfo:
        token = bearer_token(authorization)
        if token is None:
            raise unauthenticated("missing bearer token (Authorization: Bearer <token>)")
        if len(token) > MAX_TOKEN_BYTES:
            raise unauthenticated("invalid bearer token")
        key = hashlib.sha256(token.encode(errors="surrogateescape")).digest()  # never keep the token itself
        if self.bad_tokens.get(key)[0]:
            raise unauthenticated("invalid bearer token")

        async def review() -> UserInfo | None:
            if self.known.get(key)[0]:
                self._admit("known", self._known_budget.take(), "reviews of known tokens")
            else:  # a new token: its address's budget first, so a flooding address stops at its own
                self._admit("source", self._sources.take(source),
                            f"reviews of new bearer tokens from {source or 'this address'}")
                self._admit("new", self._new_budget.take(), "reviews of new bearer tokens")
            spec: dict[str, Any] = {"token": token}
            if self.audiences:
                spec["audiences"] = list(self.audiences)
            body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec}
            return _user(await self._post(TOKEN_REVIEWS, body, "review the bearer token"), self.audiences)

        user = await self.tokens.get_or_load(key, review, lambda u: self.ttl if u else 0)
        if user is None:
            self.bad_tokens.put(key, True, self.bad_token_ttl)
            self.known.pop(key)
            raise unauthenticated("invalid bearer token")
        self.known.put(key, True, self.known_ttl)
        return user

    # ------------------------------------------------------------------ authorization

    async def allowed(self, user: UserInfo, attrs: Attributes) -> tuple[bool, str]:
        async def review() -> tuple[bool, str]:
            self._admit("authorization", self._access_budget.take(), "authorization reviews")
            spec: dict[str, Any] = {"user": user.username, "groups": list(user.groups), **attrs.review()}
            if user.uid:
                spec["uid"] = user.uid
            if user.extra:
                spec["extra"] = {k: list(v) for k, v in user.extra}
            body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
            status = (await self._post(ACCESS_REVIEWS, body, "authorize the request")).get("status") or {}
            reason = str(status.get("reason") or status.get("evaluationError") or "")
            return bool(status.get("allowed")) and not status.get("denied"), reason

        return await self.decisions.get_or_load(
            (user, attrs), review, lambda d: self.ttl if d[0] else self.negative_ttl
        )

    async def allowed_namespaces(
        self, user: UserInfo, verb: str, group: str, resource: str, namespaces: Iterable[str]
    ) -> set[str] | None:
        everywhere = ResourceAttributes(verb, group, resource)
        if (await self.allowed(user, everywhere))[0]:
            return None
        wanted = sorted(set(namespaces) - {""})
        if len(wanted) > self.max_namespace_reviews:
            raise AuthError(
                403,
                f'forbidden: user "{user.username}" cannot {everywhere.describe()}; pass ?namespace= to list '
                f"one namespace (reviewing {len(wanted)} namespaces one by one is over the limit of "
                f"{self.max_namespace_reviews})",
                errors=[everywhere.fields()],
            )
        checks = await asyncio.gather(
            *(self.allowed(user, ResourceAttributes(verb, group, resource, ns)) for ns in wanted)
        )
        return {ns for ns, (ok, _) in zip(wanted, checks, strict=True) if ok}


def _user(review: dict[str, Any], audiences: tuple[str, ...] = ()) -> UserInfo | None:
    status = review.get("status") or {}
    if not status.get("authenticated"):
        return None
    if audiences and not set(audiences) & {str(a) for a in status.get("audiences") or ()}:
        return None  # valid, but not for us (the API server must say which of our audiences it matched)
    u = status.get("user") or {}
    name = str(u.get("username") or "")
    if not name:
        return None
    raw_extra = u.get("extra")
    extra: dict[str, Any] = raw_extra if isinstance(raw_extra, dict) else {}
    return UserInfo(
        username=name,
        uid=str(u.get("uid") or ""),
        groups=tuple(str(g) for g in u.get("groups") or ()),
        extra=tuple(sorted((str(k), tuple(str(x) for x in (v or ()))) for k, v in extra.items())),
    )


def auth_mode(settings: Any) -> AuthMode:
    """The effective mode: a token file selects the static mode, else ``--http-auth``."""
    if getattr(settings, "http_auth_token_file", ""):
        return "token"
    return "none" if getattr(settings, "http_auth", "kubernetes") == "none" else "kubernetes"


def api_access(settings: Any, client: KubeClient | KubeClientSource) -> ApiAccess:
    """The :class:`ApiAccess` ``grouper run`` uses for these settings; logs a warning for the weak modes."""
    mode = auth_mode(settings)
    if mode == "token":
        if getattr(settings, "http_auth", "kubernetes") == "none":
            log.warning("--http-auth-token-file is set: the API requires that token despite --http-auth=none")
        log.warning("HTTP API in static-token mode (--http-auth-token-file): one shared token unlocks every "
                    "endpoint; prefer the default --http-auth=kubernetes (TokenReview + SubjectAccessReview)")
        return StaticTokenAccess(settings.http_auth_token_file)
    if mode == "none":
        log.warning("HTTP API authentication is OFF (--http-auth=none): anyone who can reach %s reads every "
                    "PodGroup, decision, definition and metric; use it for local development only",
                    getattr(settings, "http_bind_address", "the HTTP port"))
        return ApiAccess()
    audiences = tuple(a.strip() for a in str(getattr(settings, "http_auth_audiences", "") or "").split(","))
    return KubeAccess(client, audiences=tuple(a for a in audiences if a))


__all__ = [
    "ANONYMOUS",
    "AUTH_MODES",
    "METRICS",
    "ApiAccess",
    "Attributes",
    "AuthError",
    "AuthMode",
    "KubeAccess",
    "NonResourceAttributes",
    "ResourceAttributes",
    "StaticTokenAccess",
    "UserInfo",
    "api_access",
    "auth_mode",
    "bearer_token",
]
