"""Errors a grouping decision can end in. Each names the object and, where it applies, the field.

``reason`` is a short, bounded token (used as a metric label and in Events); ``str(err)`` is the
message a person reads.
"""

from __future__ import annotations

import re

_NUMBER = re.compile(r"[+-]?[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?")
SHOWN_MAX = 64  # characters of one value in a message


def shown(text: object, limit: int = SHOWN_MAX) -> str:
    """``text`` (a value as a message shows it) cut to ``limit`` characters: a 309-digit number becomes
    ``100000000000…(309 digits)``, a long string its start and its length. Messages reach Events, logs
    and terminals: a hostile value must not fill them."""
    s = str(text)
    if len(s) <= limit:
        return s
    if _NUMBER.fullmatch(s):
        digits = sum(c.isdigit() for c in s)
        return f"{s[:12]}…({digits} digits)"
    return f"{s[: limit - 16]}…({len(s)} characters)"


class GroupingError(Exception):
    """A pod could not be grouped. Affects that pod (or workload) only, never the service.

    ``retryable``: whether retrying without any change to the objects can succeed (a missing
    owner may appear in the cache). Permanent errors (a reference cycle, a malformed field) are
    not retried with backoff; the next change to the pod, an owner or a definition re-evaluates.
    """

    reason = "GroupingFailed"
    retryable = True

    def __init__(self, message: str, *, obj: str | None = None, field: str | None = None) -> None:
        self.obj = obj
        self.field = field
        prefix = ""
        if obj:
            prefix = f"{obj}: "
        if field:
            prefix = f"{prefix}field {field}: "
        super().__init__(prefix + message)


class OwnerNotFound(GroupingError):
    reason = "OwnerNotFound"


class OwnerUidMismatch(GroupingError):
    reason = "OwnerUidMismatch"


class OwnerCycle(GroupingError):
    """The owner references loop (the API server does not prevent it): permanent."""

    reason = "OwnerCycle"
    retryable = False


class OwnerChainTooDeep(GroupingError):
    """More owner levels than the walk follows: permanent."""

    reason = "OwnerChainTooDeep"
    retryable = False


class InvalidWorkload(GroupingError):
    """The workload or pod is malformed for its plugin (bad annotation, missing label, ...)."""

    reason = "InvalidWorkload"
    retryable = False


class KartaError(GroupingError):
    """A Karta definition could not be applied to this workload."""

    reason = "KartaError"


class InvalidPodGroup(GroupingError):
    """The decided PodGroup breaks the PodGroup webhook rules; it is reported, never written."""

    reason = "InvalidPodGroup"
    retryable = False


class LookupForbidden(Exception):
    """Reading an object is forbidden by RBAC. Raised by lookups, handled by owner resolution."""

    def __init__(self, api_version: str, kind: str, namespace: str | None, name: str) -> None:
        self.api_version, self.kind, self.namespace, self.name = api_version, kind, namespace, name
        where = f"{namespace}/{name}" if namespace else name
        super().__init__(f"forbidden to read {kind} {where} ({api_version})")
