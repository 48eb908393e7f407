"""Killable jq worker processes: every Karta expression is compiled and run outside the caller.

A libjq run cannot be interrupted from Python (no signal check, no cancellation), and libjq
folds constants while *compiling* (``("x" * 1e9) | length`` allocates a gigabyte at compile
time), so neither compiling nor running untrusted jq is safe in the controller process. Both
happen in child processes (``_jqworker.py``: stdlib + jq only, ``python -I``, empty environment,
``RLIMIT_AS`` memory cap, a cap on the response size, first in line for the OOM killer). Each
request has a deadline; on expiry the worker is killed (by its own Popen handle) and replaced on
the next request. A worker that dies (libjq aborts on the memory cap) is reported as a
``JqWorkerDied`` and replaced the same way.

Two runners:

* ``SandboxPool`` — what the registry uses: one *lane* per definition (keyed by name and
  content), each lane with at most one worker and one request in flight, at most
  ``max_workers`` worker processes in all (an idle lane's worker is taken over when the pool is
  full), idle workers reaped after ``idle_s``. A hostile definition therefore queues behind
  itself, never in front of another definition. A lane whose requests time out
  ``quarantine_after`` times in a row is *quarantined*: further requests fail at once with
  ``JqQuarantined`` until the definition changes (a new lane key).
* ``SandboxedRunner`` — a plain pool of ``workers`` processes shared by all callers (tests,
  benchmarks, one-off evaluators).

Cost: one pipe round trip per fused query (~0.1-0.3 ms plus the input size).
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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from grouper.karta.jqrun import JqCompileError, JqError, JqQuarantined, JqTimeout

_WORKER = str(Path(__file__).with_name("_jqworker.py"))

DEFAULT_MEMORY_MB = 256
DEFAULT_MAX_RESPONSE = 16 << 20


class JqWorkerDied(JqError):
    """The worker exited mid-query (libjq aborts when it hits the memory cap)."""


class _Worker:
    def __init__(self, memory_limit_bytes: int, max_response: int) -> None:
        self.max_response = max_response
        self.proc = subprocess.Popen(
            [sys.executable, "-I", _WORKER, str(memory_limit_bytes), str(max_response)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={"PATH": os.defpath, "LC_ALL": "C.UTF-8"},
            close_fds=True,
        )
        self.last_used = time.monotonic()

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
        self.last_used = time.monotonic()
        try:
            self.proc.stdin.write(struct.pack(">I", len(data)) + data)
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError) as e:
            raise JqWorkerDied(f"jq worker is gone: {e}") from None
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        fd = self.proc.stdout.fileno()
        header = self._read(fd, 4, deadline, timeout_s)
        size = struct.unpack(">I", header)[0]
        if size > self.max_response + 4096:
            raise JqWorkerDied(f"jq worker sent an oversized response ({size} bytes)")
        body = self._read(fd, size, deadline, timeout_s)
        self.last_used = time.monotonic()
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


def _values(resp: dict[str, Any]) -> list[Any]:
    if "ok" in resp:
        values: list[Any] = resp["ok"]
        return values
    if resp.get("kind") == "compile":
        raise JqCompileError(str(resp.get("err")))
    raise JqError(str(resp.get("err")))


def _compile_request(exprs: Sequence[str]) -> dict[str, Any]:
    return {"c": list(exprs)}


def _compile_answer(resp: dict[str, Any], n: int) -> list[str | None]:
    out = _values(resp)
    if len(out) != n:
        raise JqError(f"jq worker answered {len(out)} compile checks for {n} expressions")
    return [None if e is None else str(e) for e in out]


class SandboxedRunner:
    """A ``jqrun.Runner`` backed by ``workers`` child processes (started lazily)."""

    def __init__(
        self,
        *,
        workers: int = 2,
        memory_limit_mb: int = DEFAULT_MEMORY_MB,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE,
    ) -> None:
        self.memory_limit_bytes = memory_limit_mb * 1024 * 1024
        self.max_response = max_response_bytes
        self.restarts = 0
        self._idle: queue.LifoQueue[_Worker | None] = queue.LifoQueue()
        for _ in range(workers):
            self._idle.put(None)  # a slot; the process is started on first use
        self._all: list[_Worker] = []
        self._lock = threading.Lock()
        self._closed = False

    def _start(self) -> _Worker:
        w = _Worker(self.memory_limit_bytes, self.max_response)
        with self._lock:
            self._all.append(w)
        return w

    def _discard(self, w: _Worker) -> None:
        w.kill()
        with self._lock:
            if w in self._all:
                self._all.remove(w)
            self.restarts += 1

    def _query(self, request: dict[str, Any], timeout_s: float | None) -> dict[str, Any]:
        if self._closed:
            raise JqError("sandbox is closed")
        slot = self._idle.get()
        worker = slot if slot is not None and slot.alive() else self._start()
        keep: _Worker | None = worker
        try:
            return worker.query(request, timeout_s)
        except (JqTimeout, JqWorkerDied):
            self._discard(worker)
            keep = None
            raise
        finally:
            self._idle.put(keep)

    def run(
        self, program: str, input_text: str, max_outputs: int, timeout_s: float | None = 10.0
    ) -> list[Any]:
        return _values(self._query({"p": program, "i": input_text, "m": max_outputs}, timeout_s))

    def compile_errors(self, exprs: Sequence[str], timeout_s: float | None = 10.0) -> list[str | None]:
        """libjq's compile error for each expression (None: it compiles), compiled in a worker."""
        if not exprs:
            return []
        return _compile_answer(self._query(_compile_request(exprs), timeout_s), len(exprs))

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


