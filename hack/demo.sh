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

# STEP names what the demo is doing; a failure says which step failed and
# how to look, instead of leaving a bare error of the last command.
STEP="setting up"
step() { STEP="$1"; echo; echo "== $1"; }
trap 'rc=$?; echo >&2; echo " ✗ the demo failed while ${STEP} (exit ${rc}, at: ${BASH_COMMAND})" >&2
  echo "   The clusters keep running for a look: kubectl offload status, kubectl get pods -A; make clusters-down removes them." >&2' ERR
fail() { echo " ✗ $*" >&2; exit 1; }
# require NAME VALUE fails the demo when VALUE, read from a cluster, is empty.
require() { [[ -n "$2" ]] || fail "no $1 found while ${STEP}"; }

hack/setup.sh
make --no-print-directory build >/dev/null
KUBECTL="${OFFLOAD_CACHE_DIR:-${ROOT}/.cache}/bin/kubectl"
OFFLOAD="${ROOT}/bin/kubectl-offload"

# The peered pair, as the e2e tests, the conformance runner and the
# benchmarks start theirs (localcluster.StartPeeredPair): kubectl-offload
# installed on both clusters with the agent from the test image on their
# real nodes, and the consumer peered with the provider as a user does,
# peer generate on the provider, the printed command on the consumer. The
# network fabric is on by default: install detects the same pod CIDR on
# both sides (10.244.0.0/16, kind's and kubeadm's default), so every flow
# between the clusters is translated. The provider lends its real node:
# its fake nodes (kwok) run no container, and are tainted so that nothing
# lands there by mistake.
STEP="starting, installing and peering the local clusters"
step "${STEP}"
clusters="$(go run ./hack/local-clusters up --install --peer --generate-flags "--node-selector offload.io/test-node=real" consumer provider)"
declare -A KUBECONFIGS
while read -r name kubeconfig _; do
  KUBECONFIGS[${name}]="${kubeconfig}"
done <<<"${clusters}"
CONSUMER="${KUBECONFIGS[consumer]:-}"
PROVIDER="${KUBECONFIGS[provider]:-}"
require "kubeconfig of the consumer" "${CONSUMER}"; require "kubeconfig of the provider" "${PROVIDER}"
for name in consumer provider; do
  step "${name} (export KUBECONFIG=${KUBECONFIGS[${name}]})"
  "${KUBECTL}" --kubeconfig "${KUBECONFIGS[${name}]}" get nodes -o wide
  "${KUBECTL}" --kubeconfig "${KUBECONFIGS[${name}]}" -n offload-system get pods -o wide
done

step "offloading namespace demo, and a Deployment of 6 replicas spread over the local and virtual nodes"
"${KUBECTL}" --kubeconfig "${CONSUMER}" create namespace demo --dry-run=client -o yaml | "${KUBECTL}" --kubeconfig "${CONSUMER}" apply -f -
"${OFFLOAD}" --kubeconfig "${CONSUMER}" namespace demo --pod-offloading-strategy LocalAndRemote --wait
# The test application, spread over the nodes at most one apart so that the
# virtual node gets its share (nodeTaintsPolicy Honor leaves the consumer's
# tainted fake nodes out). The virtual node is one host to the consumer's
# scheduler and gets three replicas; the provider lends one node, where the
# spread becomes a preference, so all three run there.
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
        nodeTaintsPolicy: Honor
        labelSelector:
          matchLabels: {app: web}
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
step "consumer: kubectl -n demo get pods -o wide"
"${KUBECTL}" --kubeconfig "${CONSUMER}" -n demo get pods -o wide
TWIN="$("${KUBECTL}" --kubeconfig "${CONSUMER}" -n demo get namespaceoffloading offloading -o jsonpath='{.status.remoteNamespaces[0].remoteNamespace}')"
require "twin namespace of demo on the provider" "${TWIN}"
step "provider: kubectl -n ${TWIN} get pods -o wide"
"${KUBECTL}" --kubeconfig "${PROVIDER}" -n "${TWIN}" get pods -o wide
# Every offloaded replica runs on the node the provider chose, in a real container.
REAL="$("${KUBECTL}" --kubeconfig "${PROVIDER}" get nodes -l offload.io/test-node=real -o jsonpath='{.items[0].metadata.name}')"
require "real node on the provider" "${REAL}"
remote_nodes="$("${KUBECTL}" --kubeconfig "${PROVIDER}" -n "${TWIN}" get pods -l app=web -o jsonpath='{range .items[*]}{.spec.nodeName}{"\n"}{end}' | sort -u)"
[[ "${remote_nodes}" == "${REAL}" ]] || fail "the offloaded replicas run on ${remote_nodes//$'\n'/, }, want only the provider's real node ${REAL}"
echo
"${OFFLOAD}" --kubeconfig "${CONSUMER}" status
POD="$("${KUBECTL}" --kubeconfig "${PROVIDER}" -n "${TWIN}" get pods -l app=web -o jsonpath='{.items[0].metadata.name}')"
require "offloaded replica of web" "${POD}"
step "consumer: kubectl -n demo logs ${POD} --tail 5 (the container runs on the provider)"
logs="$("${KUBECTL}" --kubeconfig "${CONSUMER}" -n demo logs "${POD}" --tail 5)"
echo "${logs}"
require "log line of ${POD}, read through the virtual node" "${logs}"

