"""Build the local control-plane binaries (etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
kwok) from source.

The Go modules live in ``devtools/cluster/go/`` (Kubernetes, pinned in its go.mod),
``devtools/cluster/go/etcd/`` (a small embedded-etcd main, its own module so its dependencies never
constrain the Kubernetes build) and ``devtools/cluster/go/kwok/`` (``sigs.k8s.io/kwok``, simulated nodes,
likewise its own module). kube-scheduler is built from the Kubernetes module as it is: adding it to that
go.mod's ``tool`` block would change the fingerprint of the other two binaries and force their rebuild. ``helm`` (for the chart tests, built only when asked for: ``--only helm``)
comes from ``devtools/helm/``, a module pinning a released ``helm.sh/helm/v3``. The real workload operators
(``OPERATORS``) each come from a module of their own: ``jobset`` (the JobSet controller, ``sigs.k8s.io/jobset``,
whose main package is its module root) from ``devtools/cluster/go/jobset/``, ``kuberay`` (the KubeRay
operator, ``github.com/ray-project/kuberay/ray-operator``, likewise) from ``devtools/cluster/go/kuberay/``,
``lws`` (the LeaderWorkerSet controller, ``sigs.k8s.io/lws``, main package ``cmd``) from
``devtools/cluster/go/lws/``, ``kubeflow`` (the Kubeflow training-operator, ``github.com/kubeflow/training-operator``,
main package ``cmd/training-operator.v1``) from ``devtools/cluster/go/kubeflow/``, ``trainer`` (the Kubeflow Trainer v2
controller manager, ``github.com/kubeflow/trainer/v2``, main package ``cmd/trainer-controller-manager``) from
``devtools/cluster/go/trainer/``; they are built only when asked for (``--only jobset kuberay lws kubeflow trainer``,
``make operators``; ``LocalCluster(operators=[...])`` builds them on first use): the control plane build stays as
fast. Their module paths and comments still name ``tests/cluster``, where
they used to live: a module path is only a name here, and editing go.mod would force a cold rebuild.
Binaries go to ``.cache/cluster/bin/`` and the Go build cache to ``.cache/go-build``; the module cache is
the machine's default. A binary is rebuilt only when its inputs (go.mod, go.sum, Go sources, Go version,
build flags) change; the fingerprint is kept in ``.cache/cluster/bin/.stamp.json``.

    python -m devtools.cluster.build [--force] [--quiet] [--only NAME ...]   (or: python devtools/cluster/build.py)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")  # the default
TOOLS = ("helm", "jobset", "kuberay", "lws", "kubeflow", "trainer")  # built only when named (ensure_binaries(names=TOOLS)); the control plane never needs them
OPERATORS = ("jobset", "kuberay", "lws", "kubeflow", "trainer")  # workload operators LocalCluster(operators=[...]) can run (each a TOOLS entry)
LDFLAGS = "-s -w"
# Compiled without DWARF, which ``-s -w`` strips from the binary anyway: the Go build cache is a fifth smaller
# (JobSet: 0.87 GB instead of 1.1 GB) and the compile 6% cheaper. Not part of the fingerprint: the binaries
# behave the same, so a cache built before keeps its binaries.
GCFLAGS = "all=-dwarf=false"
# Below this much free disk the Go build cache (``.cache/go-build``, 8-11 GB once every binary is built) is
# emptied before the next build: it only speeds up rebuilds, and a full disk fails the build.
MIN_FREE_BYTES = 8 << 30
_STAMP = ".stamp.json"
KWOK_STAGES = "kwok-stages.yaml"  # written next to the kwok binary from the pinned kwok module
# kwok's stock "fast" stages: nodes become Ready (and keep a heartbeat), bound pods become Running and
# Ready, deleted pods go away. pod-complete is left out on purpose: a Job's pods stay Running, so a
# test can see a whole gang running at once.
_KWOK_STAGE_FILES = (
    "kustomize/stage/node/fast/node-initialize.yaml",
    "kustomize/stage/node/heartbeat/node-heartbeat.yaml",
    "kustomize/stage/pod/fast/pod-ready.yaml",
    "kustomize/stage/pod/fast/pod-delete.yaml",
)
GO_MODULES = Path("devtools") / "cluster" / "go"  # relative to the repository root
HELM_MODULE = Path("devtools") / "helm"


class BuildError(RuntimeError):
    pass


@dataclass(frozen=True)
class _Target:
    name: str
    module_dir: Path  # the Go module to build from
    package: str  # package path given to `go build`


def repo_root() -> Path:
    """The repository root (the directory holding ``devtools/cluster/go/go.mod``)."""
    env = os.environ.get("DEVCLUSTER_REPO_ROOT")
    candidates = [Path(env)] if env else []
    candidates += [Path(__file__).resolve().parents[2], Path.cwd()]
    for cand in candidates:
        if (cand / GO_MODULES / "go.mod").is_file():
            return cand
    raise BuildError(f"cannot find {GO_MODULES}/go.mod; set DEVCLUSTER_REPO_ROOT to the repository root")


def bin_dir() -> Path:
    """Where the binaries live (``DEVCLUSTER_BIN_DIR`` overrides ``<repo>/.cache/cluster/bin``)."""
    env = os.environ.get("DEVCLUSTER_BIN_DIR")
    return Path(env) if env else repo_root() / ".cache" / "cluster" / "bin"


def _targets(root: Path) -> list[_Target]:
    cluster = root / GO_MODULES
    return [
        _Target("etcd", cluster / "etcd", "."),
        _Target("kube-apiserver", cluster, "k8s.io/kubernetes/cmd/kube-apiserver"),
        _Target("kube-controller-manager", cluster, "k8s.io/kubernetes/cmd/kube-controller-manager"),
        _Target("kube-scheduler", cluster, "k8s.io/kubernetes/cmd/kube-scheduler"),
        _Target("kwok", cluster / "kwok", "sigs.k8s.io/kwok/cmd/kwok"),
        _Target("helm", root / HELM_MODULE, "helm.sh/helm/v3/cmd/helm"),
        _Target("jobset", cluster / "jobset", "sigs.k8s.io/jobset"),
        _Target("kuberay", cluster / "kuberay", "github.com/ray-project/kuberay/ray-operator"),
        _Target("lws", cluster / "lws", "sigs.k8s.io/lws/cmd"),
        _Target("kubeflow", cluster / "kubeflow", "github.com/kubeflow/training-operator/cmd/training-operator.v1"),
        _Target("trainer", cluster / "trainer", "github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager"),
    ]


def pinned_versions(root: Path | None = None) -> dict[str, str]:
    """The Kubernetes, etcd and kwok versions pinned in the go.mod files."""
    root = root or repo_root()
    out: dict[str, str] = {}
    for key, path, mod in (
        ("kubernetes", root / GO_MODULES / "go.mod", "k8s.io/kubernetes"),
        ("etcd", root / GO_MODULES / "etcd" / "go.mod", "go.etcd.io/etcd/server/v3"),
        ("kwok", root / GO_MODULES / "kwok" / "go.mod", "sigs.k8s.io/kwok"),
        ("helm", root / HELM_MODULE / "go.mod", "helm.sh/helm/v3"),
        ("helm-client-go", root / HELM_MODULE / "go.mod", "k8s.io/client-go"),
        ("jobset", root / GO_MODULES / "jobset" / "go.mod", "sigs.k8s.io/jobset"),
        ("kuberay", root / GO_MODULES / "kuberay" / "go.mod", "github.com/ray-project/kuberay/ray-operator"),
        ("lws", root / GO_MODULES / "lws" / "go.mod", "sigs.k8s.io/lws"),
        ("kubeflow", root / GO_MODULES / "kubeflow" / "go.mod", "github.com/kubeflow/training-operator"),
        ("trainer", root / GO_MODULES / "trainer" / "go.mod", "github.com/kubeflow/trainer/v2"),
    ):
        if not path.is_file():
            continue
        for line in path.read_text().splitlines():
            parts = line.replace("require", "").split()
            if len(parts) >= 2 and parts[0] == mod:
                out[key] = parts[1]
                break
    return out


def _go() -> str:
    go = shutil.which("go")
    if not go:
        raise BuildError("the `go` toolchain is not on PATH (needed to build the local control plane)")
    return go


def _go_version(go: str) -> str:
    return subprocess.run([go, "version"], check=True, capture_output=True, text=True).stdout.strip()


def _ldflags(target: _Target, versions: dict[str, str]) -> str:
    """``-s -w``, plus the version stamp of the Kubernetes binaries (what /version reports) and of helm."""
    helm = versions.get("helm", "")
    if target.package.startswith("helm.sh/helm/v3/") and helm.startswith("v3."):
        # like Helm's Makefile: the version, and the Kubernetes version `helm template` / `lint` assume
        # (from its client-go v0.X.Y: 1.X; else v1.20, which fails charts with a kubeVersion constraint)
        flags = [LDFLAGS, f"-X helm.sh/helm/v3/internal/version.version={helm}"]
        client_go = versions.get("helm-client-go", "")
        if client_go.startswith("v0."):
            minor = client_go.split(".")[1]
            for pkg in ("helm.sh/helm/v3/pkg/lint/rules", "helm.sh/helm/v3/pkg/chartutil"):
                flags += [f"-X {pkg}.k8sVersionMajor=1", f"-X {pkg}.k8sVersionMinor={minor}"]
        return " ".join(flags)
    k8s = versions.get("kubernetes", "")
    if not target.package.startswith("k8s.io/kubernetes/") or not k8s.startswith("v1."):
        return LDFLAGS
    major, minor = k8s[1:].split(".")[:2]
    stamp = {"gitVersion": k8s, "gitMajor": major, "gitMinor": minor, "gitTreeState": "clean"}
    flags = [LDFLAGS]
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [f"-X {pkg}.{k}={v}" for k, v in stamp.items()]
    return " ".join(flags)


def _fingerprint(target: _Target, go_version: str, ldflags: str) -> str:
    h = hashlib.sha256()
    h.update(f"{go_version}\n{target.package}\n{ldflags}\nCGO_ENABLED=0\n".encode())
    files = [target.module_dir / "go.mod", target.module_dir / "go.sum"]
    files += sorted(p for p in target.module_dir.glob("*.go"))
    for f in files:
        if f.is_file():
            h.update(f.name.encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def _load_stamp(bdir: Path) -> dict[str, str]:
    try:
        data = json.loads((bdir / _STAMP).read_text())
        return {str(k): str(v) for k, v in data.items()}
    except (OSError, ValueError):
        return {}


def _log(msg: str, quiet: bool) -> None:
    if not quiet:
        print(f"[devcluster] {msg}", file=sys.stderr, flush=True)


def make_room(cache: Path, quiet: bool, min_free: int = MIN_FREE_BYTES) -> bool:
    """Empty the Go build cache ``cache`` when the disk it is on has less than ``min_free`` bytes free;
    returns whether it did."""
    if not cache.is_dir() or shutil.disk_usage(cache).free >= min_free:
        return False
    _log(f"  less than {min_free >> 30} GB free: emptying the Go build cache {cache}", quiet)
    shutil.rmtree(cache, ignore_errors=True)
    return True


def _build_one(go: str, target: _Target, ldflags: str, out: Path, root: Path, quiet: bool) -> None:
    env = dict(os.environ)
    own_cache = root / ".cache" / "go-build"
    env.update(
        CGO_ENABLED="0",
        GOCACHE=os.environ.get("DEVCLUSTER_GOCACHE", str(own_cache)),
        GOTOOLCHAIN="local",
        GOFLAGS="-buildvcs=false -mod=readonly",
    )
    if "DEVCLUSTER_GOCACHE" not in os.environ:  # never empty a cache someone else pointed us at
        make_room(own_cache, quiet)
    tmp = out.with_name(out.name + ".tmp")
    cmd = [go, "build", "-v", "-trimpath", f"-gcflags={GCFLAGS}", f"-ldflags={ldflags}", "-o", str(tmp),
           target.package]
    start = time.monotonic()
    proc = subprocess.Popen(
        cmd, cwd=target.module_dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert proc.stdout is not None
    compiled = 0
    errors: list[str] = []
    done = threading.Event()

    def ticker() -> None:  # a progress line every 15 s, even when nothing new was printed
        while not done.wait(15):
            _log(f"  {target.name}: {compiled} packages compiled, {time.monotonic() - start:.0f}s", quiet)

    t = threading.Thread(target=ticker, daemon=True)
    t.start()
    try:
        for line in proc.stdout:
            line = line.rstrip("\n")
            # `go build -v` prints one import path per compiled package; anything else is an error/message
            if line and " " not in line and ":" not in line:
                compiled += 1
            elif line:
                errors.append(line)
                if line.startswith("go: downloading"):
                    _log(f"  {line}", quiet)
        rc = proc.wait()
    finally:
        done.set()
        t.join()
    if rc != 0:
        tmp.unlink(missing_ok=True)
        tail = "\n".join(errors[-40:])
        raise BuildError(f"go build of {target.name} failed (exit {rc}):\n{tail}")
    os.replace(tmp, out)
    if target.name == "kwok":
        _write_kwok_stages(go, target.module_dir, out.with_name(KWOK_STAGES), env)
    size = out.stat().st_size / 1e6
    _log(
        f"  {target.name}: built in {time.monotonic() - start:.0f}s ({compiled} packages, {size:.0f} MB)",
        quiet,
    )


def _write_kwok_stages(go: str, module_dir: Path, dest: Path, env: dict[str, str]) -> None:
    """Concatenate the stock Stage objects of the pinned kwok module into one ``--config`` file."""
    proc = subprocess.run(
        [go, "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/kwok"],
        cwd=module_dir,
        env=env,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0 or not proc.stdout.strip():
        raise BuildError(f"cannot locate the sigs.k8s.io/kwok module source: {proc.stderr.strip()}")
    src = Path(proc.stdout.strip())
    docs = [(src / rel).read_text().strip() for rel in _KWOK_STAGE_FILES]
    dest.write_text("\n---\n".join(docs) + "\n")


def ensure_binaries(force: bool = False, quiet: bool = False, names: tuple[str, ...] = BINARIES) -> Path:
    """Build whichever of ``names`` is missing or out of date; return the binary directory.

    Fast (a hash of a few files) when everything is up to date. The first cold build takes several
    minutes on a 2-core machine.
    """
    root = repo_root()
    bdir = bin_dir()
    bdir.mkdir(parents=True, exist_ok=True)
    stamp = _load_stamp(bdir)
    go = _go()
    go_version = _go_version(go)
    versions = pinned_versions(root)
    todo: list[tuple[_Target, str, str]] = []
    unknown = set(names) - set(BINARIES) - set(TOOLS)
    if unknown:
        raise BuildError(f"unknown binaries {sorted(unknown)}: known are {', '.join(BINARIES + TOOLS)}")
    for target in _targets(root):
        if target.name not in names:
            continue
        ldflags = _ldflags(target, versions)
        fp = _fingerprint(target, go_version, ldflags)
        missing = not (bdir / target.name).is_file()
        if target.name == "kwok":
            missing = missing or not (bdir / KWOK_STAGES).is_file()
        if force or missing or stamp.get(target.name) != fp:
            todo.append((target, ldflags, fp))
    if not todo:
        return bdir
    _log(
        f"building {', '.join(t.name for t, _, _ in todo)} (kubernetes {versions.get('kubernetes')}, "
        f"etcd {versions.get('etcd')}, kwok {versions.get('kwok')}, helm {versions.get('helm')}) into {bdir}; "
        "a cold build takes minutes",
        quiet,
    )
    for i, (target, ldflags, fp) in enumerate(todo, 1):
        _log(f"[{i}/{len(todo)}] building {target.name} ...", quiet)
        _build_one(go, target, ldflags, bdir / target.name, root, quiet)
        stamp[target.name] = fp
        (bdir / _STAMP).write_text(json.dumps(stamp, indent=1, sort_keys=True))
    return bdir


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m devtools.cluster.build", description=__doc__.split("\n")[0])
    ap.add_argument("--force", action="store_true", help="rebuild even when up to date")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument(
        "--only", nargs="+", metavar="NAME", default=list(BINARIES),
        help=f"build only these (default: the control plane; also: {', '.join(TOOLS)})",
    )
    args = ap.parse_args(argv)
    try:
        bdir = ensure_binaries(force=args.force, quiet=args.quiet, names=tuple(args.only))
    except BuildError as e:
        print(f"[devcluster] {e}", file=sys.stderr)
        return 1
    if not args.quiet:
        _log(f"binaries up to date in {bdir}: {', '.join(args.only)}", False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
