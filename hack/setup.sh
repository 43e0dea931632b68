#!/usr/bin/env bash
# Prepares a fresh machine of the project's kind: the Debian packages the
# tests and the demo need, then the pinned tools (hack/tools.sh).
# Idempotent and quiet when everything is already there.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# command or file -> Debian package. The real node of the local clusters
# needs containerd, runc, the CNI plugins, iptables and iproute2.
declare -A PACKAGES=(
  [make]=make
  [git]=git
  [gcc]=gcc
  [containerd]=containerd
  [runc]=runc
  [/usr/lib/cni/bridge]=containernetworking-plugins
  [iptables]=iptables
  [conntrack]=conntrack
  [ip]=iproute2
  [nsenter]=util-linux
)

missing=()
for cmd in "${!PACKAGES[@]}"; do
  if [[ "${cmd}" == /* ]]; then
    [[ -e "${cmd}" ]] || missing+=("${PACKAGES[${cmd}]}")
  else
    command -v "${cmd}" >/dev/null 2>&1 || missing+=("${PACKAGES[${cmd}]}")
  fi
done
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "installing Debian packages: ${missing[*]}" >&2
  SUDO=""
  [[ "$(id -u)" -eq 0 ]] || SUDO="sudo"
  ${SUDO} apt-get update -qq
  DEBIAN_FRONTEND=noninteractive ${SUDO} apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! command -v go >/dev/null 2>&1; then
  if [[ -x /usr/local/go/bin/go ]]; then
    export PATH="/usr/local/go/bin:${PATH}"
  else
    echo "Go is not installed: this project needs Go 1.26 (the go machine kind ships it in /usr/local/go)" >&2
    exit 1
  fi
fi

"${ROOT}/hack/tools.sh" "$@"
