"""Reproduction: 1,000 concurrent requests with random bearer tokens once used up the one review budget shared
by everyone (20/s, burst 100), and right after, a tenant with a new token, the scraper on /metrics and a
tenant whose cached review had expired all got 429. Now failed authentication spends only the flooding
address's budget: known-valid tokens and new tokens from other addresses are reviewed and served. The clock
is injected and frozen, so no budget refills during the test (the real API server's version is in
tests/integration/test_api_flood.py)."""

from __future__ import annotations

import asyncio
import hashlib
import secrets

import httpx

from grouper.api.app import create_app
from grouper.api.auth import ACCESS_REVIEWS, TOKEN_REVIEWS, AuthError, KubeAccess

from .fixtures import build_world
from .test_api_auth import GRANTS, USERS, FakeApiServer, bearer

FLOODER, TENANT_B, SCRAPER, TENANT_A = "10.0.0.66", "10.0.0.7", "10.0.0.9", "10.0.0.5"


def client(app: object, address: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app, client=(address, 40000)),  # type: ignore[arg-type]
                             base_url="http://grouper")


async def test_a_random_token_flood_locks_out_nobody_else() -> None:
    now = [0.0]
    server = FakeApiServer(USERS, set(GRANTS))
    access = KubeAccess(server, clock=lambda: now[0])  # type: ignore[arg-type]
    app = create_app(build_world().state, access=access)
    async with client(app, TENANT_A) as a, client(app, SCRAPER) as scraper, client(app, FLOODER) as flood, \
            client(app, TENANT_B) as b:
        # before: tenant-a and the scraper are served, their tokens now known valid
        assert (await a.get("/podgroups", headers=bearer("tok-a"))).status_code == 200
        assert (await scraper.get("/metrics", headers=bearer("tok-scraper"))).status_code == 200
        now[0] = 30.0  # every cached review expired; the clock stays here from now on (no refill)

        tokens = [secrets.token_urlsafe(32) for _ in range(1000)]
        codes = await asyncio.gather(*(flood.get("/podgroups", headers=bearer(t)) for t in tokens))
        counts = {s: [r.status_code for r in codes].count(s) for s in (401, 429)}
        assert counts == {401: 10, 429: 990}  # the flooding address's own burst, then 429
        assert server.reviews(TOKEN_REVIEWS) == 2 + 10

        # after: a new tenant token from another address, the scraper and tenant-a (re-reviewed) are served
        fresh = await b.get("/podgroups", headers=bearer("tok-b"))
        assert fresh.status_code == 200 and {i["namespace"] for i in fresh.json()["items"]} == {"team-b"}
        assert (await scraper.get("/metrics", headers=bearer("tok-scraper"))).status_code == 200
        assert (await a.get("/podgroups", headers=bearer("tok-a"))).status_code == 200
        assert server.reviews(TOKEN_REVIEWS) == 2 + 10 + 3
        # a known-valid token is re-reviewed even from the flooding address
        assert (await flood.get("/metrics", headers=bearer("tok-scraper"))).status_code == 200
        # the flood's reviewed tokens are refused without another review; a new token from the flooding
        # address waits for that address's budget (nothing tells it from a random one but a review)
        reviewed = next(t for t, r in zip(tokens, codes, strict=True) if r.status_code == 401)
        assert (await flood.get("/podgroups", headers=bearer(reviewed))).status_code == 401
        r = await flood.get("/podgroups", headers=bearer("tok-admin"))
        assert r.status_code == 429 and r.headers["retry-after"] == "1"
        assert "new bearer tokens from 10.0.0.66" in r.json()["detail"]
        assert server.reviews(TOKEN_REVIEWS) == 2 + 10 + 3
        assert server.reviews(ACCESS_REVIEWS) > 0 and access.refused["source"] == 991
        now[0] = 45.0  # the address's budget refilled: its new valid token is served
        assert (await flood.get("/podgroups", headers=bearer("tok-admin"))).status_code == 200


async def test_bad_tokens_are_refused_without_a_review_for_a_while() -> None:
    now = [0.0]
    server = FakeApiServer(USERS, set(GRANTS))
    access = KubeAccess(server, clock=lambda: now[0], bad_token_ttl=60)  # type: ignore[arg-type]
    for _ in range(5):
        assert (await _status(access, "Bearer wrong")) == 401
    assert server.reviews(TOKEN_REVIEWS) == 1
    now[0] = 61.0
    assert (await _status(access, "Bearer wrong")) == 401 and server.reviews(TOKEN_REVIEWS) == 2


async def test_new_tokens_share_a_global_budget_and_the_address_map_is_bounded() -> None:
    now = [0.0]
    server = FakeApiServer(USERS, set(GRANTS))
    access = KubeAccess(server, clock=lambda: now[0], new_token_burst=5, max_sources=3)  # type: ignore[arg-type]
    codes = [await _status(access, f"Bearer random-{i}", source=f"10.1.0.{i}") for i in range(8)]
    assert codes == [401] * 5 + [429] * 3 and access.refused["new"] == 3
    assert len(access._sources) == 3  # only the three most recent addresses are kept
    # a known-valid token is not held to the budget of new tokens
    access.known.put(hashlib.sha256(b"tok-a").digest(), True, 60)
    assert await _status(access, "Bearer tok-a", source="10.1.0.1") == 200


async def _status(access: KubeAccess, authorization: str, source: str = "10.0.0.1") -> int:
    try:
        await access.authenticate(authorization, source=source)
    except AuthError as e:
        return e.status
    return 200
