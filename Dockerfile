# Every service image, from one file: SERVICE names the service (its directory under
# services/), the target its runtime. compose.yaml builds each service with the repository
# root as the context (shared/ must be visible), e.g.
#
#   docker build --build-arg SERVICE=fetcher --target service .
#
# Targets: `service` (scheduler, fetcher, parser, dedup) on the static runtime image;
# `archiver`, the same plus its archive directory; `renderer` on Debian with Chromium.
# SERVICE has no default: a build without it fails at its first COPY.
#
# The base images are build arguments (compose.yaml passes TRAWL_GO_IMAGE,
# TRAWL_RUNTIME_IMAGE and TRAWL_RENDERER_RUNTIME_IMAGE) for a site that mirrors images into
# its own registry or builds its own: GO_IMAGE needs the go command, RUNTIME_IMAGE a
# `nonroot` user and group, which the services run as, RENDERER_RUNTIME_IMAGE a Debian
# release whose apt-get installs chromium. No `# syntax=` line: BuildKit's built-in frontend
# reads this file, where a named one would first be pulled from a registry.
#
# The stages are in this order because the classic builder (DOCKER_BUILDKIT=0) builds every
# stage up to the target, where BuildKit builds only those the target needs: the renderer's
# apt-get comes last, so no other image waits on it.
ARG GO_IMAGE=golang:1.26-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/static-debian12:nonroot
ARG RENDERER_RUNTIME_IMAGE=debian:bookworm-slim

FROM ${GO_IMAGE} AS build
ARG SERVICE
WORKDIR /src
ENV GOWORK=off CGO_ENABLED=0
COPY shared/ shared/
COPY services/${SERVICE}/go.mod services/${SERVICE}/go.sum services/${SERVICE}/
RUN cd services/${SERVICE} && go mod download
COPY services/${SERVICE}/ services/${SERVICE}/
# The binary keeps its service's name (/usr/local/bin/<service>, which the healthchecks and
# `docker compose exec` call). An exec-form ENTRYPOINT expands no argument, and the runtime
# image has no shell to expand one, so the entrypoint is a fixed name linked to it.
RUN cd services/${SERVICE} && go build -trimpath -ldflags="-s -w" -o /out/bin/${SERVICE} . \
 && ln -s ${SERVICE} /out/bin/trawl-service
# The archiver's directory, made here because its runtime image has no shell to make it.
RUN mkdir -p /out/warc

FROM ${RUNTIME_IMAGE} AS service
COPY --from=build /out/bin/ /usr/local/bin/
USER nonroot:nonroot
ENTRYPOINT ["/usr/local/bin/trawl-service"]

# A target of its own rather than /warc in every image: only the archiver writes there. The
# directory exists in the image, owned by the user that writes it, so a named volume
# mounted there starts with that ownership.
FROM service AS archiver
COPY --from=build --chown=nonroot:nonroot /out/warc /warc
ENV TRAWL_ARCHIVE_DIR=/warc

# The renderer needs a browser: Debian's chromium, installed with apt-get, and a `nonroot`
# user (65532, as distroless's) made to run it.
FROM ${RENDERER_RUNTIME_IMAGE} AS renderer
RUN apt-get update \
 && apt-get install -y --no-install-recommends chromium ca-certificates fonts-liberation tini \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd -g 65532 nonroot && useradd -u 65532 -g nonroot -m -d /home/nonroot nonroot
COPY --from=build /out/bin/ /usr/local/bin/
USER nonroot:nonroot
ENV TRAWL_CHROMIUM=/usr/bin/chromium
# tini (Debian's) is PID 1 and reaps: a browser that stops (crashed, hung, over its memory
# cap) leaves its child processes to PID 1, and the renderer waits only for the browser it
# started, so as PID 1 it would keep them as zombies, six a stop, until the container ends
# (devstack/composetest TestRenderProfile). -s: still the reaper when a `docker run
# --init` or a pod's shared process namespace makes another process PID 1.
ENTRYPOINT ["/usr/bin/tini", "-s", "--", "/usr/local/bin/trawl-service"]
