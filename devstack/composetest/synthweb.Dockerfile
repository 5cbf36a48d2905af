# The compose test's synthetic web (cmd/trawl-synthweb), on the services' base images.
# Build context: devstack/. The web imports the standard library only, so the module
# builds without shared/ and without downloads.
FROM golang:1.26-bookworm AS build
WORKDIR /src
ENV GOWORK=off CGO_ENABLED=0
COPY go.mod go.sum devstack/
COPY synthweb/ devstack/synthweb/
COPY cmd/trawl-synthweb/ devstack/cmd/trawl-synthweb/
RUN cd devstack && go build -trimpath -ldflags="-s -w" -o /out/trawl-synthweb ./cmd/trawl-synthweb

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/trawl-synthweb /usr/local/bin/trawl-synthweb
USER nonroot:nonroot
ENTRYPOINT ["/usr/local/bin/trawl-synthweb"]
