"""Keep the labels and annotations a PodGroup copies from its workload within the API server's limits.

A PodGroup carries the top owner's labels and annotations plus the grouper's own keys
(``kai.scheduler/top-owner-metadata``, ``user``, the node-pool label, labels a plugin fills in from the
defaults ConfigMap). A workload that is valid on its own can still make that copy invalid: the API
server limits **all annotations of an object to 256 KiB together** (``len(key) + len(value)`` in bytes,
apimachinery ``TotalAnnotationSizeLimitB`` = 262,144), and our own key pushes a workload just under the
limit over it; a label value filled in from elsewhere may break the label rules (at most 63 characters,
alphanumerics, ``-``, ``_``, ``.``, starting and ending with an alphanumeric). The API server then
rejects the PodGroup (422) and the workload is never grouped.

So what does not fit is **dropped, deterministically**, before anything is written:

- labels and annotations whose key is not a qualified name, and labels whose value is not a valid
  label value, are dropped (sorted by key);
- while the annotations exceed the total, the **largest** droppable annotation goes first (ties: the
  greater key first), so as few keys as possible are lost; the keys in ``keep`` (the grouper's own,
  small by construction) are never dropped.

Pure: the caller records what was dropped (the decision's notes and a warning on the PodGroup).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

TOTAL_ANNOTATION_SIZE_LIMIT = 256 * 1024  # bytes, keys and values of all annotations together
LABEL_VALUE_MAX = 63
_NAME_PART = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


# Every decision checks its PodGroup's labels and annotations, and a workload's pods repeat the same keys and
# values: the answers are memoized (bounded, to the recent workloads' keys and values; strings only reach here).
@functools.lru_cache(maxsize=1024)
def is_qualified_name(key: str) -> bool:
    """apimachinery ``IsQualifiedName``: ``[prefix/]name``, prefix a DNS subdomain (≤ 253), name ≤ 63."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return False
    return 0 < len(name) <= 63 and bool(_NAME_PART.match(name))


@functools.lru_cache(maxsize=1024)
def is_label_value(value: str) -> bool:
    return len(value) <= LABEL_VALUE_MAX and bool(_LABEL_VALUE.match(value))


def annotation_size(key: str, value: str) -> int:
    return len(key.encode()) + len(value.encode())


def annotations_size(annotations: Mapping[str, str]) -> int:
    return sum(annotation_size(k, v) for k, v in annotations.items())


@dataclass
class Dropped:
    """What :func:`bound_metadata` left out, by key: why (``invalid key``, ``invalid value``, ``N bytes``)."""

    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.labels or self.annotations)

    def describe(self, limit: int = 10) -> str:
        """One sentence naming the dropped keys (at most ``limit`` of each), for notes, logs and Events."""
        parts = []
        for what, items in (("labels", self.labels), ("annotations", self.annotations)):
            if not items:
                continue
            shown = [f"{k} ({why})" for k, why in list(items.items())[:limit]]
            more = f" and {len(items) - limit} more" if len(items) > limit else ""
            parts.append(f"{what} {', '.join(shown)}{more}")
        return (
            "not copied from the workload to keep the PodGroup within the API server's limits "
            f"(annotations at most {TOTAL_ANNOTATION_SIZE_LIMIT} bytes together; label values at most "
            f"{LABEL_VALUE_MAX} characters): " + "; ".join(parts)
        )


def bound_metadata(
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    *,
    keep: Collection[str] = (),
    limit: int = TOTAL_ANNOTATION_SIZE_LIMIT,
) -> tuple[dict[str, str], dict[str, str], Dropped]:
    """(labels, annotations, what was dropped): the largest subset the API server accepts (see module doc).
    ``keep``: annotation keys never dropped for size (they still count towards the total)."""
    if _fits(labels, annotations, limit):  # the common case: nothing to drop, nothing sorted or copied twice
        return dict(labels), dict(annotations), Dropped()
    dropped = Dropped()
    out_labels: dict[str, str] = {}
    for k in sorted(labels):
        v = labels[k]
        if not isinstance(k, str) or not is_qualified_name(k):
            dropped.labels[k] = "invalid key"
        elif not isinstance(v, str) or not is_label_value(v):
            dropped.labels[k] = "invalid value"
        else:
            out_labels[k] = v
    out_ann: dict[str, str] = {}
    for k in sorted(annotations):
        v = annotations[k]
        if not isinstance(k, str) or not is_qualified_name(k.lower()) or not isinstance(v, str):
            dropped.annotations[k] = "invalid key"
        else:
            out_ann[k] = v
    total = annotations_size(out_ann)
    if total > limit:
        # largest first; equal sizes: the greater key first (sorted twice: stable)
        candidates = sorted((k for k in out_ann if k not in keep), reverse=True)
        candidates.sort(key=lambda k: annotation_size(k, out_ann[k]), reverse=True)
        for k in candidates:
            if total <= limit:
                break
            size = annotation_size(k, out_ann.pop(k))
            total -= size
            dropped.annotations[k] = f"{size} bytes"
    # keep the input's order for what stays (the object written is compared as a mapping anyway)
    return (
        {k: labels[k] for k in labels if k in out_labels},
        {k: annotations[k] for k in annotations if k in out_ann},
        dropped,
    )


def _fits(labels: Mapping[str, str], annotations: Mapping[str, str], limit: int) -> bool:
    """Every key and value valid and the annotations within ``limit`` (a UTF-8 character is at most 4 bytes,
    so the exact byte count is needed only when 4 x the characters could exceed it)."""
    for k, v in labels.items():
        if not (isinstance(k, str) and isinstance(v, str) and is_qualified_name(k) and is_label_value(v)):
            return False
    chars = 0
    for k, v in annotations.items():
        if not (isinstance(k, str) and isinstance(v, str) and is_qualified_name(k.lower())):
            return False
        chars += len(k) + len(v)
    return chars * 4 <= limit or annotations_size(annotations) <= limit


__all__ = [
    "TOTAL_ANNOTATION_SIZE_LIMIT",
    "Dropped",
    "annotation_size",
    "annotations_size",
    "bound_metadata",
    "is_label_value",
    "is_qualified_name",
]
