"""Killable jq worker processes for untrusted (cluster-supplied) definitions.

A libjq run cannot be interrupted from Python (no signal check, no cancellation), so an
expression that loops or explodes would hang a controller thread. ``SandboxedRunner`` runs jq in
child processes instead (``_jqworker.py``: stdlib + jq only, ``python -I``, empty environment,
``RLIMIT_AS`` memory cap). Each query has a deadline; on expiry the worker is killed (by its
own Popen handle) and a fresh one is started on the next query. A worker that dies (e.g. libjq
aborts on the memory cap) is reported as a ``JqError`` and replaced the same way.

Validation already rejects the unbounded constructs, so the sandbox is the second line: it
bounds what validation cannot see (string/array blow-ups, regex backtracking, deep recursion
through builtins). Cost: one pipe round trip per fused query (~0.1-0.3 ms plus the input size).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import queue
import selectors
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from grouper.karta.jqrun import JqCompileError, JqError, JqTimeout

_WORKER = str(Path(__file__).with_name("_jqworker.py"))


class _Worker:
    def __init__(self, memory_limit_bytes: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-I", _WORKER, str(memory_limit_bytes)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={"PATH": os.defpath, "LC_ALL": "C.UTF-8"},
            close_fds=True,
        )

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        for f in (self.proc.stdin, self.proc.stdout):
            if f is not None:
                with contextlib.suppress(OSError):
                    f.close()

    def query(self, request: dict[str, Any], timeout_s: float | None) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        data = json.dumps(request).encode()
        try:
            self.proc.stdin.write(struct.pack(">I", len(data)) + data)
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as e:
            raise JqWorkerDied(f"jq worker is gone: {e}") from None
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        fd = self.proc.stdout.fileno()
        header = self._read(fd, 4, deadline, timeout_s)
        body = self._read(fd, struct.unpack(">I", header)[0], deadline, timeout_s)
        result: dict[str, Any] = json.loads(body)
        return result

    @staticmethod
    def _read(fd: int, n: int, deadline: float | None, timeout_s: float | None) -> bytes:
        buf = bytearray()
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while len(buf) < n:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise JqTimeout(f"jq evaluation exceeded the time limit of {timeout_s:g}s")
                if not sel.select(remaining):
                    continue
                chunk = os.read(fd, min(n - len(buf), 1 << 20))
                if not chunk:
                    raise JqWorkerDied("jq worker died (memory limit or crash)")
                buf.extend(chunk)
        return bytes(buf)


class JqWorkerDied(JqError):
    """The worker exited mid-query (libjq aborts when it hits the memory cap)."""


class SandboxedRunner:
    """A ``jqrun.Runner`` backed by ``workers`` child processes (started lazily)."""

    def __init__(self, *, workers: int = 2, memory_limit_mb: int = 1024) -> None:
        self.memory_limit_bytes = memory_limit_mb * 1024 * 1024
        self.restarts = 0
        self._idle: queue.LifoQueue[_Worker | None] = queue.LifoQueue()
        for _ in range(workers):
            self._idle.put(None)  # a slot; the process is started on first use
        self._all: list[_Worker] = []
        self._lock = threading.Lock()
        self._closed = False

    def _start(self) -> _Worker:
        w = _Worker(self.memory_limit_bytes)
        with self._lock:
            self._all.append(w)
        return w

    def _discard(self, w: _Worker) -> None:
        w.kill()
        with self._lock:
            if w in self._all:
                self._all.remove(w)
            self.restarts += 1

    def run(
        self, program: str, input_text: str, max_outputs: int, timeout_s: float | None = 10.0
    ) -> list[Any]:
        if self._closed:
            raise JqError("sandbox is closed")
        slot = self._idle.get()
        worker = slot if slot is not None and slot.alive() else self._start()
        keep: _Worker | None = worker
        try:
            resp = worker.query({"p": program, "i": input_text, "m": max_outputs}, timeout_s)
        except (JqTimeout, JqWorkerDied):
            self._discard(worker)
            keep = None
            raise
        finally:
            self._idle.put(keep)
        if "ok" in resp:
            values: list[Any] = resp["ok"]
            return values
        if resp.get("kind") == "compile":
            raise JqCompileError(str(resp.get("err")))
        raise JqError(str(resp.get("err")))

    def pids(self) -> list[int]:
        with self._lock:
            return [w.proc.pid for w in self._all if w.alive()]

    def close(self) -> None:
        self._closed = True
        with self._lock:
            workers = list(self._all)
            self._all.clear()
        for w in workers:
            w.kill()


_shared: SandboxedRunner | None = None
_shared_lock = threading.Lock()


def shared_runner() -> SandboxedRunner:
    """The process-wide sandbox used by ``Evaluator(isolate=True)``."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = SandboxedRunner()
            atexit.register(_shared.close)
        return _shared
