#!/usr/bin/env bash
# A real single-node Kubernetes cluster inside one network namespace and one mount namespace:
# etcd + kube-apiserver (scripts/kube-testenv.sh), containerd (Debian) with runc, kubelet,
# kube-scheduler, kube-controller-manager and kube-proxy (scripts/kube-node-build.sh), pods on a
# CNI bridge (Debian's containernetworking-plugins).
#
#   bash scripts/kube-node-up.sh STATE_DIR   start, wait until the node is Ready, print the netns
#                                            name; STATE_DIR/admin.kubeconfig reaches the API server
#                                            from inside that netns (https://10.99.0.1:6443)
#   bash scripts/kube-node-down.sh STATE_DIR stop everything, remove the netns, cgroups, STATE_DIR
#
# Nothing lands in the host's network namespace: the bridge, veths, routes and iptables rules
# (kubelet's, kube-proxy's) live in the node's netns. Every process runs in one new mount
# namespace (slave of the host's), so the overlay, tmpfs and netns mounts
# of containerd and kubelet vanish with the last process. Pods' cgroups are under
# /<netns name>/ in each cgroup hierarchy (kubelet's cgroupRoot), removed by kube-node-down.sh.
set -euo pipefail
T=$(realpath "$1")
HERE=$(cd "$(dirname "$0")" && pwd)
KUBE=$(bash "$HERE/kube-testenv.sh")
NODE=$(bash "$HERE/kube-node-build.sh")
PAUSE_TAR=$NODE/pause-oci.tar
NS=pcnode-$(od -An -N4 -tx4 /dev/urandom | tr -d ' ')
NODE_IP=10.99.0.1
POD_CIDR=10.88.0.0/16
mkdir -p "$T"
echo "$NS" >"$T/netns"  # first: kube-node-down.sh acts only on a directory naming its netns
if [[ -f /sys/fs/cgroup/cgroup.controllers ]]; then
    echo "kube-node-up: the host has the unified cgroup hierarchy (v2); this node needs the v1 hierarchies" >&2
    exit 1
fi
# Pod-to-pod packets on the CNI bridge reach iptables (the enforcer's and kube-proxy's rules)
# only through br_netfilter.
modprobe br_netfilter 2>/dev/null || true
if [[ ! -e /proc/sys/net/bridge/bridge-nf-call-iptables ]]; then
    echo "kube-node-up: br_netfilter is not available (modprobe br_netfilter): bridged pod traffic would bypass iptables" >&2
    exit 1
fi
for tool in openssl containerd ctr runc curl; do
    command -v "$tool" >/dev/null || { echo "kube-node-up: $tool is not installed" >&2; exit 1; }
done
PRIVATE_DIRS="/run /var/lib/cni /var/lib/kubelet /var/log/containers"
for d in $PRIVATE_DIRS; do
    [[ -d "$d" ]] || { mkdir -p "$d"; echo "$d" >>"$T/host-dirs-created"; }
done
mkdir -p "$T"/{pod-logs,pki,etcd,containerd/root,containerd/state,runc,cni/net.d,cni/ipam,kubelet,logs}

# --- PKI: one CA; the API server's certificate valid for every name a client uses ---
cd "$T/pki"
openssl ecparam -name prime256v1 -genkey -noout -out ca.key 2>/dev/null
openssl req -x509 -new -key ca.key -subj /CN=pcnode-ca -days 2 -out ca.crt 2>/dev/null
openssl ecparam -name prime256v1 -genkey -noout -out server.key 2>/dev/null
openssl req -new -key server.key -subj /CN=kube-apiserver -out server.csr 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1,IP:%s,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local\n' \
    "$NODE_IP" >server.ext
openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -extfile server.ext -out server.crt 2>/dev/null
openssl genrsa -out sa.key 2048 2>/dev/null
openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
openssl ecparam -name prime256v1 -genkey -noout -out kubelet-client.key 2>/dev/null
openssl req -new -key kubelet-client.key -subj "/O=system:masters/CN=kube-apiserver-kubelet-client" -out kubelet-client.csr 2>/dev/null
echo extendedKeyUsage=clientAuth >client.ext
openssl x509 -req -in kubelet-client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -extfile client.ext -out kubelet-client.crt 2>/dev/null
TOKEN=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
echo "$TOKEN,admin,admin-uid,system:masters" >tokens.csv
cat >"$T/admin.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: pcnode, cluster: {server: "https://$NODE_IP:6443", certificate-authority: "$T/pki/ca.crt"}}]
users: [{name: admin, user: {token: "$TOKEN"}}]
contexts: [{name: pcnode, context: {cluster: pcnode, user: admin}}]
current-context: pcnode
EOF

