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

source "$(dirname "${BASH_SOURCE[0]}")/k8s-modules.sh"
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

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
started=$SECONDS
if [[ ! -x "$OUT/bin/kube-node" ]]; then
    mkdir -p "$work/node"
    cd "$work/node"
    k8s_gomod pyclassify.test/kube-node
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
    ldflags=$(k8s_ldflags)
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
