"""Running the grouper the way the chart does: its rendered arguments, its ServiceAccount's token, as a local
``grouper run`` process or as the OCI image under podman."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import yaml
from kube import wait_until

from devtools import chart
from devtools.image import podman, run_flags

GROUPER = Path(sys.executable).with_name("grouper")
MOUNT = "/var/run/grouper"  # where the image sees the token and the CA


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def deployment_args(manifest: str) -> list[str]:
    """The grouper container's args of the Deployment in a rendered / installed manifest."""
    for doc in yaml.safe_load_all(manifest):
        if doc and doc["kind"] == "Deployment":
            return list(doc["spec"]["template"]["spec"]["containers"][0]["args"])
    raise AssertionError("no Deployment in the manifest")


def credentials(tmp_path: Path, cluster: Any, namespace: str, service_account: str) -> Path:
    """A directory readable by the image's non-root user with a TokenRequest token of the ServiceAccount
    (what the kubelet would mount) and the API server's CA."""
    d = tmp_path / f"creds-{uuid.uuid4().hex[:6]}"
    d.mkdir()
    (d / "token").write_text(cluster.create_token(namespace, service_account))
    (d / "ca.crt").write_bytes(Path(cluster.ca_file).read_bytes())
    for p in (tmp_path, d):
        p.chmod(0o755)
    for f in d.iterdir():
        f.chmod(0o644)
    return d


class Grouper:
    """``grouper run ARGS`` with cluster access overridden (later flags win): a local process, or the image."""

    def __init__(self, args: list[str], cluster: Any, creds: Path, log_path: Path, image: str = "") -> None:
        self.port = free_port()
        self.image = image
        self.log_path = log_path
        self.name = f"kai-pod-grouper-test-{uuid.uuid4().hex[:8]}"
        where = MOUNT if image else str(creds)
        self.argv = [
            *(a.replace("$(POD_NAME)", self.name) for a in args),
            f"--server={cluster.server}",
            f"--token-file={where}/token",
            f"--certificate-authority={where}/ca.crt",
            f"--http-bind-address=127.0.0.1:{self.port}",
        ]
        self.creds = creds
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=5)
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Grouper:
        with open(self.log_path, "ab") as log:
            if self.image:
                cmd = podman(
                    "run", "--name", self.name, *run_flags(),
                    # what the chart's securityContext asks of the kubelet
                    "--read-only", "--user", "65532:65532", "--cap-drop=ALL", "--security-opt=no-new-privileges",
                    "-v", f"{self.creds}:{MOUNT}:ro", self.image, *self.argv,
                )
            else:
                cmd = [str(GROUPER), "run", *self.argv]
            self._proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        return self

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout: float = 90) -> float:
        t0 = time.monotonic()

        def ready() -> bool:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise AssertionError(f"grouper exited {self._proc.returncode}:\n{self.logs()[-3000:]}")
            try:
                return self.http.get("/readyz").status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(ready, timeout, what="/readyz 200")
        return time.monotonic() - t0

    def stop(self) -> int:
        """SIGTERM (``podman stop`` for the image); the exit code."""
        assert self._proc is not None
        if self._proc.poll() is None:
            if self.image:
                subprocess.run(podman("stop", "--time", "30", self.name), capture_output=True)
            else:
                self._proc.terminate()
        try:
            rc = self._proc.wait(40)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            rc = self._proc.wait()
        if self.image:
            subprocess.run(podman("rm", "--force", self.name), capture_output=True)
        self.http.close()
        return rc


@contextlib.contextmanager
def running(args: list[str], cluster: Any, creds: Path, log_path: Path, image: str = "") -> Iterator[Grouper]:
    g = Grouper(args, cluster, creds, log_path, image).start()
    try:
        yield g
    finally:
        g.stop()


def default_args() -> list[str]:
    return deployment_args(chart.template())
