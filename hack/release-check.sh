#!/usr/bin/env bash
# Validates .goreleaser.yaml with goreleaser built from the Go module proxy at
# the pinned version ($1, default below) into .cache/bin.
#
# Idempotent: goreleaser is rebuilt only when its binary is missing or was
# built for another version (recorded in .cache/bin/.stamps/goreleaser).
# The first build takes about six minutes; later runs take a second.
#
# Why v2.16.0: v2.18.x needs Go >= 1.27, and v2.17.0 depends on
# go.digitalxero.dev/go-msix, which the module proxy does not serve here.
#
# Usage: hack/release-check.sh [goreleaser-version]
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${ROOT}"
VERSION="${1:-v2.16.0}"
CACHE="${OFFLOAD_CACHE_DIR:-${ROOT}/.cache}"
BIN="${CACHE}/bin"
STAMP="${BIN}/.stamps/goreleaser"

log() { printf '%s %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

if [[ ! -x "${BIN}/goreleaser" || "$(cat "${STAMP}" 2>/dev/null)" != "${VERSION}" ]]; then
  mkdir -p "${BIN}/.stamps"
  log "building goreleaser ${VERSION}"
  start=$(date +%s)
  if ! GOBIN="${BIN}" GOFLAGS= CGO_ENABLED=0 \
    go install -trimpath -ldflags "-s -w" "github.com/goreleaser/goreleaser/v2@${VERSION}"; then
    echo "error: goreleaser ${VERSION} could not be built with $(go version | cut -d' ' -f3); pick a version whose go.mod Go fits (go list -m -json github.com/goreleaser/goreleaser/v2@VERSION)" >&2
    exit 1
  fi
  printf '%s' "${VERSION}" > "${STAMP}"
  log "goreleaser ${VERSION} built in $(( $(date +%s) - start ))s"
fi

"${BIN}/goreleaser" check
