"""podman on this kind of machine: which packages, which flags, and a base image made from Debian packages.

Facts this relies on (measured, see docs/operations.md, *The image*):

- podman, runc and mmdebstrap come from Debian's packages (``apt-get install``, as root: CI runs as root);
  they are installed only when missing.
- crun (podman's default runtime) cannot start containers on a cgroup v1/hybrid host and the default
  ulimits cannot be set here: every build and run uses runc, the cgroupfs manager and explicit ulimits
  (:func:`podman`).
- No registry is reachable. ``--base local`` makes the base from Debian bookworm packages with mmdebstrap
  (python3, python3-venv, ca-certificates), cached as a tarball under ``.cache/image/`` and imported into
  podman's store once; the default base is the public slim Python image (for machines with a registry).
- Egress goes through a TLS-intercepting proxy whose CA is in the host bundle: the build mounts the host
  bundle read-only and passes it to pip (the Dockerfile's ``PIP_CERT`` build argument).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

DEFAULT_TAG = "localhost/kai-pod-grouper:dev"
PUBLIC_BASE = "docker.io/library/python:3.11-slim"  # the Dockerfile's default
LOCAL_BASE = "localhost/kai-pod-grouper-base:bookworm"
SUITE = "bookworm"
BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates")
APT_PACKAGES = ("podman", "runc", "mmdebstrap")
RUNC = "/usr/sbin/runc"
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")
ULIMITS = ("--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024")
REPO = Path(__file__).resolve().parents[2]


class ImageError(RuntimeError):
    pass


def _log(msg: str) -> None:
    print(f"[image] {msg}", file=sys.stderr, flush=True)


def podman(*args: str) -> list[str]:
    """A podman command line with the runtime and cgroup manager that work here."""
    return ["podman", "--runtime", RUNC, "--cgroup-manager", "cgroupfs", *args]


def run_flags() -> list[str]:
    """Flags every ``podman run`` / ``build`` needs here (besides :func:`podman`'s)."""
    return ["--network=host", *ULIMITS]


def cache_dir() -> Path:
    return REPO / ".cache" / "image"


def ensure_podman() -> None:
    """Install podman, runc and mmdebstrap with apt-get when any is missing (needs root)."""
    missing = [p for p, exe in zip(APT_PACKAGES, ("podman", RUNC, "mmdebstrap"), strict=True)
               if not shutil.which(exe)]
    if not missing:
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise ImageError(f"missing {', '.join(missing)}: install them (apt-get install {' '.join(APT_PACKAGES)})")
    _log(f"installing {', '.join(missing)} with apt-get ...")
    start = time.monotonic()
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *APT_PACKAGES], check=True, env=env)
    _log(f"installed in {time.monotonic() - start:.0f}s")


def podman_unavailable() -> str:
    """Why podman cannot run containers here ("" when it can): the reason a test skip gives."""
    if not shutil.which("podman"):
        return "podman is not installed (make image installs it with apt-get, as root)"
    if not Path(RUNC).is_file():
        return f"runc is not installed at {RUNC}"
    probe = subprocess.run(podman("info", "--format", "{{.Host.OCIRuntime.Name}}"), capture_output=True, text=True)
    if probe.returncode != 0:
        return f"podman cannot run here: {probe.stderr.strip()[-300:]}"
    return ""


def _has_image(ref: str) -> bool:
    return subprocess.run(podman("image", "exists", ref), capture_output=True).returncode == 0


def ensure_local_base(ref: str = LOCAL_BASE) -> str:
    """A base image from Debian packages: mmdebstrap once (cached tarball), then ``podman import`` once."""
    if _has_image(ref):
        return ref
    tarball = cache_dir() / f"debian-python-{SUITE}.tar"
    if not tarball.is_file():
        cache_dir().mkdir(parents=True, exist_ok=True)
        tmp = tarball.with_suffix(".tar.tmp")
        _log(f"making the base from Debian {SUITE} packages ({', '.join(BASE_PACKAGES)}) with mmdebstrap ...")
        start = time.monotonic()
        subprocess.run(
            ["mmdebstrap", "--quiet", "--variant=minbase", "--format=tar", f"--include={','.join(BASE_PACKAGES)}",
             # no docs, man pages or apt lists in the base (the image needs no apt)
             "--dpkgopt=path-exclude=/usr/share/doc/*", "--dpkgopt=path-exclude=/usr/share/man/*",
             "--dpkgopt=path-exclude=/usr/share/locale/*",
             "--customize-hook=rm -rf $1/var/lib/apt/lists/* $1/var/cache/apt/*",
             SUITE, str(tmp)],
            check=True,
        )
        os.replace(tmp, tarball)
        _log(f"base rootfs {tarball.stat().st_size / 1e6:.0f} MB in {time.monotonic() - start:.0f}s")
    subprocess.run(
        podman("import", "--change", "CMD=/usr/bin/python3", str(tarball), ref), check=True, capture_output=True
    )
    return ref


def build_image(tag: str = DEFAULT_TAG, base: str = "", quiet: bool = False) -> float:
    """``podman build`` the repository's Dockerfile; returns the seconds it took."""
    cmd = podman("build", *run_flags(), "-t", tag, "-f", str(REPO / "Dockerfile"))
    if base:
        cmd += ["--build-arg", f"BASE={base}"]
    if HOST_CA.is_file():
        cmd += ["-v", f"{HOST_CA}:/run/host-ca.crt:ro", "--build-arg", "PIP_CERT=/run/host-ca.crt"]
    if quiet:
        cmd.append("--quiet")
    cmd.append(str(REPO))
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=quiet, text=True)
    if proc.returncode != 0:
        raise ImageError(f"podman build failed (exit {proc.returncode}):\n{(proc.stderr or '')[-3000:]}")
    return time.monotonic() - start


def image_size(tag: str = DEFAULT_TAG) -> int:
    """Uncompressed size in bytes, as ``podman image inspect`` reports it."""
    out = subprocess.run(podman("image", "inspect", "--format", "{{.Size}}", tag), check=True,
                         capture_output=True, text=True).stdout
    return int(out.strip())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m devtools.image", description="build the grouper's image with podman")
    ap.add_argument("--tag", default=DEFAULT_TAG)
    ap.add_argument(
        "--base", default="local",
        help=f"'local' = made here from Debian packages ({LOCAL_BASE}), 'public' = {PUBLIC_BASE}, or an image ref",
    )
    args = ap.parse_args(argv)
    try:
        ensure_podman()
        base = {"local": "", "public": PUBLIC_BASE}.get(args.base, args.base)
        if args.base == "local":
            base = ensure_local_base()
        secs = build_image(args.tag, base)
    except (ImageError, subprocess.CalledProcessError) as e:
        _log(str(e))
        return 1
    _log(f"built {args.tag} from {base or PUBLIC_BASE} in {secs:.0f}s, {image_size(args.tag) / 1e6:.0f} MB")
    return 0
