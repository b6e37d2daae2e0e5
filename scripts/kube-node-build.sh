#!/usr/bin/env bash
# Build (or reuse) one multi-call binary holding kubelet, kube-scheduler,
# kube-controller-manager and kube-proxy, from Go modules only, the way scripts/kube-testenv.sh builds
# kube-apiserver (same K8S_VERSION, same staging-module replacement).
#
#   bash scripts/kube-node-build.sh           build if missing, print the directory holding bin/
#   bash scripts/kube-node-build.sh --check   print that directory if it is built, else exit 1
#
# bin/kube-node dispatches on the name it is called by (bin/kubelet, bin/kube-scheduler,
# bin/kube-controller-manager and bin/kube-proxy are symlinks to it), like the old hyperkube.
# pause-oci.tar is the pods' sandbox image (an OCI layout, tag 1): a static Go pause process
# assembled with umoci, as registry.k8s.io/pause cannot be pulled here.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.34.4}
CACHE_ROOT=${PYCLASSIFY_KUBE_CACHE:-${HOME:-/root}/.cache/pyclassify-kube}
OUT="$CACHE_ROOT/k8s-$K8S_VERSION-node"

complete() { [[ -x "$OUT/bin/kube-node" && -L "$OUT/bin/kubelet" && -f "$OUT/pause-oci.tar" ]]; }
if complete; then echo "$OUT"; exit 0; fi
[[ "${1:-}" == "--check" ]] && exit 1

command -v go >/dev/null || { echo "kube-node-build: the Go toolchain (go) is not installed" >&2; exit 1; }
mkdir -p "$OUT/bin"
exec 9>"$OUT/.lock"
flock 9
if complete; then echo "$OUT"; exit 0; fi

export GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0
export GOPROXY=${GOPROXY:-https://proxy.golang.org}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
started=$SECONDS
if [[ ! -x "$OUT/bin/kube-node" ]]; then
    mkdir -p "$work/node"
    cd "$work/node"
    curl -fsS "$GOPROXY/k8s.io/kubernetes/@v/$K8S_VERSION.mod" -o kubernetes.mod 2>/dev/null \
        || go mod download -json "k8s.io/kubernetes@$K8S_VERSION" >/dev/null
    [[ -s kubernetes.mod ]] || cp "$(go env GOMODCACHE)/cache/download/k8s.io/kubernetes/@v/$K8S_VERSION.mod" kubernetes.mod
    staging=${K8S_VERSION/#v1./v0.}
    {
        echo "module pyclassify.test/kube-node"
        echo
        grep -m1 '^go ' kubernetes.mod
        echo
        echo "require k8s.io/kubernetes $K8S_VERSION"
        echo
        echo "replace ("
        sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#\t\1 => \1 '"$staging"'#p' kubernetes.mod
        echo ")"
    } >go.mod
    cat >main.go <<'EOF'
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	_ "time/tzdata"

	"github.com/spf13/cobra"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	cm "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

func main() {
	var command *cobra.Command
	switch name := filepath.Base(os.Args[0]); name {
	case "kubelet":
		command = kubelet.NewKubeletCommand(context.Background())
	case "kube-scheduler":
		command = scheduler.NewSchedulerCommand()
	case "kube-controller-manager":
		command = cm.NewControllerManagerCommand()
	case "kube-proxy":
		command = proxy.NewProxyCommand()
	default:
		fmt.Fprintf(os.Stderr, "kube-node: call me as kubelet, kube-scheduler, kube-controller-manager or kube-proxy, not %s\n", name)
		os.Exit(2)
	}
	os.Exit(cli.Run(command))
}
EOF
    minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
    ldflags="-s -w"
    for kv in "gitVersion=$K8S_VERSION" "gitMajor=1" "gitMinor=$minor" "gitTreeState=clean" \
              "buildDate=1970-01-01T00:00:00Z"; do
        ldflags="$ldflags -X k8s.io/component-base/version.$kv"
    done
    go mod tidy >&2
    go build -trimpath -ldflags="$ldflags" -o "$OUT/bin/kube-node.tmp" . >&2
    mv "$OUT/bin/kube-node.tmp" "$OUT/bin/kube-node"
    for name in kubelet kube-scheduler kube-controller-manager kube-proxy; do ln -sfn kube-node "$OUT/bin/$name"; done
fi
if [[ ! -f "$OUT/pause-oci.tar" ]]; then
    command -v umoci >/dev/null || { echo "kube-node-build: umoci is not installed" >&2; exit 1; }
    mkdir -p "$work/pause"
    cd "$work/pause"
    cat >main.go <<'EOF'
// The pod sandbox's process: holds the pod's namespaces, reaps orphans, exits on SIGINT/SIGTERM.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}
EOF
    printf 'module pyclassify.test/pause\n\ngo 1.22\n' >go.mod
    go build -trimpath -ldflags='-s -w' -o pause . >&2
    umoci init --layout oci
    umoci new --image oci:1
    umoci unpack --rootless --image oci:1 bundle >/dev/null
    cp pause bundle/rootfs/pause
    umoci repack --image oci:1 bundle
    umoci config --image oci:1 --config.entrypoint /pause --config.user 65535:65535
    tar -C oci -cf "$OUT/pause-oci.tar.tmp" .
    mv "$OUT/pause-oci.tar.tmp" "$OUT/pause-oci.tar"
fi
echo "kube-node-build: ready in $OUT ($((SECONDS - started)) s this run)" >&2
echo "$OUT"
