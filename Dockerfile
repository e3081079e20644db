# runner itself in a container: `runner serve` as an unprivileged user, state in a volume.
#   docker build -t runner .
#   docker run -d --init --name runner -v runner-home:/var/lib/runner \
#     -v "$PWD":/srv/project:ro -w /srv/project -e OPENAI_API_KEY runner
# (docs/operations.md "Docker"). Jobs using the docker backend need the Docker socket mounted too.
# The agents' sandbox (bubblewrap) needs user namespaces in the container: add
#   --security-opt seccomp=unconfined --security-opt apparmor=unconfined
# or give jobs `sandbox: off` (then the container is their only boundary, keys included).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    RUNNER_HOME=/var/lib/runner

RUN apt-get update \
    && apt-get install -y --no-install-recommends git openssh-client ca-certificates bubblewrap \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --create-home --home-dir /home/runner runner \
    && install -d -o runner -g runner -m 0700 /var/lib/runner

WORKDIR /opt/runner
COPY pyproject.toml README.md ./
COPY runner ./runner
COPY backends ./backends
# extras: docker build --build-arg EXTRAS=otel,distributed (contrib/compose: PostgreSQL + Celery)
ARG EXTRAS=otel
RUN pip install ".[${EXTRAS}]" && python -m compileall -q /usr/local/lib/python3.11/site-packages/runner

USER runner
WORKDIR /srv/project
VOLUME ["/var/lib/runner"]
STOPSIGNAL SIGTERM
CMD ["runner", "serve"]
