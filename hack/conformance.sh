#!/usr/bin/env bash
# `make conformance`: Kubernetes' own pod conformance tests through the
# virtual node. It builds the upstream e2e suite (k8s.io/kubernetes/test/e2e
# at KUBE_VERSION) and the images its pods run (agnhost from
# k8s.io/kubernetes/test/images/agnhost; busybox from Debian's busybox-static
# with bash-static as /bin/sh, which keeps variables such as data-1), starts
# two local clusters of its own (consumer and provider, each with a real
# node), installs and peers kubectl-offload as the demo does, and runs the
# [Conformance] tests of sig-node and of sig-storage's ConfigMap, Secret,
# Downward API and Projected volumes against the consumer. Every e2e
# namespace is offloaded with strategy Remote before its first pod (see
# hack/conformance), so every test pod runs on the virtual node, and for
# real on the provider's real node. It prints passed/failed/skipped, each
# failure, and each exclusion with its reason (docs/conformance.md).
#
# Usage: hack/conformance.sh [--focus REGEXP] [--shards N]
# The clusters live in .cache/conformance/clusters and are removed at the
# end, also on failure or Ctrl-C.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${ROOT}"
export PATH="/usr/local/go/bin:${PATH}"
source hack/versions.env

FOCUS=""
SHARDS=4
while [[ $# -gt 0 ]]; do
  case "$1" in
    --focus) FOCUS="$2"; shift 2 ;;
    --shards) SHARDS="$2"; shift 2 ;;
    *) echo "usage: hack/conformance.sh [--focus REGEXP] [--shards N]" >&2; exit 2 ;;
  esac
done

CACHE="${OFFLOAD_CACHE_DIR:-${ROOT}/.cache}"
BIN="${CACHE}/bin"
WORK="${CACHE}/conformance"
CLUSTERS="${WORK}/clusters"
mkdir -p "${WORK}"
log() { printf '%s %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

hack/setup.sh
hack/tools.sh e2e.test agnhost nonewprivs
make --no-print-directory build >/dev/null

# debian_statics extracts Debian's static busybox and bash (apt-get
# download, no install) into ${WORK}/debs/root.
debian_statics() {
  local debs="${WORK}/debs"
  if [[ -x "${debs}/root/bin/busybox" && -x "${debs}/root/bin/bash-static" ]]; then
    return
  fi
  mkdir -p "${debs}"
  (cd "${debs}" && apt-get download -q busybox-static bash-static >/dev/null 2>&1 ||
    { apt-get update -qq && apt-get download -q busybox-static bash-static >/dev/null; })
  for deb in "${debs}"/*.deb; do dpkg-deb -x "${deb}" "${debs}/root"; done
}

debian_statics
go build -o "${WORK}/bin/conformance" ./hack/conformance
IMAGES="$("${WORK}/bin/conformance" images -dir "${WORK}/images" -e2e "${BIN}/e2e.test" -agnhost "${BIN}/agnhost" -nonewprivs "${BIN}/nonewprivs" \
  -busybox "${WORK}/debs/root/bin/busybox" -bash "${WORK}/debs/root/bin/bash-static")"

KUBECTL="${BIN}/kubectl"
OFFLOAD="${ROOT}/bin/kubectl-offload"
# The provider lends all its free capacity, not half: the tests run 4 at
# once, and a pod without requests counts 100m CPU against the offer. Free,
# not allocatable (offerBasis): on its one 2-core node, the consumer's
# scheduler then holds back what would wait on the provider, as in the
# runs this suite was verified with. The virtual node is untainted: the
# consumer's own node is cordoned, every e2e namespace is offloaded, and
# tests such as the lifecycle hooks' pin their pods to a node picked among
# the untainted schedulable ones.
AGENT=(--set sharingPercentage=100 --set offerBasis=free --set virtualNodes.taint=false)
# The provider lets the consumer's containers run without limits
# (--allow-unlimited-containers): the in-place resize tests check that a
# container that sets no limit has none in its cgroup, where the default
# policy gives it what is lent as its limit.
PEERING=(--generate-flags "--allow-unlimited-containers")

teardown() {
  log "removing the conformance clusters"
  go run ./hack/local-clusters down -workdir "${CLUSTERS}" || true
}
trap teardown EXIT

start=$(date +%s)
# As the demo and the e2e tests: the agent from the test image on the real
# nodes, and the consumer peered with the provider (localcluster.StartPeeredPair).
# No fake nodes: the provider runs every pod on its real node.
clusters="$(go run ./hack/local-clusters up -workdir "${CLUSTERS}" -fake-nodes 0 -images "${IMAGES}" --install --peer "${AGENT[@]}" "${PEERING[@]}" consumer provider)"
declare -A KUBECONFIGS
while read -r name kubeconfig _; do
  KUBECONFIGS[${name}]="${kubeconfig}"
done <<<"${clusters}"
CONSUMER="${KUBECONFIGS[consumer]}"
# The consumer's own node takes no new pod: a test pod that escaped the
# virtual node would stay Pending and fail its test. Not before the
# network is up: the consumer's gateway runs there, and an offloaded pod
# shows no address until the tunnel is up.
"${KUBECTL}" --kubeconfig "${CONSUMER}" wait foreignclusters --all --for=condition=NetworkReady --timeout=3m >/dev/null
"${KUBECTL}" --kubeconfig "${CONSUMER}" cordon -l offload.io/test-node=real >/dev/null
log "clusters up, installed and peered in $(( $(date +%s) - start ))s"

rm -rf "${WORK}/results"
"${WORK}/bin/conformance" run -kubeconfig "${CONSUMER}" -offload "${OFFLOAD}" -e2e "${BIN}/e2e.test" \
  -results "${WORK}/results" -shards "${SHARDS}" ${FOCUS:+-focus "${FOCUS}"}
