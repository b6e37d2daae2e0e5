# Sourced by scripts/kube-testenv.sh (etcd, kube-apiserver) and scripts/kube-node-build.sh
# (kubelet and the node's other binaries): one Kubernetes release for both, and the two steps
# that build a component of it from Go modules alone.
#
# The single-node cluster of tests/kube/test_node.py runs its pods with Debian 12's containerd
# 1.6; Kubernetes is ending support for containerd 1.x, so a bump of this version may need a
# newer containerd.
K8S_VERSION=${K8S_VERSION:-v1.34.4}
# Static binaries, each module as its go.mod names it, the installed Go toolchain, the Go module
# proxy (or the one the environment names).
export GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0
export GOPROXY=${GOPROXY:-https://proxy.golang.org}

# k8s_gomod MODULE: in the current directory, a go.mod of module MODULE requiring
# k8s.io/kubernetes at K8S_VERSION, each staging module it names in its own go.mod
# (`=> ./staging/src/...`) replaced by its published v0.X.Y version.
k8s_gomod() {
    curl -fsS "$GOPROXY/k8s.io/kubernetes/@v/$K8S_VERSION.mod" -o kubernetes.mod 2>/dev/null \
        || go mod download -json "k8s.io/kubernetes@$K8S_VERSION" >/dev/null
    [[ -s kubernetes.mod ]] || cp "$(go env GOMODCACHE)/cache/download/k8s.io/kubernetes/@v/$K8S_VERSION.mod" kubernetes.mod
    local staging=${K8S_VERSION/#v1./v0.}
    {
        echo "module $1"
        echo
        grep -m1 '^go ' kubernetes.mod
        echo
        echo "require k8s.io/kubernetes $K8S_VERSION"
        echo
        echo "replace ("
        sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#\t\1 => \1 '"$staging"'#p' kubernetes.mod
        echo ")"
    } >go.mod
}

# k8s_ldflags: the linker flags stamping K8S_VERSION where `--version` and the API server's
# /version read it, as the release build does.
k8s_ldflags() {
    local minor=${K8S_VERSION#v1.} kv flags="-s -w"
    minor=${minor%%.*}
    for kv in "gitVersion=$K8S_VERSION" "gitMajor=1" "gitMinor=$minor" "gitTreeState=clean" \
              "buildDate=1970-01-01T00:00:00Z"; do
        flags="$flags -X k8s.io/component-base/version.$kv"
    done
    echo "$flags"
}
