# syntax=docker/dockerfile:1
# hpcmon images: one wheel of this repository, installed with the extra of each role.
#
#   docker build --target exporter -t <registry>/hpcmon-exporter:<version> .   (the default target)
#   docker build --target post-job -t <registry>/hpcmon-post-job:<version> .
#
# The Helm chart (helm/hpcmon) runs these images' entry points with its own arguments:
# hpcmon-exporter in its DaemonSets, `hpcmon-post-job flush` in its CronJob. Its default image
# tag is the chart's appVersion, the package version in pyproject.toml.
# Debian slim, not distroless: the chart's lctl mode runs `chroot` through /bin/sh, and its
# energy_uj group mode runs find/chgrp/chmod in an init container of the same image.
# The Python the test suite runs on (pyproject: requires-python >= 3.11).
# checkov:skip=CKV_DOCKER_7: every FROM is this ARG, a versioned tag (checkov cannot expand it)
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --- the wheel -------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

# --- one virtualenv per role, with the role's extra --------------------------------------------
FROM ${PYTHON_IMAGE} AS exporter-venv
COPY --from=wheel /wheels /wheels
RUN python -m venv /opt/hpcmon \
    && /opt/hpcmon/bin/pip install --no-cache-dir "$(ls /wheels/hpcmon-*.whl)[exporter]"

FROM ${PYTHON_IMAGE} AS post-job-venv
COPY --from=wheel /wheels /wheels
RUN python -m venv /opt/hpcmon \
    && /opt/hpcmon/bin/pip install --no-cache-dir "$(ls /wheels/hpcmon-*.whl)[post-job]"

# --- post-job: hpcmon-post-job (the chart's flush CronJob) ------------------------------------
FROM ${PYTHON_IMAGE} AS post-job
LABEL org.opencontainers.image.title="hpcmon-post-job" \
      org.opencontainers.image.description="hpcmon post-job hook: Darshan, Recorder, VizTracer, GEOPM reports -> InfluxDB" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=post-job-venv /opt/hpcmon /opt/hpcmon
ENV PATH=/opt/hpcmon/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
# nobody:nogroup; the chart sets the uid that owns the spool.
USER 65534:65534
# A command that runs to completion (the chart's flush CronJob): nothing to probe.
HEALTHCHECK NONE
ENTRYPOINT ["hpcmon-post-job"]
CMD ["--help"]

# --- exporter: hpcmon-exporter (the chart's DaemonSets); the default target -------------------
FROM ${PYTHON_IMAGE} AS exporter
LABEL org.opencontainers.image.title="hpcmon-exporter" \
      org.opencontainers.image.description="hpcmon Prometheus exporter: Lustre jobstats, GEOPM/RAPL power, Slurm jobs" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=exporter-venv /opt/hpcmon /opt/hpcmon
ENV PATH=/opt/hpcmon/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
# nobody:nogroup; the chart runs uid 0 only where the host's files demand it (energy_uj, lctl).
USER 65534:65534
EXPOSE 19325
# The default listen address (the chart uses its own probes, on the port it sets).
HEALTHCHECK --interval=30s --timeout=5s \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:19325/metrics', timeout=4)"]
ENTRYPOINT ["hpcmon-exporter"]
CMD ["--web.listen-address=:19325"]
