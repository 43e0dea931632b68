#!/usr/bin/env bash
# The demo: two local clusters, consumer and provider, started from the
# pinned binaries (built on first run), and their nodes. The clusters keep
# running; `make clusters-down` removes them.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${ROOT}"
export PATH="/usr/local/go/bin:${PATH}"

hack/setup.sh
make --no-print-directory build >/dev/null
while read -r name kubeconfig; do
  echo
  echo "== ${name} (export KUBECONFIG=${kubeconfig})"
  .cache/bin/kubectl --kubeconfig "${kubeconfig}" get nodes -o wide
done < <(go run ./hack/local-clusters up consumer provider)
echo
echo "bin/kubectl-offload is built; try: bin/kubectl-offload --kubeconfig .cache/clusters/clusters/consumer/kubeconfig.yaml version"
echo "Stop the clusters with: make clusters-down"
