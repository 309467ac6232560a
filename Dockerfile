# topogang extender image: `topogang serve` as a non-root user on a slim, pinned Python.
FROM python:3.11.13-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

RUN groupadd --gid 10001 topogang && useradd --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin topogang

WORKDIR /app

# Dependencies first (their own layer): only pyproject.toml's pinned list, so code edits keep the cache.
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
        > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt \
    && rm /tmp/requirements.txt

COPY README.md topogang_cli.py ./
COPY topology ./topology
COPY config ./config
COPY extender ./extender
COPY loadtest ./loadtest
RUN pip install --no-deps . && rm -rf build *.egg-info

USER 10001:10001
EXPOSE 9096
ENTRYPOINT ["topogang", "serve"]
# In a cluster the chart (and deploy/extender.yaml) passes these plus the log level and leader election;
# `docker run IMAGE --listen 0.0.0.0:9096` serves the bundled example cluster standalone instead.
CMD ["--kube", "--config", "/etc/topogang/config.yaml", "--listen", ":9096"]
