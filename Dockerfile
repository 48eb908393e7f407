# Image for the pod grouper:  make image  (podman; see devtools/image/build.py), or
#   docker build -t kai-pod-grouper .
# BASE is any image with Python >= 3.11 whose `python3 -m venv` works: the public slim Python image by
# default; the tests build from a base made here from Debian packages (mmdebstrap, devtools/image/).
# PIP_CERT (optional): a CA bundle path visible to RUN (e.g. a build volume) for a TLS-intercepting proxy.
ARG BASE=docker.io/library/python:3.11-slim

# --- build: the runtime dependencies (a layer of their own: a source change does not reinstall them), then
#     the wheel (`python -m build`: the `grouper` package + the Karta catalog as package data; no tests, no
#     devtools) installed into a venv that the runtime stage copies whole
FROM ${BASE} AS build
ARG PIP_CERT
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN python3 -m venv /opt/build \
 && /opt/build/bin/pip install --quiet ${PIP_CERT:+--cert "$PIP_CERT"} "build>=1.2" "hatchling>=1.25"
COPY pyproject.toml ./
RUN python3 -m venv /opt/grouper \
 && /opt/build/bin/python -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))' > /tmp/requirements.txt \
 && /opt/grouper/bin/pip install --quiet ${PIP_CERT:+--cert "$PIP_CERT"} -r /tmp/requirements.txt
COPY README.md ./
COPY grouper ./grouper
COPY definitions ./definitions
RUN /opt/build/bin/python -m build --wheel --no-isolation --outdir /wheels . \
 && /opt/grouper/bin/pip install --quiet --no-deps /wheels/*.whl \
 && /opt/grouper/bin/pip check \
 && /opt/grouper/bin/python -m pip uninstall --quiet --yes pip setuptools \
 && /opt/grouper/bin/python -m compileall -q /opt/grouper \
 && /opt/grouper/bin/grouper --help >/dev/null

# --- runtime: the base plus the venv; nothing else
FROM ${BASE}
LABEL org.opencontainers.image.title="kai-pod-grouper" \
      org.opencontainers.image.description="Gang-scheduling pod grouper for KAI Scheduler" \
      org.opencontainers.image.source="https://github.com/kai-pod-grouper/kai-pod-grouper" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /opt/grouper /opt/grouper
# bytecode is precompiled above: nothing is written at run time (read-only root filesystem)
ENV PATH=/opt/grouper/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
# non-root (the chart sets runAsNonRoot, readOnlyRootFilesystem, drops all capabilities)
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["grouper", "run"]
CMD ["--leader-elect=true", "--log-format=json"]
