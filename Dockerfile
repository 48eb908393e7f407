# Image for the pod grouper: `docker build -t kai-pod-grouper .`
# (This repository's CI machine has no container engine; the image is built by release tooling.)
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY grouper ./grouper
# the built-in Karta catalog becomes package data (grouper/definitions/) of the wheel
COPY definitions ./definitions
RUN pip install --no-cache-dir --prefix=/install .

FROM python:3.11-slim
LABEL org.opencontainers.image.title="kai-pod-grouper" \
      org.opencontainers.image.description="Gang-scheduling pod grouper for KAI Scheduler"
COPY --from=build /install /usr/local
ENV PYTHONUNBUFFERED=1
# Non-root, no shell needed at run time.
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["grouper", "run"]
CMD ["--leader-elect=true", "--log-format=json"]