class Lane:
    """One definition's share of a ``SandboxPool``: at most one worker, one request at a time.
    Implements ``jqrun.Runner`` (and ``compile_errors``)."""

    def __init__(self, pool: SandboxPool, key: str) -> None:
        self.pool = pool
        self.key = key
        self.worker: _Worker | None = None
        self.lock = threading.Lock()
        self.timeouts = 0  # consecutive
        self.quarantined_limit: float | None = None  # the per-query limit when it was quarantined
        self.culprit: str | None = None  # the last expression that timed out on its own
        self.last_used = time.monotonic()

    @property
    def quarantine(self) -> str | None:
        """Why the lane is quarantined (naming the expression that timed out, when one is known), or None."""
        if self.quarantined_limit is None:
            return None
        last = f"; the last to time out: expression '{self.culprit}'" if self.culprit is not None else ""
        return (
            f"quarantined after {self.pool.quarantine_after} consecutive jq timeouts "
            f"(limit {self.quarantined_limit:g}s each{last}); any change to the definition lifts it"
        )

    def note_timeout(self, expression: str) -> None:
        """``expression``, run alone, timed out (``jqrun.evaluate_many`` tracing a fused timeout): the
        quarantine's message and ``JqQuarantined`` name it, since its batch-mates are not at fault."""
        self.culprit = expression

    def _query(self, request: dict[str, Any], timeout_s: float | None) -> dict[str, Any]:
        with self.lock:
            if self.quarantine is not None:
                raise JqQuarantined(self.quarantine, self.culprit)
            self.last_used = time.monotonic()
            worker = self.worker
            if worker is None or not worker.alive():
                if worker is not None:
                    self.pool._release(worker)
                self.worker = worker = self.pool._acquire(self)
            try:
                resp = worker.query(request, timeout_s)
            except (JqTimeout, JqWorkerDied) as e:
                self.worker = None
                self.pool._release(worker, restart=True)
                if isinstance(e, JqTimeout):
                    self.timeouts += 1
                    if self.timeouts >= self.pool.quarantine_after:
                        self.quarantined_limit = timeout_s or 0.0
                raise
            self.timeouts = 0
            self.last_used = time.monotonic()
            return resp

    def run(
        self, program: str, input_text: str, max_outputs: int, timeout_s: float | None = 10.0
    ) -> list[Any]:
        return _values(self._query({"p": program, "i": input_text, "m": max_outputs}, timeout_s))

    def compile_errors(self, exprs: Sequence[str], timeout_s: float | None = 10.0) -> list[str | None]:
        if not exprs:
            return []
        return _compile_answer(self._query(_compile_request(exprs), timeout_s), len(exprs))


