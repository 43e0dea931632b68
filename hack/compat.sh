#!/usr/bin/env bash
# make compat: TestCompatibility (test/e2e/compat_test.go) on every pair of
# the compatibility matrix: each version of KUBE_COMPAT_VERSIONS with
# itself, then the newest consumer with the oldest provider and the
# reverse. Builds each version's Kubernetes commands once (about 15 minutes
# each, cold, on 2 cores), then writes the result table, with the date and
# the commit, into docs/compatibility.md. Exits non-zero when a check failed.
#
# Usage: hack/compat.sh [CONSUMER:PROVIDER ...]   (default: the whole matrix)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${ROOT}"
export PATH="/usr/local/go/bin:${PATH}"
source hack/versions.env

pairs=("$@")
if [[ ${#pairs[@]} -eq 0 ]]; then
  IFS=, read -ra versions <<< "${KUBE_COMPAT_VERSIONS}"
  for v in "${versions[@]}"; do pairs+=("${v}:${v}"); done
  oldest="${versions[0]}" newest="${versions[${#versions[@]}-1]}"
  pairs+=("${newest}:${oldest}" "${oldest}:${newest}")
fi

hack/setup.sh
for pair in "${pairs[@]}"; do
  OFFLOAD_KUBE_VERSION="${pair%%:*}" hack/tools.sh kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy
  OFFLOAD_KUBE_VERSION="${pair##*:}" hack/tools.sh kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy
done

results="${ROOT}/.cache/compat"
rm -rf "${results}"
mkdir -p "${results}"
for pair in "${pairs[@]}"; do
  consumer="${pair%%:*}" provider="${pair##*:}"
  echo "==> consumer on Kubernetes ${consumer}, provider on ${provider}" >&2
  start=$SECONDS
  OFFLOAD_COMPAT_CONSUMER="${consumer}" OFFLOAD_COMPAT_PROVIDER="${provider}" \
    go test -p 1 -count=1 -timeout 30m -json -run '^TestCompatibility$' ./test/e2e/ > "${results}/${consumer}_${provider}.json" || true
  go run ./hack/compat -summary "${results}/${consumer}_${provider}.json" >&2
  echo "==> ${consumer} / ${provider}: $(( SECONDS - start ))s" >&2
done
go run ./hack/compat -doc docs/compatibility.md "${results}"/*.json
