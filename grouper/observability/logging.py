"""Structured logging: JSON (one object per line) or plain text, with per-task context.

Context such as ``workload``, ``pod`` and ``plugin`` is set with :func:`log_context`; it lives in a
``contextvars.ContextVar`` so every asyncio task (one per reconcile worker) carries its own, and every
record logged inside the block gets those fields without passing them around.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import sys
import time
from collections.abc import Iterator
from typing import Any

import orjson

_CONTEXT: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "grouper_log_context", default=None
)

# attributes every LogRecord has; anything else on a record came from ``extra=`` and is emitted as a field
_STD_ATTRS = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message",
    "asctime",
    "ctx",
}


@contextlib.contextmanager
def log_context(**fields: Any) -> Iterator[None]:
    """Add ``fields`` to every record logged inside the block (nested blocks merge)."""
    merged = {**(_CONTEXT.get() or {}), **{k: v for k, v in fields.items() if v is not None}}
    token = _CONTEXT.set(merged)
    try:
        yield
    finally:
        _CONTEXT.reset(token)


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    out: dict[str, Any] = dict(_CONTEXT.get() or {})
    for k, v in record.__dict__.items():
        if k not in _STD_ATTRS and not k.startswith("_"):
            out[k] = v
    return out


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        doc.update(_fields(record))
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(doc, default=str).decode()


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = _fields(record)
        if fields:
            line += " " + " ".join(f"{k}={v}" for k, v in fields.items())
        return line


def setup_logging(level: str = "info", fmt: str = "json", stream: Any = None) -> None:
    """Configure the root logger once for ``grouper run`` (idempotent: replaces our handler)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.set_name("grouper")
    root = logging.getLogger()
    for h in list(root.handlers):
        if h.get_name() == "grouper":
            root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # third-party chatter stays at warning unless we debug
    for noisy in ("aiohttp", "uvicorn.access", "asyncio"):
        logging.getLogger(noisy).setLevel(logging.WARNING if level.lower() != "debug" else logging.INFO)