step "the network: kubectl get foreignclusters; kubectl -n offload-system get tunnels"
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
step "consumer: kubectl -n demo get pods -l tier=hello -o wide (the offloaded pod's IP is in the consumer's view of the provider)"
"${KUBECTL}" --kubeconfig "${CONSUMER}" -n demo get pods -l tier=hello -o wide
CLIENT="$("${KUBECTL}" --kubeconfig "${CONSUMER}" -n demo get pods -l app=client -o jsonpath='{.items[0].metadata.name}')"
LOCAL="$("${KUBECTL}" --kubeconfig "${CONSUMER}" -n demo get pods -l app=hello-local -o jsonpath='{.items[0].metadata.name}')"
REMOTE="$("${KUBECTL}" --kubeconfig "${CONSUMER}" -n demo get pods -l app=hello-remote -o jsonpath='{.items[0].metadata.name}')"
require "client pod" "${CLIENT}"; require "local hello pod" "${LOCAL}"; require "offloaded hello pod" "${REMOTE}"
# The offloaded pod shows an IP once its address is translated into the
# consumer's view and the tunnel is up; it is reachable once the
# provider's gateway lets it in (its tenant filter follows the twin
# namespaces' pods within seconds). Poll both, for at most 60 s.
STEP="waiting until the consumer reaches the offloaded pod ${REMOTE} by its IP"
reached=""
for _ in $(seq 1 60); do
  ip="$("${KUBECTL}" --kubeconfig "${CONSUMER}" -n demo get pod "${REMOTE}" -o jsonpath='{.status.podIP}')"
  if [[ -n "${ip}" ]] && "${KUBECTL}" --kubeconfig "${CONSUMER}" -n demo exec "${CLIENT}" -- /testapp get "http://${ip}:8080/healthz" >/dev/null 2>&1; then
    reached="${ip}"; break
  fi
  sleep 1
done
require "answer from ${REMOTE} at the IP the consumer shows, within 60 s" "${reached}"

# from_both FROM URL calls URL from pod FROM until both LOCAL and REMOTE
# have answered, at least 6 times and at most 40, and prints the answers
# ("server caller-as-the-server-sees-it"); it fails when one never did.
from_both() {
  local from="$1" url="$2" answers="" out
  for i in $(seq 1 40); do
    out="$("${KUBECTL}" --kubeconfig "${CONSUMER}" -n demo exec "${from}" -- /testapp get "${url}")"
    echo "${out}"
    answers+="${out}"$'\n'
    if (( i >= 6 )) && grep -q "^${LOCAL} " <<<"${answers}" && grep -q "^${REMOTE} " <<<"${answers}"; then
      return 0
    fi
  done
  fail "Service hello answered only from $(cut -d' ' -f1 <<<"${answers}" | sort -u | tr '\n' ' ')in 40 calls while ${STEP}; want ${LOCAL} and ${REMOTE}"
}
step "a consumer pod calls Service hello: answers from both clusters (server, and the caller as the server sees it)"
from_both "${CLIENT}" http://hello:8080/whoami
step "the offloaded pod ${REMOTE}, on the provider, calls the consumer's Service hello by name"
from_both "${REMOTE}" http://hello:8080/whoami
echo
echo " ✓ the demo ran: namespace demo spans both clusters, and Service hello answers from both"
echo
echo "Try: ${KUBECTL} --kubeconfig ${CONSUMER} -n demo exec ${POD} -- /testapp get http://127.0.0.1:8080/hostname"
echo "     ${OFFLOAD} --kubeconfig ${CONSUMER} status peer provider"
echo "     ${KUBECTL} --kubeconfig ${CONSUMER} top node; ${KUBECTL} --kubeconfig ${CONSUMER} -n demo top pod   (metrics-server needs a minute)"
echo "Stop the clusters with: make clusters-down"
