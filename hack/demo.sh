#!/usr/bin/env bash
# The demo: two local clusters, consumer and provider, each with a real node
# (kubelet + containerd) beside kwok fake nodes, kubectl-offload installed on
# both with its agent running as real pods, and the consumer peered with the
# provider through the command peer generate prints, then namespace demo
# offloaded with a Deployment spread over local and virtual nodes; the
# offloaded replicas run on the provider. Both clusters declare the same pod
# CIDR and the network fabric joins them: a Service of the consumer answers
# from replicas in both clusters, and an offloaded pod calls it by name.
# Everything it needs is built on the first run. The clusters keep running; `make clusters-down`
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
  --set 'controllerManager.nodeSelector.offload\.io/test-node=real' --set 'auth.nodeSelector.offload\.io/test-node=real'
  # The network fabric is on by default: install detects the same pod CIDR
  # on both sides (10.244.0.0/16, kind's and kubeadm's default), so every
  # flow between the clusters is translated.
  --set 'network.gateway.nodeSelector.offload\.io/test-node=real')

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

echo
echo "== offloading namespace demo, and a Deployment of 6 replicas spread over the local and virtual nodes"
"${KUBECTL}" --kubeconfig "${CONSUMER}" create namespace demo --dry-run=client -o yaml | "${KUBECTL}" --kubeconfig "${CONSUMER}" apply -f -
"${OFFLOAD}" --kubeconfig "${CONSUMER}" namespace demo --pod-offloading-strategy LocalAndRemote --wait
# The test application, spread over the nodes at most one apart so that the
# virtual node gets its share. The provider's kwok nodes are labelled as
# simulated, and the pods prefer nodes that are not: the virtual node
# qualifies, so the preference travels with the offloaded replicas and runs
# them on the provider's real node, in real containers, first.
"${KUBECTL}" --kubeconfig "${PROVIDER}" label nodes -l type=kwok --overwrite demo.kubectl-offload.dev/simulated=true >/dev/null
"${KUBECTL}" --kubeconfig "${CONSUMER}" -n demo apply -f - <<'YAML'
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 6
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      terminationGracePeriodSeconds: 2
      topologySpreadConstraints:
      - maxSkew: 1
        topologyKey: kubernetes.io/hostname
        whenUnsatisfiable: DoNotSchedule
        labelSelector:
          matchLabels: {app: web}
      affinity:
        nodeAffinity:
          preferredDuringSchedulingIgnoredDuringExecution:
          - weight: 100
            preference:
              matchExpressions:
              - {key: demo.kubectl-offload.dev/simulated, operator: DoesNotExist}
      containers:
      - name: app
        image: registry.local/offload/testapp:test
        imagePullPolicy: Never
        ports:
        - containerPort: 8080
        readinessProbe:
          httpGet: {path: /healthz, port: 8080}
          periodSeconds: 2
YAML
"${KUBECTL}" --kubeconfig "${CONSUMER}" -n demo rollout status deployment/web --timeout 3m
echo
echo "== consumer: kubectl -n demo get pods -o wide"
"${KUBECTL}" --kubeconfig "${CONSUMER}" -n demo get pods -o wide
TWIN="$("${KUBECTL}" --kubeconfig "${CONSUMER}" -n demo get namespaceoffloading offloading -o jsonpath='{.status.remoteNamespaces[0].remoteNamespace}')"
echo
echo "== provider: kubectl -n ${TWIN} get pods -o wide"
"${KUBECTL}" --kubeconfig "${PROVIDER}" -n "${TWIN}" get pods -o wide
echo
"${OFFLOAD}" --kubeconfig "${CONSUMER}" status
# The logs of an offloaded pod whose container runs on the provider's real node.
REAL="$("${KUBECTL}" --kubeconfig "${PROVIDER}" get nodes -l offload.io/test-node=real -o jsonpath='{.items[0].metadata.name}')"
POD="$("${KUBECTL}" --kubeconfig "${PROVIDER}" -n "${TWIN}" get pods --field-selector "spec.nodeName=${REAL}" -o jsonpath='{.items[0].metadata.name}')"
echo
echo "== consumer: kubectl -n demo logs ${POD} --tail 5 (the container runs on the provider)"
"${KUBECTL}" --kubeconfig "${CONSUMER}" -n demo logs "${POD}" --tail 5

