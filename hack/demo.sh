#!/usr/bin/env bash
# The demo: two local clusters, consumer and provider, each with a real node
# (kubelet + containerd) beside kwok fake nodes, kubectl-offload installed on
# both with its agent running as real pods, and the consumer peered with the
# provider through the command peer generate prints. Everything it needs is
# built on the first run. The clusters keep running; `make clusters-down`
# removes them.
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

declare -A KUBECONFIGS
while read -r name kubeconfig apiserver; do
  echo
  echo "== ${name} (export KUBECONFIG=${kubeconfig})"
  KUBECONFIGS[${name}]="${kubeconfig}"
  "${KUBECTL}" --kubeconfig "${kubeconfig}" get nodes -o wide
  # The API server as the other cluster's pods reach it.
  "${OFFLOAD}" --kubeconfig "${kubeconfig}" install --cluster-name "${name}" --api-server-url "${apiserver}" "${AGENT[@]}"
  "${OFFLOAD}" --kubeconfig "${kubeconfig}" status --wait --timeout 3m >/dev/null
  "${KUBECTL}" --kubeconfig "${kubeconfig}" -n offload-system get pods -o wide
done < <(go run ./hack/local-clusters up consumer provider)

CONSUMER="${KUBECONFIGS[consumer]}"
PROVIDER="${KUBECONFIGS[provider]}"
echo
echo "== peering: the provider prints a command, the consumer runs it"
if "${KUBECTL}" --kubeconfig "${CONSUMER}" get foreigncluster provider >/dev/null 2>&1; then
  echo "(already peered)"
else
  command="$("${OFFLOAD}" --kubeconfig "${PROVIDER}" peer generate)"
  echo "${command}" | sed -E 's/(--auth-token )[^ ]+/\1<redacted>/'
  read -ra args <<<"${command#kubectl offload }"
  "${OFFLOAD}" --kubeconfig "${CONSUMER}" "${args[@]}"
fi
"${KUBECTL}" --kubeconfig "${CONSUMER}" get nodes
"${OFFLOAD}" --kubeconfig "${CONSUMER}" status
echo
echo "Try: ${OFFLOAD} --kubeconfig ${CONSUMER} status peer provider"
echo "Stop the clusters with: make clusters-down"
