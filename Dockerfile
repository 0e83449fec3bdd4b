# Muster's container image: `make image` (Docker or Podman).
#
# Stage 1 builds Muster and every pinned dependency as wheels; stage 2 installs only
# those wheels (no compiler, no network) into a slim Python, and runs as a non-root
# user. Nothing is written at run time outside /tmp, so the root filesystem can be
# read-only (readOnlyRootFilesystem: true with an emptyDir on /tmp).
# hack/check-image-recipe.sh runs the same two stages without a container engine.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS wheels
WORKDIR /src
COPY pyproject.toml README.md ./
COPY base ./base
COPY quota ./quota
COPY extender ./extender
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM ${PYTHON_IMAGE}
RUN useradd --uid 65532 --no-create-home --shell /usr/sbin/nologin muster
COPY --from=wheels /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links /wheels muster \
    && rm -rf /wheels
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
USER 65532:65532
EXPOSE 8888
ENTRYPOINT ["muster"]
CMD ["serve", "--in-cluster", "--host", "0.0.0.0"]
