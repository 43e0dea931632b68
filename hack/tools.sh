#!/usr/bin/env bash
# Builds the pinned control-plane tools from the Go module proxy into .cache/bin.
#
# Idempotent: a tool is rebuilt only when its binary is missing or was built
# for another version (recorded in .cache/bin/.stamps/<tool>).
#
# Usage: hack/tools.sh [tool ...]   (default: every control-plane tool)
#
# The Kubernetes commands of each version live in .cache/bin/kubernetes-vX.Y.Z/,
# so the versions of the compatibility matrix (make compat) sit side by side;
# those of the pinned KUBE_VERSION are linked from .cache/bin as well.
# OFFLOAD_KUBE_VERSION=vX.Y.Z builds the Kubernetes commands of that version
# instead of the pinned one (and links nothing).
# Tools: kube-apiserver kube-controller-manager kube-scheduler kubectl
#        kubelet kube-proxy etcd kwok kwokctl coredns metrics-server
#        local-path-provisioner controller-gen
#        kine (the datastore of k3s-flavoured clusters)
#        e2e.test agnhost nonewprivs (for make conformance; not by default)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "${ROOT}/hack/versions.env"
PINNED_KUBE_VERSION="${KUBE_VERSION}"
KUBE_VERSION="${OFFLOAD_KUBE_VERSION:-${KUBE_VERSION}}"
[[ "${KUBE_VERSION}" =~ ^v1\.[0-9]+\.[0-9]+$ ]] || { echo "OFFLOAD_KUBE_VERSION=${KUBE_VERSION}: want a Kubernetes release such as v1.36.3" >&2; exit 2; }

CACHE="${OFFLOAD_CACHE_DIR:-${ROOT}/.cache}"
BIN="${CACHE}/bin"
SRC="${CACHE}/src"
STAMPS="${BIN}/.stamps"
KUBE_BIN="${BIN}/kubernetes-${KUBE_VERSION}"
mkdir -p "${BIN}" "${SRC}" "${STAMPS}" "${KUBE_BIN}"

export GOFLAGS="${GOFLAGS:-} -mod=mod"
export CGO_ENABLED=0

