"""The shape of a decoded YAML/JSON document: nesting depth and alias expansion, measured safely.

A YAML alias makes the decoder return the *same* Python object at every place it is used, so a
441-byte document of nested aliases (a "billion laughs") decodes quickly into a few dozen objects
that, walked as a tree, hold 10^9 values. Every reader of such a document (our input checks, the
grouping core, ``json.dumps``) walks the tree and never ends. ``measure`` walks the object *graph*
once, with an identity memo (each container is looked at once, however often it is shared), and
refuses a document whose tree is deeper than a bound, expands through shared nodes to more than a
bound, or contains itself (a recursive alias, ``&a [*a]``). A document without aliases (all JSON)
has no shared nodes, so only the depth bound applies to it.
"""

from __future__ import annotations

from typing import Any

# Values that shared nodes may add when expanded: far above any real use of anchors in a manifest
# (a shared env list or label set used a few times) and far below what takes noticeable time to walk.
MAX_ALIAS_EXPANSION = 100_000
MAX_FIELD_SHOWN = 200  # a field path in a message (keys of a hostile document can be long)


class ShapeError(ValueError):
    """``field`` is the path of the node at fault (``spec.a6``; empty for the document itself)."""

    def __init__(self, message: str, field: str) -> None:
        self.message = message
        self.field = field if len(field) <= MAX_FIELD_SHOWN else field[: MAX_FIELD_SHOWN - 3] + "..."
        super().__init__(f"field {self.field}: {message}" if field else message)


def measure(value: Any, *, max_depth: int, max_expansion: int = MAX_ALIAS_EXPANSION) -> int:
    """The depth of ``value`` (1 for a scalar); raises ``ShapeError`` when it nests deeper than
    ``max_depth``, contains itself, or its shared containers expand to more than ``max_expansion``
    values beyond the distinct ones. Iterative, linear in the number of distinct containers."""
    done: dict[int, tuple[int, int]] = {}  # id -> (height, expanded size) of a finished container
    open_ids: set[int] = set()
    expansion = 0
    # frames: [container, path, child iterator, height so far, size so far]
    stack: list[list[Any]] = []

    def enter(v: Any, path: str) -> tuple[int, int] | None:
        """(height, size) of ``v`` when known now; else push a frame for it and return None."""
        nonlocal expansion
        if not isinstance(v, dict | list):
            if len(stack) + 1 > max_depth:
                raise ShapeError(f"nests deeper than {max_depth} levels", path)
            return 1, 1
        key = id(v)
        known = done.get(key)
        if known is not None:
            if len(stack) + known[0] > max_depth:
                raise ShapeError(f"nests deeper than {max_depth} levels", path)
            expansion += known[1]
            if expansion > max_expansion:
                raise ShapeError(
                    f"YAML aliases expand the document by more than {max_expansion} values", path
                )
            return known
        if key in open_ids:
            raise ShapeError("a YAML alias refers to a node that contains it (the document has no end)", path)
        if len(stack) + 1 > max_depth:
            raise ShapeError(f"nests deeper than {max_depth} levels", path)
        open_ids.add(key)
        items = (
            ((f"{path}.{k}" if path else str(k)), x) for k, x in v.items()
        ) if isinstance(v, dict) else ((f"{path}[{i}]", x) for i, x in enumerate(v))
        stack.append([v, path, iter(items), 1, 1])
        return None

    first = enter(value, "")
    if first is not None:
        return first[0]
    while True:
        frame = stack[-1]
        child = next(frame[2], None)
        if child is not None:
            got = enter(child[1], child[0])
            if got is not None:
                frame[3] = max(frame[3], got[0] + 1)
                frame[4] += got[1]
            continue
        stack.pop()
        key = id(frame[0])
        open_ids.discard(key)
        done[key] = (frame[3], frame[4])
        if not stack:
            return int(frame[3])
        parent = stack[-1]
        parent[3] = max(parent[3], frame[3] + 1)
        parent[4] += frame[4]