# --- cgroups: the node's own subtree in every v1 hierarchy (kubelet's cgroupRoot must exist) ---
for h in /sys/fs/cgroup/*/; do
    [[ -f "$h/cgroup.procs" ]] || continue
    mkdir -p "$h$NS"
    if [[ -f "$h$NS/cpuset.cpus" ]]; then
        cat "${h}cpuset.cpus" >"$h$NS/cpuset.cpus"
        cat "${h}cpuset.mems" >"$h$NS/cpuset.mems"
    fi
done

# --- containerd: all its state under $T; CRI with runc and the CNI bridge ---
cat >"$T/containerd/config.toml" <<EOF
version = 2
root = "$T/containerd/root"
state = "$T/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]
[grpc]
  address = "$T/containerd.sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "$T/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "pcnode.local/pause:1"
  enable_selinux = false
  # No CAP_SYS_RESOURCE here: a sandbox's oom_score_adj below containerd's own is refused.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$(command -v runc)"
        Root = "$T/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$T/cni/net.d"
EOF
cat >"$T/cni/net.d/10-pcnode.conflist" <<EOF
{"cniVersion": "0.4.0", "name": "pcnode", "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "dataDir": "$T/cni/ipam",
            "ranges": [[{"subnet": "$POD_CIDR"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}
]}
EOF

# --- kubelet ---
cat >"$T/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
cgroupRoot: /$NS
failSwapOn: false
containerRuntimeEndpoint: unix://$T/containerd.sock
address: $NODE_IP
healthzBindAddress: 127.0.0.1
readOnlyPort: 0
authentication: {anonymous: {enabled: false}, webhook: {enabled: true}, x509: {clientCAFile: "$T/pki/ca.crt"}}
authorization: {mode: Webhook}
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
# The kernel tunables kubelet wants (host-wide, not of a namespace) are shown to it by files
# bound over /proc/sys in the node's mount namespace (node.sh): it finds them set and writes
# nothing; a tunable a later kubelet adds fails its start instead of changing the host.
protectKernelDefaults: true
makeIPTablesUtilChains: true
resolvConf: /etc/resolv.conf
podLogsDir: $T/pod-logs
podCIDR: $POD_CIDR
registerNode: true
EOF

# --- the node: every process in this netns and one mount namespace ---
cat >"$T/node.sh" <<EOF
#!/usr/bin/env bash
set -u
# A sysfs of this netns (its interfaces), with the host's cgroup hierarchies kept under it.
mkdir -p $T/cgroupfs
mount --rbind /sys/fs/cgroup $T/cgroupfs
mount -t sysfs sysfs /sys
mount --rbind $T/cgroupfs /sys/fs/cgroup
umount -l $T/cgroupfs
# The host paths kubelet, containerd and libcni use whatever they are told (/run: shim sockets,
# pods' netns files, the xtables lock a DaemonSet's hostPath names; device plugins' sockets, the
# CNI result cache, container log links): a tmpfs of this mount namespace over each, so nothing
# of the node is left on the host's filesystem.
for d in $PRIVATE_DIRS; do mount -t tmpfs -o mode=0755 pcnode "\$d" || exit 1; done
# kubelet's kernel tunables, as it wants them, in this mount namespace only.
mkdir -p $T/sysctl
for kv in vm/overcommit_memory=1 vm/panic_on_oom=0 kernel/panic=10 kernel/panic_on_oops=1 \
          kernel/keys/root_maxkeys=1000000 kernel/keys/root_maxbytes=25000000; do
    f=$T/sysctl/\${kv%%=*}
    mkdir -p "\${f%/*}"
    echo "\${kv#*=}" >"\$f"
    mount --bind "\$f" "/proc/sys/\${kv%%=*}" || exit 1
done
ip link set lo up
# The node's address (no dummy module here: a veth pair with both ends in this netns).
ip link add node0 type veth peer name node1
ip addr add $NODE_IP/24 dev node0
ip link set node1 up
ip link set node0 up
ip route add default dev node0
sysctl -qw net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1 || exit 1
L=$T/logs
$KUBE/bin/etcd --name default --data-dir $T/etcd --listen-client-urls http://127.0.0.1:2379 \\
  --advertise-client-urls http://127.0.0.1:2379 --listen-peer-urls http://127.0.0.1:2380 \\
  --log-level warn >\$L/etcd.log 2>&1 &
$KUBE/bin/kube-apiserver --etcd-servers=http://127.0.0.1:2379 \\
  --service-account-issuer=https://kubernetes.default.svc --service-account-key-file=$T/pki/sa.pub \\
  --service-account-signing-key-file=$T/pki/sa.key --service-cluster-ip-range=10.96.0.0/16 \\
  --cert-dir=$T/pki/apiserver --tls-cert-file=$T/pki/server.crt --tls-private-key-file=$T/pki/server.key \\
  --client-ca-file=$T/pki/ca.crt --secure-port=6443 --bind-address=0.0.0.0 --advertise-address=$NODE_IP \\
  --authorization-mode=Node,RBAC --token-auth-file=$T/pki/tokens.csv --allow-privileged=true \\
  --kubelet-preferred-address-types=InternalIP --kubelet-client-certificate=$T/pki/kubelet-client.crt --kubelet-client-key=$T/pki/kubelet-client.key \\
  >\$L/kube-apiserver.log 2>&1 &
containerd --config $T/containerd/config.toml >\$L/containerd.log 2>&1 &
for i in \$(seq 100); do [[ -S $T/containerd.sock ]] && break; sleep 0.2; done
ctr -a $T/containerd.sock -n k8s.io images import --base-name pcnode.local/pause $PAUSE_TAR >\$L/ctr-import.log 2>&1
for i in \$(seq 300); do curl -fsk https://127.0.0.1:6443/readyz >/dev/null 2>&1 && break; sleep 0.3; done
$NODE/bin/kube-controller-manager --kubeconfig=$T/admin.kubeconfig --leader-elect=false \\
  --service-account-private-key-file=$T/pki/sa.key --root-ca-file=$T/pki/ca.crt \\
  --authentication-kubeconfig=$T/admin.kubeconfig --authorization-kubeconfig=$T/admin.kubeconfig \\
  --controllers='*,-nodeipam' >\$L/kube-controller-manager.log 2>&1 &
$NODE/bin/kube-scheduler --kubeconfig=$T/admin.kubeconfig --leader-elect=false \\
  --authentication-kubeconfig=$T/admin.kubeconfig --authorization-kubeconfig=$T/admin.kubeconfig \\
  >\$L/kube-scheduler.log 2>&1 &
$NODE/bin/kubelet --config=$T/kubelet/config.yaml --kubeconfig=$T/admin.kubeconfig --root-dir=$T/kubelet \\
  --cert-dir=$T/kubelet/pki --hostname-override=pcnode --node-ip=$NODE_IP >\$L/kubelet.log 2>&1 &
$NODE/bin/kube-proxy --kubeconfig=$T/admin.kubeconfig --hostname-override=pcnode --proxy-mode=iptables \\
  --cluster-cidr=$POD_CIDR --conntrack-max-per-core=0 --conntrack-tcp-timeout-established=0 \\
  --conntrack-tcp-timeout-close-wait=0 --metrics-bind-address=127.0.0.1:10249 >\$L/kube-proxy.log 2>&1 &
echo ready >$T/node.started
wait
EOF
chmod +x "$T/node.sh"
setsid ip netns add "$NS"
setsid unshare --mount --propagation slave nsenter --net="/run/netns/$NS" "$T/node.sh" >"$T/logs/node.log" 2>&1 </dev/null &
echo $! >"$T/node.pid"
for _ in $(seq 600); do
    if nsenter --net="/run/netns/$NS" curl -fsS --cacert "$T/pki/ca.crt" -H "Authorization: Bearer $TOKEN" \
        "https://$NODE_IP:6443/api/v1/nodes/pcnode" 2>/dev/null | grep -A1 '"type": "Ready"' | grep -q '"True"'; then
        echo "$NS"
        exit 0
    fi
    kill -0 "$(cat "$T/node.pid")" 2>/dev/null || break
    sleep 0.2
done
echo "kube-node-up: the node did not become Ready; logs in $T/logs" >&2
exit 1
