"""A write the API server refused: terminal or retryable (controller-runtime's vocabulary), and a bounded
reason for metrics.

- **Terminal** (``reconcile.TerminalError``): the request itself is wrong, and sending it again changes
  nothing until its input changes — 400 BadRequest, 422 Invalid (field validation, an admission policy
  that denies), 413 RequestEntityTooLarge. The workload is not re-queued on a timer; the next change of
  the workload, its pods or anything its decision read re-queues it (the event handlers), and so does a
  resync or a change to the PodGroup itself.
- **Retryable** — everything else: 5xx, 429, timeouts and connection failures, 404 (the PodGroup CRD not
  installed yet), and 403 Forbidden: RBAC and admission webhooks can be fixed by an operator without any
  object the grouper watches changing, so a 403 keeps the back-off (1 s doubling to 60 s) until it passes.

409 Conflict never reaches here: the writers re-read and try again (bounded), and a conflict left after
those retries is retryable.
"""

from __future__ import annotations

from grouper.kube.transport import ApiError

TERMINAL_STATUSES = frozenset({400, 413, 422})
_REASONS = {
    0: "Unreachable",
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    409: "Conflict",
    413: "RequestEntityTooLarge",
    422: "Invalid",
    429: "TooManyRequests",
}


def is_terminal_error(e: ApiError) -> bool:
    """Whether sending the same write again cannot succeed until its input changes."""
    return e.status in TERMINAL_STATUSES


def failure_reason(e: ApiError) -> str:
    """A bounded reason token for metrics (never the server's free text): by HTTP status."""
    if e.status in _REASONS:
        return _REASONS[e.status]
    if e.status >= 500:
        return "ServerError"
    return "ClientError"


def failure_message(e: ApiError) -> str:
    """``<status> <reason>: <the API server's message>``."""
    return f"{e.status} {e.reason}: {e.message}"


__all__ = ["TERMINAL_STATUSES", "failure_message", "failure_reason", "is_terminal_error"]
