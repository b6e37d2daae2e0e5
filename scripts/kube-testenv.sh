#!/usr/bin/env bash
# Build (or reuse) a real etcd and kube-apiserver for the tests, from Go modules only.
#
#   bash scripts/kube-testenv.sh          build what is missing, print the directory holding
#                                         bin/etcd, bin/kube-apiserver and crds/
#   bash scripts/kube-testenv.sh --check  print that directory if everything is there, else exit 1
#
# The binaries are cached outside the checkout, keyed by version:
#   ${PYCLASSIFY_KUBE_CACHE:-~/.cache/pyclassify-kube}/k8s-<K8S_VERSION>-etcd-<ETCD_VERSION>/
# so later runs reuse them at once. A cold build took 9 min 45 s on two shared cores (etcd 2 min,
# kube-apiserver the rest, module downloads included); it needs Go and the Go module proxy.
#
# kube-apiserver: `go install k8s.io/kubernetes/cmd/kube-apiserver@vX` refuses the module because
# its go.mod replaces every k8s.io staging module with a ./staging path the module zip lacks. So
# a temporary module of our own requires k8s.io/kubernetes at the pinned release and replaces each
# staging module (read from that release's go.mod) with its published v0.X.Y version, and its main
# runs app.NewAPIServerCommand() as cmd/kube-apiserver does. etcd likewise from
# go.etcd.io/etcd/server/v3 through etcdmain.Main. The CRDs the tests install are copied from
# the Go modules that ship them (sigs.k8s.io/network-policy-api; github.com/tigera/operator, which
# embeds Calico's). Profile and ClusterNetworkPolicy, which those releases lack, get minimal
# CRDs from the tests (tests/kube/apiserver.py).
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/k8s-modules.sh"
ETCD_VERSION=${ETCD_VERSION:-v3.6.6}
NPAPI_VERSION=${NPAPI_VERSION:-v0.1.7}
# Calico's crd.projectcalico.org/v1 CRDs (with tiers) as the Tigera operator embeds them.
OPERATOR_VERSION=${OPERATOR_VERSION:-v1.39.0}
# The checksum database has no entry for it: its module hash is pinned here instead.
OPERATOR_SUM=${OPERATOR_SUM:-h1:l5dIRCfnigUAH6Aa7+SUf+0yuoZQNThbx1XRuhFGVko=}
CACHE_ROOT=${PYCLASSIFY_KUBE_CACHE:-${HOME:-/root}/.cache/pyclassify-kube}
OUT="$CACHE_ROOT/k8s-$K8S_VERSION-etcd-$ETCD_VERSION"

complete() {
    [[ -x "$OUT/bin/etcd" && -x "$OUT/bin/kube-apiserver" && -f "$OUT/crds/.complete" ]]
}

if [[ "${1:-}" == "--check" ]]; then
    if complete; then echo "$OUT"; exit 0; fi
    exit 1
fi

if complete; then echo "$OUT"; exit 0; fi

command -v go >/dev/null || { echo "kube-testenv: the Go toolchain (go) is not installed" >&2; exit 1; }
mkdir -p "$OUT/bin" "$OUT/crds"
exec 9>"$OUT/.lock"
flock 9
if complete; then echo "$OUT"; exit 0; fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
started=$SECONDS

if [[ ! -x "$OUT/bin/etcd" ]]; then
    echo "kube-testenv: building etcd $ETCD_VERSION (about 2 minutes cold)" >&2
    mkdir -p "$work/etcd"
    cat >"$work/etcd/main.go" <<'EOF'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
EOF
    (cd "$work/etcd" && go mod init pyclassify.test/etcd >/dev/null 2>&1 \
        && go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >&2 \
        && go mod tidy >&2 \
        && go build -trimpath -ldflags='-s -w' -o "$OUT/bin/etcd.tmp" . >&2)
    mv "$OUT/bin/etcd.tmp" "$OUT/bin/etcd"
fi

if [[ ! -x "$OUT/bin/kube-apiserver" ]]; then
    echo "kube-testenv: building kube-apiserver $K8S_VERSION (about 8 minutes cold on two cores)" >&2
    mkdir -p "$work/apiserver"
    cd "$work/apiserver"
    k8s_gomod pyclassify.test/kube-apiserver
    cat >main.go <<'EOF'
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	command := app.NewAPIServerCommand()
	code := cli.Run(command)
	os.Exit(code)
}
EOF
    ldflags=$(k8s_ldflags)
    go mod tidy >&2
    go build -trimpath -ldflags="$ldflags" -o "$OUT/bin/kube-apiserver.tmp" . >&2
    mv "$OUT/bin/kube-apiserver.tmp" "$OUT/bin/kube-apiserver"
    cd - >/dev/null
fi

if [[ ! -f "$OUT/crds/.complete" ]]; then
    echo "kube-testenv: fetching CRDs (network-policy-api $NPAPI_VERSION, tigera/operator $OPERATOR_VERSION)" >&2
    rm -f "$OUT"/crds/*.yaml
    dir=$(go mod download -json "sigs.k8s.io/network-policy-api@$NPAPI_VERSION" | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')
    find "$dir/config/crd" -name 'policy.networking.k8s.io_*.yaml' -path '*experimental*' \
        -exec cp {} "$OUT/crds/" \;
    info=$(GONOSUMDB=github.com/tigera/operator go mod download -json "github.com/tigera/operator@$OPERATOR_VERSION")
    sum=$(sed -n 's/^\s*"Sum": "\(.*\)",$/\1/p' <<<"$info")
    if [[ "$sum" != "$OPERATOR_SUM" ]]; then
        echo "kube-testenv: github.com/tigera/operator@$OPERATOR_VERSION has hash $sum, expected $OPERATOR_SUM" >&2
        exit 1
    fi
    dir=$(sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p' <<<"$info")
    for kind in tiers globalnetworkpolicies networkpolicies globalnetworksets networksets hostendpoints; do
        cp "$dir/pkg/crds/calico/crd.projectcalico.org_$kind.yaml" "$OUT/crds/"
    done
    chmod u+w "$OUT"/crds/*.yaml
    touch "$OUT/crds/.complete"
fi

echo "kube-testenv: ready in $OUT ($((SECONDS - started)) s this run)" >&2
echo "$OUT"
