"""``grouper run`` as a separate process for the fault tests: the ServiceAccount of deploy/rbac.yaml with
a bound token, its HTTP port, SIGKILL / SIGTERM, and reads of its probes and metrics."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
from controller.harness import GROUPER, free_port

REPO = Path(__file__).resolve().parents[2]



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
        args: tuple[str, ...] = (),
    ) -> None:
        self.cluster = cluster
        self.token_file = token_file
        self.identity = identity
        self.server = server or cluster.server
        self.port = free_port()
        self.log_path = log_dir / f"grouper-{identity}.log"
        self.env = {**os.environ, "GROUPER_LOG_FORMAT": "json", **(env or {})}
        self.env.pop("KUBECONFIG", None)
        self.args = args
        self.proc: subprocess.Popen[bytes] | None = None
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=5)

    def start(self) -> GrouperProcess:
        argv = [
            str(GROUPER), "run",
            "--server", self.server,
            "--token-file", str(self.token_file),
            "--certificate-authority", self.cluster.ca_file,
            "--http-bind-address", f"127.0.0.1:{self.port}",
            "--definitions", str(REPO / "definitions"),
            "--qps", "0",
            "--http-auth", "none",  # the fault tests read /metrics; authentication has its own tests
            *self.args,
        ]
        env = {**self.env, "GROUPER_IDENTITY": self.identity}
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
        return self

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

    def metric(self, name: str, **labels: str) -> float:
        r = self.get("/metrics")
        assert r is not None and r.status_code == 200
        total = 0.0
        for line in r.text.splitlines():
            if not line.startswith(name):
                continue
            head, _, value = line.rpartition(" ")
            if head.split("{", 1)[0] != name:
                continue
            if all(f'{k}="{v}"' in head for k, v in labels.items()):
                total += float(value)
        return total

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
