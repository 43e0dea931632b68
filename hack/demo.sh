#!/usr/bin/env bash
# The demo: two local clusters, consumer and provider, each with a real node
# (kubelet + containerd) beside kwok fake nodes, and kubectl-offload installed
# on both, its agent running as real pods. Everything it needs is built on
# the first run. The clusters keep running; `make clusters-down` removes them.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${ROOT}"
export PATH="/usr/local/go/bin:${PATH}"

hack/setup.sh
make --no-print-directory build >/dev/null
KUBECTL="${ROOT}/.cache/bin/kubectl"
OFFLOAD="${ROOT}/bin/kubectl-offload"
# The agent image imported into the real nodes, and its pods pinned to them.
AGENT=(--set image.repository=registry.local/offload/offload-agent --set image.tag=test --set image.pullPolicy=Never
  --set 'controllerManager.nodeSelector.offload\.io/test-node=real' --set 'auth.nodeSelector.offload\.io/test-node=real')

while read -r name kubeconfig; do
  echo
  echo "== ${name} (export KUBECONFIG=${kubeconfig})"
  "${KUBECTL}" --kubeconfig "${kubeconfig}" get nodes -o wide
  "${OFFLOAD}" --kubeconfig "${kubeconfig}" install --cluster-name "${name}" "${AGENT[@]}"
  "${KUBECTL}" --kubeconfig "${kubeconfig}" -n offload-system get pods -o wide
  "${OFFLOAD}" --kubeconfig "${kubeconfig}" status
done < <(go run ./hack/local-clusters up consumer provider)
echo
echo "Try: ${OFFLOAD} --kubeconfig .cache/clusters/clusters/consumer/kubeconfig.yaml status"
echo "Stop the clusters with: make clusters-down"
