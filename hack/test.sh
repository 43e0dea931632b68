#!/usr/bin/env bash
# The whole test suite, as the README and CI run it: machine setup and tool
# builds (skipped when cached), unit tests, then end-to-end tests on local
# clusters. Prints how long each part took.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${ROOT}"

phase() {
  local name="$1"; shift
  local start=$SECONDS
  echo "==> ${name}" >&2
  "$@"
  echo "==> ${name}: $(( SECONDS - start ))s" >&2
}

export PATH="/usr/local/go/bin:${PATH}"
phase "setup and tool build" hack/setup.sh
# TestCompatibility's skewed pair runs its consumer on another Kubernetes.
phase "Kubernetes of the skewed pair" bash -c 'source hack/versions.env && OFFLOAD_KUBE_VERSION="${KUBE_SKEW_VERSION}" hack/tools.sh kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy'
phase "unit tests" bash -c 'go test -count=1 $(go list ./... | grep -v /test/e2e)'
# Budgets are counts of executions (about 10 s each here), not durations:
# with a -fuzztime duration, Go before 1.27 can fail a target with a bare
# "context deadline exceeded" at the deadline, with no failing input
# (go.dev/issue/75804); a count has no deadline to race.
phase "fuzz tests (bounded)" bash -c 'go test -run "^$" -fuzz "^FuzzParseToken$" -fuzztime 100000x -timeout 5m ./internal/peering/ &&
  go test -run "^$" -fuzz "^FuzzPeerRequest$" -fuzztime 10000x -timeout 5m ./internal/agent/provider/auth/ &&
  go test -run "^$" -fuzz "^FuzzUnverifiedBinding$" -fuzztime 30000x -timeout 5m ./internal/agent/provider/auth/ &&
  go test -run "^$" -fuzz "^FuzzRemotePod$" -fuzztime 150000x -timeout 5m ./internal/agent/consumer/reflection/'
# The upgrade test builds the release it upgrades from out of this
# repository's history: a shallow clone lacks it.
if [[ "$(git rev-parse --is-shallow-repository 2>/dev/null)" == true ]]; then
  phase "full history for the upgrade test" git fetch --quiet --unshallow
fi
phase "end-to-end tests" go test -p 1 -count=1 -timeout 60m ./test/e2e/...
