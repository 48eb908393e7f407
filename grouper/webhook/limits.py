"""Bounds on what the webhook reads: a body size cap enforced while reading, and a nesting depth cap checked
on the raw bytes before any JSON parser runs.

Why 3 MiB: kube-apiserver refuses request bodies over 3 MiB (its default ``--max-request-bytes``), and etcd
stores objects up to 1.5 MiB; a pod CREATE review carries the pod once (``oldObject`` is null), so any
review of a pod the API server could store is far below 3 MiB. A larger body is answered 413 without being
read (the registration's ``failurePolicy: Ignore`` admits the pod unchanged; the reconciler groups it).

Why depth 100: a pod's JSON nests about 15 levels (managedFields' fieldsV1 included); 100 leaves room for
anything the API server accepts, and stays far below Python's recursion limit (1000), which the JSON
decoder and anything walking the result would otherwise hit (a RecursionError, answered 500 before).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

MAX_BODY_BYTES = 3 * 1024 * 1024
MAX_DEPTH = 100


class BodyTooLarge(Exception):
    """The request body is over the limit (answered 413, the rest left unread)."""


class TooDeep(ValueError):
    """The JSON nests deeper than the limit (answered 400)."""


def declared_length_error(content_length: str | None, limit: int = MAX_BODY_BYTES) -> str | None:
    """Why a declared Content-Length is refused before reading a byte, or None."""
    if content_length is None:
        return None
    try:
        n = int(content_length)
    except ValueError:
        return f"invalid Content-Length {content_length!r}"
    if n > limit:
        return f"request body of {n} bytes is over the webhook's limit of {limit} bytes"
    return None


async def read_limited(chunks: AsyncIterator[bytes], limit: int = MAX_BODY_BYTES) -> bytes:
    """Join ``chunks`` into the body, stopping (BodyTooLarge) as soon as more than ``limit`` bytes arrived:
    a body without a Content-Length (chunked) is never buffered past the limit."""
    buf = bytearray()
    async for chunk in chunks:
        buf += chunk
        if len(buf) > limit:
            raise BodyTooLarge(f"request body over the webhook's limit of {limit} bytes")
    return bytes(buf)


# a JSON string (escapes included) or one bracket: strings are skipped whole, so brackets inside them
# do not count; everything else (numbers, literals, punctuation) is not matched at all
_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')
_OPEN = frozenset(b"[{")


def check_depth(data: bytes, limit: int = MAX_DEPTH) -> None:
    """Raise TooDeep when the JSON in ``data`` nests more than ``limit`` arrays/objects. A scan of the raw
    bytes (no parsing): malformed JSON passes through to the parser, which reports it."""
    depth = 0
    for m in _TOKEN.finditer(data):
        c = data[m.start()]
        if c in _OPEN:
            depth += 1
            if depth > limit:
                raise TooDeep(f"JSON nested deeper than the webhook's limit of {limit} levels")
        elif c != 0x22:  # a closing bracket ('"' starts a skipped string)
            depth -= 1