class SandboxPool:
    """Per-definition lanes over a bounded set of worker processes (see the module docstring)."""

    def __init__(
        self,
        *,
        max_workers: int = 4,
        memory_limit_mb: int = DEFAULT_MEMORY_MB,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE,
        idle_s: float = 60.0,
        quarantine_after: int = 3,
        max_lanes: int = 1024,
    ) -> None:
        if max_workers < 1:
            raise ValueError("max_workers must be at least 1")
        self.max_workers = max_workers
        self.memory_limit_bytes = memory_limit_mb * 1024 * 1024
        self.max_response = max_response_bytes
        self.idle_s = idle_s
        self.quarantine_after = quarantine_after
        self.max_lanes = max_lanes
        self.restarts = 0
        self._lanes: dict[str, Lane] = {}
        self._workers: set[_Worker] = set()
        self._cond = threading.Condition()
        self._closed = False
        self._reaper: threading.Thread | None = None
        self._stop = threading.Event()

    def lane(self, key: str) -> Lane:
        with self._cond:
            lane = self._lanes.get(key)
            if lane is None:
                lane = self._lanes[key] = Lane(self, key)
                self._trim_lanes()
            return lane

    def _trim_lanes(self) -> None:
        if len(self._lanes) <= self.max_lanes:
            return
        # forget the oldest lanes without a worker; quarantines are kept (they are small)
        for key, lane in sorted(self._lanes.items(), key=lambda kv: kv[1].last_used):
            if len(self._lanes) <= self.max_lanes:
                break
            if lane.worker is None and lane.quarantine is None and not lane.lock.locked():
                del self._lanes[key]

    def quarantined(self) -> dict[str, str]:
        """Lane key → why it is quarantined."""
        with self._cond:
            return {k: v.quarantine for k, v in self._lanes.items() if v.quarantine is not None}

    def quarantine_of(self, key: str) -> str | None:
        with self._cond:
            lane = self._lanes.get(key)
            return lane.quarantine if lane is not None else None

    def pids(self) -> list[int]:
        with self._cond:
            return [w.proc.pid for w in self._workers if w.alive()]

    # -- worker slots (called by lanes holding their own lock)
    def _acquire(self, lane: Lane) -> _Worker:
        with self._cond:
            while True:
                if self._closed:
                    raise JqError("sandbox is closed")
                if len(self._workers) < self.max_workers:
                    break
                taken = self._take_idle(lane)
                if taken is not None:
                    return taken
                self._cond.wait(0.05)
            self._ensure_reaper()
        w = _Worker(self.memory_limit_bytes, self.max_response)
        with self._cond:
            self._workers.add(w)
        return w

    def _take_idle(self, requester: Lane) -> _Worker | None:
        """Hand the least recently used idle worker of another lane to ``requester`` (caller
        holds ``_cond``). A worker keeps no state of a definition but compiled programs keyed
        by their text, so handing it over is safe and saves starting a process."""
        idle = sorted(
            (x for x in self._lanes.values() if x is not requester and x.worker is not None),
            key=lambda x: x.last_used,
        )
        for other in idle:
            if other.lock.acquire(blocking=False):
                try:
                    w = other.worker
                    if w is None or not w.alive():
                        continue
                    other.worker = None
                    return w
                finally:
                    other.lock.release()
        return None

    def _release(self, w: _Worker, *, restart: bool = False) -> None:
        w.kill()
        with self._cond:
            self._workers.discard(w)
            if restart:
                self.restarts += 1
            self._cond.notify_all()

    def _ensure_reaper(self) -> None:
        if self._reaper is None or not self._reaper.is_alive():
            self._reaper = threading.Thread(target=self._reap_loop, name="jq-sandbox-reaper", daemon=True)
            self._reaper.start()

    def _reap_loop(self) -> None:
        while not self._stop.wait(max(0.05, self.idle_s / 4)):
            self.reap_idle()

    def reap_idle(self, now: float | None = None) -> int:
        """Stop workers idle for ``idle_s``; returns how many were stopped."""
        now = time.monotonic() if now is None else now
        stopped = 0
        with self._cond:
            lanes = list(self._lanes.values())
        for lane in lanes:
            if lane.worker is None or now - lane.worker.last_used < self.idle_s:
                continue
            if lane.lock.acquire(blocking=False):
                try:
                    w = lane.worker
                    if w is not None and now - w.last_used >= self.idle_s:
                        lane.worker = None
                        self._release(w)
                        stopped += 1
                finally:
                    lane.lock.release()
        return stopped

    def close(self) -> None:
        self._stop.set()
        with self._cond:
            self._closed = True
            workers = list(self._workers)
            self._workers.clear()
            for lane in self._lanes.values():
                lane.worker = None
            self._cond.notify_all()
        for w in workers:
            w.kill()


_shared: SandboxedRunner | None = None
_shared_pool: SandboxPool | None = None
_shared_lock = threading.Lock()


def shared_runner() -> SandboxedRunner:
    """The process-wide sandbox used by ``Evaluator(isolate=True)`` without a lane."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = SandboxedRunner()
            atexit.register(_shared.close)
        return _shared


def shared_pool() -> SandboxPool:
    """The process-wide per-definition pool (registries and validation use it by default)."""
    global _shared_pool
    with _shared_lock:
        if _shared_pool is None:
            _shared_pool = SandboxPool()
            atexit.register(_shared_pool.close)
        return _shared_pool
