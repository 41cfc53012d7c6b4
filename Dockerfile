# The dispatch-reconciler image, as the Helm chart (charts/dispatch-reconciler) runs it:
# non-root (uid 10001), read-only root filesystem, the Git cache on an emptyDir.
# Not built in this repository's CI (no container engine there); build it yourself:
#   docker build -t dispatch-reconciler:0.1.0 .
FROM python:3.11-slim

# git for the config repo; openssh-client for ssh:// and git@ URLs.
RUN apt-get update \
    && apt-get install -y --no-install-recommends git openssh-client ca-certificates \
    && rm -rf /var/lib/apt/lists/*

# A fixed uid with a passwd entry: ssh refuses to run for a uid it cannot look up.
RUN groupadd --gid 10001 reconciler \
    && useradd --uid 10001 --gid 10001 --home-dir /home/reconciler --create-home \
       --shell /usr/sbin/nologin reconciler

WORKDIR /src
COPY pyproject.toml README.md ./
COPY reconciler ./reconciler
RUN pip install --no-cache-dir . && rm -rf /src

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
USER 10001:10001
WORKDIR /home/reconciler
EXPOSE 8080
ENTRYPOINT ["reconciler"]
CMD ["--help"]
