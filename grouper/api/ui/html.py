"""Escaping by construction: every HTML fragment of the web view is built with :func:`el`, which escapes
every string it is given (text and attribute values) unless it is already :class:`Safe` (made by :func:`el`
itself). No template string ever has data pasted into it, so a workload named ``<img src=x onerror=...>``
is text on the page, never markup."""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Mapping
from urllib.parse import quote

_NAME = re.compile(r"^[a-z][a-z0-9-]*$")


class Safe(str):
    """Markup made here: inserted as is."""

    __slots__ = ()


def esc(value: object) -> Safe:
    return value if isinstance(value, Safe) else Safe(html.escape(str(value), quote=True))


def _children(items: Iterable[object]) -> Iterable[str]:
    for c in items:
        if c is None or c is False:
            continue
        if isinstance(c, str | int | float):
            yield esc(c)
        else:
            yield from _children(c)  # type: ignore[arg-type]  # nested lists of children


def el(tag: str, attrs: Mapping[str, object] | None = None, *children: object) -> Safe:
    """``<tag attr="...">children</tag>``; attributes that are None or False are left out, True is bare."""
    if not _NAME.match(tag):
        raise ValueError(f"bad tag name {tag!r}")
    parts = [tag]
    for key, value in (attrs or {}).items():
        if not _NAME.match(key):  # names come from code, never from data: refuse anything odd
            raise ValueError(f"bad attribute name {key!r}")
        if value is None or value is False:
            continue
        parts.append(key if value is True else f'{key}="{esc(value)}"')
    return Safe(f"<{' '.join(parts)}>{''.join(_children(children))}</{tag}>")


def join(items: Iterable[object]) -> Safe:
    return Safe("".join(_children(items)))


def path_part(value: str) -> str:
    """One path segment of a link, percent-encoded (a name with ``/`` or ``?`` stays one segment)."""
    return quote(value, safe="")


__all__ = ["Safe", "el", "esc", "join", "path_part"]
