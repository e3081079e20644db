# runner itself in a container: `runner serve` as an unprivileged user, state in a volume.
#   docker build -t runner .
#   docker run -d --init --name runner -v runner-home:/var/lib/runner \
#     -v "$PWD":/srv/project:ro -w /srv/project -e OPENAI_API_KEY runner
# The dashboard from the same serve (a bind beyond loopback needs a token first, docs/web.md):
#   docker run --rm -v runner-home:/var/lib/runner runner runner web token
#   docker run ... -p 9119:9119 runner runner serve --web 0.0.0.0:9119
# (docs/operations.md "Docker"). Jobs using the docker backend need the Docker socket mounted too.
# The agents' sandbox (bubblewrap) needs user namespaces in the container: add
#   --security-opt seccomp=unconfined --security-opt apparmor=unconfined
# or give jobs `sandbox: off` (then the container is their only boundary, keys included).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    RUNNER_HOME=/var/lib/runner

# the service user: the same line as contrib/systemd/runner.service and docs/operations.md
RUN apt-get update \
    && apt-get install -y --no-install-recommends git openssh-client ca-certificates bubblewrap \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --create-home --home-dir /var/lib/runner --shell /usr/sbin/nologin runner \
    && chmod 0700 /var/lib/runner

WORKDIR /opt/runner
COPY pyproject.toml README.md ./
COPY runner ./runner
# web: the dashboard (runner serve --web, runner web). More: --build-arg EXTRAS=web,otel,distributed
# (contrib/compose: PostgreSQL + Celery)
ARG EXTRAS=web,otel
# the package compiled where pip put it (-P: not the sources in this WORKDIR)
RUN pip install ".[${EXTRAS}]" \
    && site="$(python -P -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
    && python -m compileall -q "$site/runner"

USER runner
WORKDIR /srv/project
VOLUME ["/var/lib/runner"]
STOPSIGNAL SIGTERM
# serve's heartbeat in the store (written every serve.heartbeat_s): exit 1 when serve is down or
# its main loop stopped beating
HEALTHCHECK --interval=30s --timeout=10s --start-period=30s --retries=3 CMD ["runner", "serve", "status"]
CMD ["runner", "serve"]
