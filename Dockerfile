# The cnbrain image: the `cnbrain` command, for every brain and for the migrations.
#   docker build -t cnbrain .
#   docker run --rm cnbrain map show --map china
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    CNBRAIN_MIGRATIONS=/opt/cnbrain/migrations

WORKDIR /opt/cnbrain
COPY pyproject.toml README.md ./
COPY services ./services
COPY migrations ./migrations
RUN pip install . \
    && useradd --system --uid 10001 --create-home --home-dir /var/lib/cnbrain cnbrain

# A brain writes its files (the first admin's API key) in its working directory.
WORKDIR /var/lib/cnbrain
USER cnbrain

ENTRYPOINT ["cnbrain"]
CMD ["--help"]
