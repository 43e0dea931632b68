#!/usr/bin/env bash
# gofmt and go vet, then golangci-lint built from the module proxy at the
# pinned version ($1), then govulncheck at the pinned version ($2).
# golangci-lint is skipped with a note when it cannot be built; govulncheck
# fails on a vulnerability the code reaches, and is skipped with a note when
# it cannot be built or its database (vuln.go.dev) cannot be reached.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${ROOT}"
VERSION="${1:?golangci-lint version}"
VULNCHECK_VERSION="${2:?govulncheck version}"
BIN="${OFFLOAD_CACHE_DIR:-${ROOT}/.cache}/bin"

unformatted="$(gofmt -l $(git ls-files '*.go'))"
if [[ -n "${unformatted}" ]]; then
  echo "gofmt would change:" >&2
  echo "${unformatted}" >&2
  exit 1
fi
go vet ./...

stamp="${BIN}/.stamps/golangci-lint"
if [[ ! -x "${BIN}/golangci-lint" || "$(cat "${stamp}" 2>/dev/null)" != "${VERSION}" ]]; then
  mkdir -p "${BIN}/.stamps"
  if GOBIN="${BIN}" go install "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@${VERSION}"; then
    printf '%s' "${VERSION}" > "${stamp}"
  else
    echo "note: golangci-lint ${VERSION} could not be built here; ran gofmt and go vet only" >&2
    exit 0
  fi
fi
"${BIN}/golangci-lint" run ./...

vstamp="${BIN}/.stamps/govulncheck"
if [[ ! -x "${BIN}/govulncheck" || "$(cat "${vstamp}" 2>/dev/null)" != "${VULNCHECK_VERSION}" ]]; then
  if GOBIN="${BIN}" go install "golang.org/x/vuln/cmd/govulncheck@${VULNCHECK_VERSION}"; then
    printf '%s' "${VULNCHECK_VERSION}" > "${vstamp}"
  else
    echo "note: govulncheck ${VULNCHECK_VERSION} could not be built here; skipped" >&2
    exit 0
  fi
fi
# -format json exits 0 whatever it finds; the text format exits 3 on a
# reachable vulnerability and 1 when it cannot run at all.
set +e
out="$("${BIN}/govulncheck" ./... 2>&1)"
rc=$?
set -e
case "${rc}" in
  0) ;;
  3) echo "${out}" >&2; exit 1 ;;
  *) if grep -q "fetching vulnerabilities" <<<"${out}"; then
       echo "note: govulncheck could not reach its database (vuln.go.dev); skipped" >&2
     else
       echo "${out}" >&2; exit 1
     fi ;;
esac
