# The outbox relay (`outbox-relay`, the entrypoint) and the consumer CLI
# (`--entrypoint outbox-consumer`) in one small image.
#
#   docker build -t outbox-relay .
#   docker run --rm --read-only -e OUTBOX_DATABASE_URL=... -e OUTBOX_KAFKA_BOOTSTRAP_SERVERS=... \
#     -e OUTBOX_KAFKA_SECURITY_PROTOCOL=SSL outbox-relay run
#
# BASE_IMAGE must be a Debian-based Python 3.11+ image with `python` on PATH and the venv
# module; where no registry is reachable, build one locally and pass
# --build-arg BASE_IMAGE=<it> (docs/deploy.md shows how). Nothing secret is baked in:
# every setting comes from the environment (OUTBOX_*) or from mounted files (*_FILE).
ARG BASE_IMAGE=python:3.11-slim

# ---------------------------------------------------------------- build: a venv in /opt/venv
FROM ${BASE_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/venv
WORKDIR /src
# Dependencies first, pinned by constraints.txt: this layer is reused until they change.
COPY pyproject.toml constraints.txt ./
# The relay and consumer extras, redis and mariadb: one image serves both commands,
# OUTBOX_TRANSPORT=kafka and =redis, and Postgres, SQLite and MariaDB URLs (mariadb is
# PyMySQL and aiomysql, pure Python: no client library in the image).
RUN python -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; e = p['optional-dependencies']; print('\n'.join(p['dependencies'] + e['relay'] + e['consumer'] + e['redis'] + e['mariadb']))" > requirements.txt \
 && /opt/venv/bin/pip install -c constraints.txt -r requirements.txt
# Then the project itself (its dependencies are already there, at the pinned versions).
COPY README.md LICENSE ./
COPY outbox_core ./outbox_core
COPY relay ./relay
COPY producer_lib ./producer_lib
COPY consumer_lib ./consumer_lib
COPY migrations ./migrations
RUN /opt/venv/bin/pip install --no-deps . \
 && /opt/venv/bin/pip uninstall -y -q pip setuptools \
 && /opt/venv/bin/outbox-relay --help > /dev/null \
 && /opt/venv/bin/outbox-consumer --help > /dev/null

# ---------------------------------------------------------------- runtime
FROM ${BASE_IMAGE} AS runtime
LABEL org.opencontainers.image.title="outbox-relay" \
      org.opencontainers.image.description="Transactional outbox relay (and consumer CLI) for Kafka and Redis Streams" \
      org.opencontainers.image.licenses="Apache-2.0"
# A fixed numeric user, so Kubernetes can check runAsNonRoot without a passwd lookup.
RUN groupadd --system --gid 10001 outbox \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin outbox
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# Runs with a read-only root file system: nothing is written but sockets.
USER 10001:10001
# /metrics, /healthz and /readyz (set OUTBOX_HTTP_HOST=0.0.0.0 to reach them from outside).
EXPOSE 9400
ENTRYPOINT ["outbox-relay"]
CMD ["run"]
