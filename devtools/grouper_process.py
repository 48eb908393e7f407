"""``grouper run`` as a separate process, authenticated as the ServiceAccount of ``deploy/rbac.yaml`` with a
bound token file: its HTTP port, SIGKILL / SIGTERM, reads of its probes and metrics, and its CPU time and
RSS from ``/proc``. Used by the fault tests (``tests/faults/process.py``) and ``benchmarks/cluster_bench.py``.

``command`` is how to start the grouper (default: the ``grouper`` console script beside this Python), so a
benchmark can run another checkout's grouper (``[<checkout>/.venv/bin/python, "-m", "grouper.cli.main"]``).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

GROUPER = Path(sys.executable).with_name("grouper")  # the console script of this venv
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def _die_with_parent() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def parse_metric(text: str, name: str, **labels: str) -> float:
    """Sum of the samples of ``name`` (Prometheus text format) whose labels include ``labels``."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name):
            continue
        head, _, value = line.rpartition(" ")
        if head.split("{", 1)[0] != name:
            continue
        if all(f'{k}="{v}"' in head for k, v in labels.items()):
            total += float(value)
    return total


class GrouperProcess:
    def __init__(
        self,
        cluster: Any,
        token_file: Path,
        log_dir: Path,
        *,
        identity: str,
        server: str | None = None,
        env: dict[str, str] | None = None,
        args: Sequence[str] = (),
        command: Sequence[str] | None = None,
        die_with_parent: bool = False,
    ) -> None:
        """``die_with_parent``: SIGKILL the grouper when the thread that started it exits (PR_SET_PDEATHSIG),
        for callers that start it from their main thread and may be killed (a benchmark)."""
        self.cluster = cluster
        self.token_file = token_file
        self.identity = identity
        self.server = server or cluster.server
        self.port = free_port()
        self.log_path = log_dir / f"grouper-{identity}.log"
        self.env = {**os.environ, "GROUPER_LOG_FORMAT": "json", **(env or {})}
        self.env.pop("KUBECONFIG", None)
        self.args = tuple(args)
        self.command = tuple(command) if command else (str(GROUPER),)
        self.die_with_parent = die_with_parent
        self.proc: subprocess.Popen[bytes] | None = None
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=5)

    @property
    def argv(self) -> list[str]:
        return [
            *self.command, "run",
            "--server", self.server,
            "--token-file", str(self.token_file),
            "--certificate-authority", self.cluster.ca_file,
            "--http-bind-address", f"127.0.0.1:{self.port}",
            "--http-auth", "none",  # callers read /metrics; authentication has its own tests
            *self.args,
        ]

    def start(self) -> GrouperProcess:
        env = {**self.env, "GROUPER_IDENTITY": self.identity}
        with open(self.log_path, "ab") as log:
            # cwd: the log directory, never the caller's. ``python -m grouper.cli.main`` puts the working
            # directory first on sys.path, so from a checkout it would run that checkout's grouper
            # whatever Python was asked for (the benchmark's --grouper-python A/B ran one code twice)
            self.proc = subprocess.Popen(self.argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                                         cwd=self.log_path.parent,
                                         preexec_fn=_die_with_parent if self.die_with_parent else None)
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def get(self, path: str) -> httpx.Response | None:
        if not self.alive():
            raise AssertionError(f"grouper {self.identity} exited {self.proc and self.proc.returncode}:\n"
                                 f"{self.log_tail()}")
        try:
            return self.http.get(path)
        except httpx.HTTPError:
            return None

    def ready(self) -> bool:
        r = self.get("/readyz")
        return r is not None and r.status_code == 200

    def readyz(self) -> tuple[int, dict[str, Any]]:
        r = self.get("/readyz")
        return (0, {}) if r is None else (r.status_code, r.json())

    def wait_ready(self, timeout: float = 60.0) -> float:
        t0 = time.monotonic()
        while not self.ready():
            if time.monotonic() - t0 > timeout:
                raise TimeoutError(f"grouper {self.identity} not ready:\n{self.log_tail()}")
            time.sleep(0.1)
        return time.monotonic() - t0

    def metrics_text(self) -> str:
        r = self.get("/metrics")
        assert r is not None and r.status_code == 200, f"/metrics of grouper {self.identity}: {r}"
        return r.text

    def metric(self, name: str, **labels: str) -> float:
        return parse_metric(self.metrics_text(), name, **labels)

    def cpu_seconds(self) -> float:
        """user + system CPU time of the process so far, its child processes included (the jq sandbox
        workers that evaluate Karta definitions): ``/proc/<pid>/stat`` utime + stime + cutime + cstime
        (children that exited) plus utime + stime of each live child."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = sum(int(f) for f in fields[11:15])
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                child = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue  # exited meanwhile
            if child[1] == str(self.pid):
                ticks += int(child[11]) + int(child[12])
        return ticks / _CLOCK_TICKS

    def rss_bytes(self) -> int:
        return int(Path(f"/proc/{self.pid}/statm").read_text().split()[1]) * _PAGE

    def kill(self) -> None:
        """SIGKILL: no drain, no lease release — a crash."""
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self, timeout: float = 30.0) -> int:
        if not self.alive():
            return self.proc.returncode if self.proc is not None else 0
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(10)

    def log_tail(self, n: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def __enter__(self) -> GrouperProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if self.alive():
            self.stop()
        self.http.close()
