# syntax=docker/dockerfile:1
#
# The offload-agent image, built from source.
#
#   docker buildx build --platform linux/amd64,linux/arm64 \
#     --build-arg VERSION="$(git describe --tags --always --dirty)" \
#     --build-arg COMMIT="$(git rev-parse --short HEAD)" \
#     --build-arg BUILD_DATE="$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
#     -t ghcr.io/kubectl-offload/offload-agent:dev .
#
# Releases do not use this file: goreleaser builds the binaries once and
# copies them into Dockerfile.goreleaser's image.

ARG GO_VERSION=1.26

# The builder runs on the build host's platform and cross-compiles for the
# target, so multi-platform builds need no emulation.
FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
ARG TARGETOS
ARG TARGETARCH
ARG VERSION=v0.0.0-dev
ARG COMMIT=unknown
ARG BUILD_DATE=unknown
WORKDIR /src

COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod \
    go mod download

# Only the Go source trees go in, so the local tool cache (.cache/), bin/ and
# dist/ never reach the build context. A new top-level Go directory that the
# agent imports must be added here.
COPY api/ api/
COPY charts/ charts/
COPY cmd/ cmd/
COPY internal/ internal/

RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} \
    go build -trimpath \
      -ldflags "-s -w \
        -X github.com/kubectl-offload/kubectl-offload/internal/buildinfo.Version=${VERSION} \
        -X github.com/kubectl-offload/kubectl-offload/internal/buildinfo.Commit=${COMMIT} \
        -X github.com/kubectl-offload/kubectl-offload/internal/buildinfo.BuildDate=${BUILD_DATE}" \
      -o /out/offload-agent ./cmd/offload-agent

FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION=v0.0.0-dev
LABEL org.opencontainers.image.title="offload-agent" \
      org.opencontainers.image.description="In-cluster agent of kubectl offload" \
      org.opencontainers.image.source="https://github.com/kubectl-offload/kubectl-offload" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}"
COPY --from=build /out/offload-agent /offload-agent
USER 65532:65532
ENTRYPOINT ["/offload-agent"]