log() { printf '%s %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# Progress: which tool of how many, how long it has taken, and how long
# the previous build of it took on this machine (.stamps/<tool>.seconds),
# with a line every 30 s while one builds, so that a cold build of 20 to
# 30 minutes is never silent.
STEP=0
STEPS=0
STARTED=$(date +%s)
elapsed() { local s=$(( $(date +%s) - $1 )); printf '%dm%02ds' $(( s / 60 )) $(( s % 60 )); }
previous() {
  local f="${STAMPS}/$1.seconds"
  [[ -f "${f}" ]] && printf ', %dm%02ds the last time' $(( $(cat "${f}") / 60 )) $(( $(cat "${f}") % 60 ))
  return 0
}
# building NAME CMD... runs CMD with progress lines about NAME.
building() {
  local name="$1"; shift
  local start pid rc=0
  start=$(date +%s)
  STEP=$(( STEP + 1 ))
  log "[${STEP}/${STEPS}] building ${name}$(previous "${name}")"
  # The heartbeat's sleep goes with it, or it would hold the output open.
  ( trap 'kill "${s}" 2>/dev/null; exit 0' TERM
    while :; do
      sleep 30 & s=$!; wait "${s}"
      log "[${STEP}/${STEPS}] still building ${name}: $(elapsed "${start}") so far$(previous "${name}"), $(elapsed "${STARTED}") in all"
    done ) &
  pid=$!
  "$@" || rc=$?
  kill "${pid}" 2>/dev/null; wait "${pid}" 2>/dev/null || true
  [[ ${rc} -eq 0 ]] || return "${rc}"
  echo $(( $(date +%s) - start )) > "${STAMPS}/${name}.seconds"
  log "[${STEP}/${STEPS}] built ${name} in $(elapsed "${start}")"
}

# up_to_date TOOL VERSION: true when TOOL is built for VERSION.
up_to_date() {
  [[ -x "${BIN}/$1" && -f "${STAMPS}/$1" && "$(cat "${STAMPS}/$1")" == "$2" ]]
}

stamp() { printf '%s' "$2" > "${STAMPS}/$1"; }

# kube_module NAME PACKAGE... prepares wrapper module NAME that requires
# k8s.io/kubernetes with a replace directive for every staging module, as
# k8s.io/kubernetes's go.mod lists them, and pins PACKAGEs, and prints its
# directory. The control-plane commands and the e2e suite get a module each,
# so building the tools never resolves the e2e suite's dependencies.
kube_module() {
  local name="$1"; shift
  local dir="${SRC}/${name}-${KUBE_VERSION}"
  if [[ -f "${dir}/.ready" ]]; then
    echo "${dir}"
    return
  fi
  mkdir -p "${dir}"
  local gomod
  gomod="$(cd "${dir}" && GOFLAGS= go mod download -json "k8s.io/kubernetes@${KUBE_VERSION}" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
  local staging_version="v0${KUBE_VERSION#v1}"
  {
    echo "module offload.local/${name}"
    echo
    echo "go 1.26"
    echo
    echo "require k8s.io/kubernetes ${KUBE_VERSION}"
    echo
    echo "replace ("
    sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#\t\1 => \1 '"${staging_version}"'#p' "${gomod}"
    echo ")"
  } > "${dir}/go.mod"
  {
    printf '//go:build tools\n\n// Package tools pins the Kubernetes packages this module builds.\npackage tools\n\nimport (\n'
    printf '\t_ "%s"\n' "$@"
    printf ')\n'
  } > "${dir}/tools.go"
  (cd "${dir}" && go mod tidy -e >/dev/null 2>&1 || go mod tidy)
  touch "${dir}/.ready"
  echo "${dir}"
}

kube_ldflags() {
  local v="${KUBE_VERSION}" major minor
  major="$(echo "${v#v}" | cut -d. -f1)"
  minor="$(echo "${v#v}" | cut -d. -f2)"
  local f=""
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    f+=" -X ${pkg}.gitVersion=${v} -X ${pkg}.gitMajor=${major} -X ${pkg}.gitMinor=${minor}"
    f+=" -X ${pkg}.gitTreeState=clean -X ${pkg}.buildDate=1970-01-01T00:00:00Z"
  done
  echo "-s -w ${f}"
}

KUBE_COMMANDS=(kube-apiserver kube-controller-manager kube-proxy kube-scheduler kubectl kubelet)

# build_kube TOOL... builds the Kubernetes commands among TOOLs that are
# not up to date in one go build: one build graph, so the packages they
# share compile once and the links overlap the compiles.
build_kube() {
  local missing=() tool
  for tool in "$@"; do
    [[ -x "${KUBE_BIN}/${tool}" ]] || missing+=("${tool}")
  done
  if [[ ${#missing[@]} -gt 0 ]]; then
    local dir
    dir="$(kube_module kubernetes "${KUBE_COMMANDS[@]/#/k8s.io/kubernetes/cmd/}")"
    building "kubernetes-${KUBE_VERSION}" bash -c 'cd "$1" && shift && go build -trimpath -ldflags "$1" -o "$2/" "${@:3}"' _ \
      "${dir}" "$(kube_ldflags)" "${KUBE_BIN}" "${missing[@]/#/k8s.io/kubernetes/cmd/}"
  fi
  link_kube "$@"
}

# link_kube TOOL... links the pinned version's Kubernetes commands into
# .cache/bin, where kubectl, envtest (with etcd) and the scripts find them.
link_kube() {
  [[ "${KUBE_VERSION}" == "${PINNED_KUBE_VERSION}" ]] || return 0
  local tool
  for tool in "$@"; do
    up_to_date "${tool}" "${KUBE_VERSION}" && [[ -L "${BIN}/${tool}" ]] && continue
    ln -sfn "kubernetes-${KUBE_VERSION}/${tool}" "${BIN}/${tool}"
    stamp "${tool}" "${KUBE_VERSION}"
  done
}

# build_e2e TOOL builds the upstream e2e suite (e2e.test) or one of its test
# images' commands (agnhost, nonewprivs), for `make conformance`.
build_e2e() {
  local tool="$1"
  if up_to_date "${tool}" "${KUBE_VERSION}"; then return; fi
  local dir
  dir="$(kube_module kubernetes-e2e k8s.io/kubernetes/test/e2e k8s.io/kubernetes/test/images/agnhost k8s.io/kubernetes/test/images/nonewprivs)"
  case "${tool}" in
    e2e.test) building "${tool}" bash -c 'cd "$1" && go test -c -vet=off -trimpath -ldflags "$2" -o "$3/e2e.test" k8s.io/kubernetes/test/e2e' _ "${dir}" "$(kube_ldflags)" "${BIN}" ;;
    *) building "${tool}" bash -c 'cd "$1" && go build -trimpath -ldflags "-s -w" -o "$2/$3" "k8s.io/kubernetes/test/images/$3"' _ "${dir}" "${BIN}" "${tool}" ;;
  esac
  stamp "${tool}" "${KUBE_VERSION}"
}

# build_wrapped TOOL VERSION MODULE PACKAGE builds PACKAGE of MODULE at
# VERSION through a wrapper module of its own, so the tool's dependencies
# never meet this repository's (etcd, CoreDNS).
build_wrapped() {
  local tool="$1" version="$2" module="$3" pkg="$4"
  if up_to_date "${tool}" "${version}"; then return; fi
  local dir="${SRC}/${tool}-${version}"
  mkdir -p "${dir}"
  if [[ ! -f "${dir}/go.mod" ]]; then
    printf 'module offload.local/%stool\n\ngo 1.26\n\nrequire %s %s\n' "${tool}" "${module}" "${version}" > "${dir}/go.mod"
    printf '//go:build tools\n\n// Package tools pins the %s this module builds.\npackage tools\n\nimport _ "%s"\n' "${tool}" "${pkg}" > "${dir}/tools.go"
  fi
  building "${tool}-${version}" bash -c 'cd "$1" && { [[ -f go.sum ]] || go mod tidy; } && go build -trimpath -ldflags "-s -w" -o "$2/$3" "$4"' _ "${dir}" "${BIN}" "${tool}" "${pkg}"
  stamp "${tool}" "${version}"
}

build_kwok() {
  local tool="$1"
  if up_to_date "${tool}" "${KWOK_VERSION}"; then return; fi
  GOBIN="${BIN}" GOFLAGS= building "${tool}-${KWOK_VERSION}" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/${tool}@${KWOK_VERSION}"
  stamp "${tool}" "${KWOK_VERSION}"
}

build_controller_gen() {
  if up_to_date controller-gen "${CONTROLLER_TOOLS_VERSION}"; then return; fi
  GOBIN="${BIN}" GOFLAGS= building "controller-gen-${CONTROLLER_TOOLS_VERSION}" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/controller-tools/cmd/controller-gen@${CONTROLLER_TOOLS_VERSION}"
  stamp controller-gen "${CONTROLLER_TOOLS_VERSION}"
}

# is_kube TOOL: true when TOOL is one of KUBE_COMMANDS.
is_kube() { [[ " ${KUBE_COMMANDS[*]} " == *" $1 "* ]]; }

# tool_version TOOL is the version TOOL is pinned to.
tool_version() {
  case "$1" in
    kube-apiserver|kube-controller-manager|kube-scheduler|kubectl|kubelet|kube-proxy|e2e.test|agnhost|nonewprivs) echo "${KUBE_VERSION}" ;;
    etcd) echo "${ETCD_VERSION}" ;;
    kwok|kwokctl) echo "${KWOK_VERSION}" ;;
    coredns) echo "${COREDNS_VERSION}" ;;
    metrics-server) echo "${METRICS_SERVER_VERSION}" ;;
    local-path-provisioner) echo "${LOCAL_PATH_PROVISIONER_VERSION}" ;;
    kine) echo "${KINE_VERSION}" ;;
    controller-gen) echo "${CONTROLLER_TOOLS_VERSION}" ;;
  esac
}

