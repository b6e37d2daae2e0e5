#!/usr/bin/env bash
# Build (or reuse) helm from Go modules, for the chart's tests and deploy/README.md's commands.
#
#   bash scripts/helm-testenv.sh          build it if missing, print the path of the helm binary
#   bash scripts/helm-testenv.sh --check  print that path if it is built, else exit 1
#
# Cached outside the checkout, keyed by version, beside the test API server's binaries
# (scripts/kube-testenv.sh):
#   ${PYCLASSIFY_KUBE_CACHE:-~/.cache/pyclassify-kube}/helm-<HELM_VERSION>/bin/helm
# helm's own go.mod replaces nothing, so `go install` of its cmd/helm at the pinned release
# builds it as released; it needs Go and the Go module proxy.
set -euo pipefail

HELM_VERSION=${HELM_VERSION:-v3.19.5}
CACHE_ROOT=${PYCLASSIFY_KUBE_CACHE:-${HOME:-/root}/.cache/pyclassify-kube}
OUT="$CACHE_ROOT/helm-$HELM_VERSION"

if [[ -x "$OUT/bin/helm" ]]; then echo "$OUT/bin/helm"; exit 0; fi
[[ "${1:-}" == "--check" ]] && exit 1

command -v go >/dev/null || { echo "helm-testenv: the Go toolchain (go) is not installed" >&2; exit 1; }
mkdir -p "$OUT"
exec 9>"$OUT/.lock"
flock 9
if [[ -x "$OUT/bin/helm" ]]; then echo "$OUT/bin/helm"; exit 0; fi

export GOTOOLCHAIN=local CGO_ENABLED=0
export GOPROXY=${GOPROXY:-https://proxy.golang.org}
started=$SECONDS
echo "helm-testenv: building helm $HELM_VERSION from Go modules" >&2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# helm reports its version from these variables (set by its Makefile in a release build).
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
ldflags="$ldflags -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
GOBIN="$work" go install -trimpath -ldflags="$ldflags" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" >&2
mkdir -p "$OUT/bin"
mv "$work/helm" "$OUT/bin/helm"
echo "helm-testenv: helm $HELM_VERSION ready in $((SECONDS - started)) s" >&2
echo "$OUT/bin/helm"
