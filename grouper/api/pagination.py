"""Opaque ``continue`` tokens for list endpoints: the last returned key, bound to the query's filters.

A token is URL-safe base64 of a small JSON document. It is not a secret (it holds a namespace and a
name), only opaque: clients pass it back unchanged. A token used with other filters is rejected, as
the Kubernetes API does, so a page never silently mixes two queries.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Mapping


class TokenError(ValueError):
    """The ``continue`` token is malformed or belongs to another query."""


def query_fingerprint(filters: Mapping[str, str | None]) -> str:
    canonical = json.dumps(sorted((k, v) for k, v in filters.items() if v is not None), separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def encode_token(after: tuple[str, str], fingerprint: str) -> str:
    doc = json.dumps({"v": 1, "q": fingerprint, "after": list(after)}, separators=(",", ":"))
    return base64.urlsafe_b64encode(doc.encode()).decode().rstrip("=")


def decode_token(token: str, fingerprint: str) -> tuple[str, str]:
    """The key after which the next page starts. Raises :class:`TokenError`."""
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        doc = json.loads(raw)
    except (binascii.Error, ValueError, UnicodeDecodeError) as e:
        raise TokenError("continue token is malformed; pass back the token of the previous page unchanged") from e
    after = doc.get("after") if isinstance(doc, dict) else None
    if (
        not isinstance(doc, dict)
        or doc.get("v") != 1
        or not isinstance(after, list)
        or len(after) != 2
        or not all(isinstance(x, str) for x in after)
    ):
        raise TokenError("continue token is malformed; pass back the token of the previous page unchanged")
    if doc.get("q") != fingerprint:
        raise TokenError("continue token belongs to a query with other filters; repeat the same filters")
    return after[0], after[1]


__all__ = ["TokenError", "decode_token", "encode_token", "query_fingerprint"]
