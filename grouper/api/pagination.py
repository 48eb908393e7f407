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


# A token this module writes is ~100-400 characters and nests two levels (an object holding a list). Anything
# longer or deeper is refused before ``json.loads``, whose recursion on ``[[[[...`` 20,000 deep would raise
# RecursionError (a 500) and spend the event loop's time.
MAX_TOKEN_CHARS = 2048
MAX_DEPTH = 4
_MALFORMED = "continue token is malformed; pass back the token of the previous page unchanged"


def _nesting_depth(raw: bytes) -> int:
    """The deepest ``[``/``{`` nesting of a JSON text, brackets inside strings not counted; stops counting
    once past :data:`MAX_DEPTH`."""
    depth = deepest = 0
    in_string = escaped = False
    for byte in raw:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            deepest = max(deepest, depth)
            if deepest > MAX_DEPTH:
                break
        elif byte in (0x5D, 0x7D):  # ] }
            depth -= 1
    return deepest


def query_fingerprint(filters: Mapping[str, str | None]) -> str:
    canonical = json.dumps(sorted((k, v) for k, v in filters.items() if v is not None), separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def encode_token(after: tuple[str, str], fingerprint: str) -> str:
    doc = json.dumps({"v": 1, "q": fingerprint, "after": list(after)}, separators=(",", ":"))
    return base64.urlsafe_b64encode(doc.encode()).decode().rstrip("=")


def decode_token(token: str, fingerprint: str) -> tuple[str, str]:
    """The key after which the next page starts. Raises :class:`TokenError`."""
    if len(token) > MAX_TOKEN_CHARS:
        raise TokenError(f"{_MALFORMED} (longer than {MAX_TOKEN_CHARS} characters)")
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        if _nesting_depth(raw) > MAX_DEPTH:
            raise TokenError(f"{_MALFORMED} (nested deeper than {MAX_DEPTH} levels)")
        doc = json.loads(raw)
    except (binascii.Error, ValueError, UnicodeDecodeError, RecursionError) as e:
        if isinstance(e, TokenError):
            raise
        raise TokenError(_MALFORMED) from e
    after = doc.get("after") if isinstance(doc, dict) else None
    if (
        not isinstance(doc, dict)
        or doc.get("v") != 1
        or not isinstance(after, list)
        or len(after) != 2
        or not all(isinstance(x, str) for x in after)
    ):
        raise TokenError(_MALFORMED)
    if doc.get("q") != fingerprint:
        raise TokenError("continue token belongs to a query with other filters; repeat the same filters")
    return after[0], after[1]


__all__ = ["MAX_DEPTH", "MAX_TOKEN_CHARS", "TokenError", "decode_token", "encode_token", "query_fingerprint"]