build() {
  if is_kube "$1"; then
    build_kube "${KUBE_TOOLS[@]}"
    return
  fi
  case "$1" in
    e2e.test|agnhost|nonewprivs) build_e2e "$1" ;;
    etcd) build_wrapped etcd "${ETCD_VERSION}" go.etcd.io/etcd/server/v3 go.etcd.io/etcd/server/v3 ;;
    kwok|kwokctl) build_kwok "$1" ;;
    coredns) build_wrapped coredns "${COREDNS_VERSION}" github.com/coredns/coredns github.com/coredns/coredns ;;
    metrics-server) build_wrapped metrics-server "${METRICS_SERVER_VERSION}" sigs.k8s.io/metrics-server sigs.k8s.io/metrics-server/cmd/metrics-server ;;
    # The module's root package is the provisioner's main.
    local-path-provisioner) build_wrapped local-path-provisioner "${LOCAL_PATH_PROVISIONER_VERSION}" github.com/rancher/local-path-provisioner github.com/rancher/local-path-provisioner ;;
    # k3s's datastore; CGO_ENABLED=0 selects its pure-Go SQLite driver.
    kine) build_wrapped kine "${KINE_VERSION}" github.com/k3s-io/kine github.com/k3s-io/kine ;;
    controller-gen) build_controller_gen ;;
    *) echo "unknown tool $1" >&2; exit 2 ;;
  esac
}

tools=("$@")
if [[ ${#tools[@]} -eq 0 ]]; then
  tools=(kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy etcd kwok kwokctl coredns metrics-server local-path-provisioner kine)
fi

# The Kubernetes commands asked for build together (build_kube), as one
# step; every other tool not up to date is a step of its own.
KUBE_TOOLS=()
kube_step=0
for t in "${tools[@]}"; do
  is_kube "$t" && KUBE_TOOLS+=("$t")
  if is_kube "$t"; then
    [[ -x "${KUBE_BIN}/$t" ]] && continue
    kube_step=1
  else
    up_to_date "$t" "$(tool_version "$t")" && continue
    STEPS=$(( STEPS + 1 ))
  fi
done
STEPS=$(( STEPS + kube_step ))
[[ ${STEPS} -eq 0 ]] || log "building ${STEPS} tool step(s) into ${BIN} (a cold build takes about 30 minutes on 2 cores; later runs reuse them)"
for t in "${tools[@]}"; do build "$t"; done
log "tools ready in ${BIN} ($(elapsed "${STARTED}"))"