echo
echo "== the network: kubectl get foreignclusters; kubectl -n offload-system get tunnels"
"${KUBECTL}" --kubeconfig "${CONSUMER}" wait foreigncluster provider --for=condition=NetworkReady --timeout 2m >/dev/null
"${KUBECTL}" --kubeconfig "${CONSUMER}" get foreignclusters
"${KUBECTL}" --kubeconfig "${CONSUMER}" -n offload-system get tunnels
# Service hello over one replica on the consumer's real node and one on the
# virtual node (so on the provider's real node), and a client pod.
"${KUBECTL}" --kubeconfig "${CONSUMER}" -n demo apply -f - >/dev/null <<'YAML'
apiVersion: v1
kind: Service
metadata: {name: hello}
spec:
  selector: {tier: hello}
  ports: [{port: 8080}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: hello-local}
spec:
  selector: {matchLabels: {app: hello-local}}
  template:
    metadata: {labels: {app: hello-local, tier: hello}}
    spec:
      nodeSelector: {offload.io/test-node: real}
      containers: [{name: app, image: registry.local/offload/testapp:test, imagePullPolicy: Never, readinessProbe: {httpGet: {path: /healthz, port: 8080}, periodSeconds: 2}}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: hello-remote}
spec:
  selector: {matchLabels: {app: hello-remote}}
  template:
    metadata: {labels: {app: hello-remote, tier: hello}}
    spec:
      nodeSelector: {offload.io/type: virtual-node}
      affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: demo.kubectl-offload.dev/simulated, operator: DoesNotExist}]}]}}}
      containers: [{name: app, image: registry.local/offload/testapp:test, imagePullPolicy: Never, readinessProbe: {httpGet: {path: /healthz, port: 8080}, periodSeconds: 2}}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: client}
spec:
  selector: {matchLabels: {app: client}}
  template:
    metadata: {labels: {app: client}}
    spec:
      nodeSelector: {offload.io/test-node: real}
      containers: [{name: app, image: registry.local/offload/testapp:test, imagePullPolicy: Never}]
YAML
for d in hello-local hello-remote client; do
  "${KUBECTL}" --kubeconfig "${CONSUMER}" -n demo rollout status "deployment/${d}" --timeout 3m >/dev/null
done
echo
echo "== consumer: kubectl -n demo get pods -l tier=hello -o wide (the offloaded pod's IP is in the consumer's view of the provider)"
"${KUBECTL}" --kubeconfig "${CONSUMER}" -n demo get pods -l tier=hello -o wide
CLIENT="$("${KUBECTL}" --kubeconfig "${CONSUMER}" -n demo get pods -l app=client -o jsonpath='{.items[0].metadata.name}')"
REMOTE="$("${KUBECTL}" --kubeconfig "${CONSUMER}" -n demo get pods -l app=hello-remote -o jsonpath='{.items[0].metadata.name}')"
# A new pod is reachable once the provider's gateway lets it in (its
# tenant filter follows the twin namespaces' pods within seconds).
for _ in $(seq 1 30); do
  "${KUBECTL}" --kubeconfig "${CONSUMER}" -n demo exec "${CLIENT}" -- /testapp get "http://$("${KUBECTL}" --kubeconfig "${CONSUMER}" -n demo get pod "${REMOTE}" -o jsonpath='{.status.podIP}'):8080/healthz" >/dev/null 2>&1 && break
  sleep 1
done
echo
echo "== a consumer pod calls Service hello: answers from both clusters (server, and the caller as the server sees it)"
for _ in 1 2 3 4 5 6; do
  "${KUBECTL}" --kubeconfig "${CONSUMER}" -n demo exec "${CLIENT}" -- /testapp get http://hello:8080/whoami
  echo
done
echo
echo "== the offloaded pod ${REMOTE}, on the provider, calls the consumer's Service hello by name"
for _ in 1 2 3 4; do
  "${KUBECTL}" --kubeconfig "${CONSUMER}" -n demo exec "${REMOTE}" -- /testapp get http://hello:8080/whoami
  echo
done
echo
echo "Try: ${KUBECTL} --kubeconfig ${CONSUMER} -n demo exec ${POD} -- /testapp get http://127.0.0.1:8080/hostname"
echo "     ${OFFLOAD} --kubeconfig ${CONSUMER} status peer provider"
echo "     ${KUBECTL} --kubeconfig ${CONSUMER} top node; ${KUBECTL} --kubeconfig ${CONSUMER} -n demo top pod   (metrics-server needs a minute)"
echo "Stop the clusters with: make clusters-down"
