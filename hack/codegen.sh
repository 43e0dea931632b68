#!/usr/bin/env bash
# Regenerates the deepcopy functions of api/ and the CRD manifests of the
# chart with the pinned controller-gen. `make generate` runs it; a test checks
# that the committed output is current.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${ROOT}"
hack/tools.sh controller-gen
CONTROLLER_GEN="${OFFLOAD_CACHE_DIR:-${ROOT}/.cache}/bin/controller-gen"
OUT="${1:-charts/offload/crds}"
"${CONTROLLER_GEN}" object:headerFile=hack/boilerplate.go.txt paths=./api/...
"${CONTROLLER_GEN}" crd:allowDangerousTypes=false paths=./api/... output:crd:artifacts:config="${OUT}"
