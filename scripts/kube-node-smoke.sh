#!/usr/bin/env bash
# End to end on a real single node (scripts/kube-node-up.sh): the pyclassify image imported into
# containerd, a pod reading the API server through in-cluster config (the `kubernetes` Service via
# kube-proxy), the Helm chart's DaemonSet installed by helm, scheduled and Ready through its probes, a NetworkPolicy
# blocking a real pod-to-pod connection and another allowing it, the DaemonSet rolled while the
# deny holds. Prints how long each step took; tears the node down whatever happens.
#
#   bash scripts/kube-node-smoke.sh [OCI_LAYOUT_DIR]   (default: the newest image of
#                                                      ~/.cache/pyclassify-image)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(dirname "$HERE")
IMG=${1:-$(ls -dt "${PYCLASSIFY_IMAGE_CACHE:-$HOME/.cache/pyclassify-image}"/image-*/oci | head -1)}
T=$(mktemp -d /tmp/pcnode.XXXXXX)
down() {
    local t=$SECONDS
    bash "$HERE/kube-node-down.sh" "$T"
    echo "kube-node-smoke: node down and removed in $((SECONDS - t)) s" >&2
}
trap down EXIT
now() { date +%s.%N; }
since() { python3 -c "import sys, time; print(f'{time.time() - float(sys.argv[1]):.1f} s')" "$1"; }
say() { echo "kube-node-smoke: $*" >&2; }

t=$(now)
NS=$(bash "$HERE/kube-node-up.sh" "$T")
say "node Ready $(since "$t") after start (netns $NS)"
TOKEN=$(cut -d, -f1 "$T/pki/tokens.csv")
# k METHOD PATH [BODY_FILE]: the API server, from inside the node's netns
k() {
    local ct=application/yaml
    [[ $1 == PATCH ]] && ct=application/strategic-merge-patch+json
    nsenter --net="/run/netns/$NS" curl -sS --cacert "$T/pki/ca.crt" -H "Authorization: Bearer $TOKEN" \
        -X "$1" -H "Content-Type: $ct" ${3:+--data-binary "@$3"} "https://10.99.0.1:6443$2"
}
json() { python3 -c "import json, sys; d = json.load(sys.stdin); print($1)"; }
wait_for() {  # wait_for WHAT TIMEOUT_S COMMAND...: until COMMAND succeeds
    local what=$1 limit=$2 start
    start=$(now)
    shift 2
    until "$@"; do
        if python3 -c "import sys, time; sys.exit(time.time() - float(sys.argv[1]) < float(sys.argv[2]))" "$start" "$limit"; then
            say "timed out waiting for $what"
            exit 1
        fi
        sleep 0.2
    done
}
pod_ready() {
    [[ $(k GET "/api/v1/namespaces/$1/pods/$2" | json 'any(c["type"] == "Ready" and c["status"] == "True" for c in d["status"].get("conditions", []))') == True ]]
}
log_has() { [[ $(k GET "/api/v1/namespaces/$1/pods/$2/log") == *"$3"* ]]; }

t=$(now)
tar -C "$IMG" -cf "$T/image.tar" .
ctr -a "$T/containerd.sock" -n k8s.io images import --base-name pcnode.local/pyclassify "$T/image.tar" >/dev/null
rm "$T/image.tar"
say "image $IMG imported in $(since "$t")"

cat >"$T/incluster.yaml" <<'EOF'
apiVersion: v1
kind: Pod
metadata: {name: incluster, namespace: default}
spec:
  dnsPolicy: Default
  terminationGracePeriodSeconds: 1
  containers:
  - name: reader
    image: pcnode.local/pyclassify:0.1.0
    imagePullPolicy: Never
    command: [python3, -c]
    args:
    - |
      import json, os, ssl, time, urllib.request
      d = "/var/run/secrets/kubernetes.io/serviceaccount/"
      url = "https://%s:%s/api/v1/namespaces/default/pods" % (os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"])
      ctx = ssl.create_default_context(cafile=d + "ca.crt")
      while True:
          try:
              req = urllib.request.Request(url, headers={"Authorization": "Bearer " + open(d + "token").read()})
              names = [p["metadata"]["name"] for p in json.load(urllib.request.urlopen(req, context=ctx, timeout=3))["items"]]
              print("in-cluster read OK via", url, names, flush=True)
              open("/tmp/ok", "w").close()
          except Exception as e:
              print("in-cluster read failed:", repr(e), flush=True)
          time.sleep(5)
    readinessProbe:
      exec: {command: [test, -f, /tmp/ok]}
      periodSeconds: 1
EOF
cat >"$T/view.yaml" <<'EOF'
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: default-view}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: view}
subjects: [{kind: ServiceAccount, name: default, namespace: default}]
EOF
k POST /apis/rbac.authorization.k8s.io/v1/clusterrolebindings "$T/view.yaml" >/dev/null
sa_exists() { [[ $(k GET /api/v1/namespaces/default/serviceaccounts/default) == *'"uid"'* ]]; }
wait_for "the default service account" 60 sa_exists
t=$(now)
k POST /api/v1/namespaces/default/pods "$T/incluster.yaml" >/dev/null
wait_for "pod incluster Ready" 120 pod_ready default incluster
say "pod Ready $(since "$t") after it was created"
wait_for "an in-cluster read" 30 log_has default incluster "in-cluster read OK via https://10.96.0.1:443"
say "the pod read the API server through the kubernetes Service (10.96.0.1:443)"

# The DaemonSet of the Helm chart (deploy/helm/pyclassify), installed by helm itself from inside
# the node's netns, with the imported image.
HELM=$(bash "$HERE/helm-testenv.sh")
ds_ready() {
    [[ $(k GET /apis/apps/v1/namespaces/pyclassify-system/daemonsets/pyclassify \
        | json 'd["status"].get("observedGeneration") == d["metadata"]["generation"] and d["status"].get("updatedNumberScheduled") == d["status"].get("numberReady") == 1') == True ]]
}
t=$(now)
HELM_CACHE_HOME="$T/helm" HELM_CONFIG_HOME="$T/helm" HELM_DATA_HOME="$T/helm" \
    nsenter --net="/run/netns/$NS" "$HELM" install pyclassify "$REPO/deploy/helm/pyclassify" \
    --kubeconfig "$T/admin.kubeconfig" --namespace pyclassify-system --create-namespace \
    --set image.repository=pcnode.local/pyclassify --set image.tag=0.1.0 --set image.pullPolicy=Never >/dev/null
wait_for "the DaemonSet Ready" 180 ds_ready
say "DaemonSet (helm install) Ready $(since "$t") after helm started"

cat >"$T/web.yaml" <<'EOF'
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: default, labels: {app: web}}
spec:
  dnsPolicy: Default
  terminationGracePeriodSeconds: 1
  containers:
  - name: web
    image: pcnode.local/pyclassify:0.1.0
    imagePullPolicy: Never
    command: [python3, -m, http.server, "8080", --directory, /tmp]
    readinessProbe: {tcpSocket: {port: 8080}, periodSeconds: 1}
EOF
k POST /api/v1/namespaces/default/pods "$T/web.yaml" >/dev/null
wait_for "pod web Ready" 120 pod_ready default web
WEB=$(k GET /api/v1/namespaces/default/pods/web | json 'd["status"]["podIP"]')
cat >"$T/client.yaml" <<EOF
apiVersion: v1
kind: Pod
metadata: {name: client, namespace: default, labels: {role: client}}
spec:
  dnsPolicy: Default
  terminationGracePeriodSeconds: 1
  containers:
  - name: client
    image: pcnode.local/pyclassify:0.1.0
    imagePullPolicy: Never
    command: [python3, -c]
    args:
    - |
      import socket, time
      while True:
          t = time.time()
          try:
              socket.create_connection(("$WEB", 8080), timeout=0.5).close()
              print("%.3f connect OK" % t, flush=True)
          except OSError as e:
              print("%.3f connect FAIL %r" % (t, e), flush=True)
          time.sleep(0.1)
EOF
k POST /api/v1/namespaces/default/pods "$T/client.yaml" >/dev/null
wait_for "client connecting" 60 log_has default client "connect OK"
say "client -> web ($WEB:8080) connects with no policy"

cat >"$T/deny.yaml" <<'EOF'
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: web-deny, namespace: default}
spec:
  podSelector: {matchLabels: {app: web}}
  policyTypes: [Ingress]
EOF
last_result() { k GET "/api/v1/namespaces/default/pods/client/log?tailLines=1" | awk '{print $3}'; }
blocked() { [[ $(last_result) == FAIL ]]; }
allowed() { [[ $(last_result) == OK ]]; }
t=$(now)
k POST /apis/networking.k8s.io/v1/namespaces/default/networkpolicies "$T/deny.yaml" >/dev/null
wait_for "the deny policy to block" 30 blocked
say "deny-all ingress on web blocks client -> web $(since "$t") after it was created"

t0=$(now)
echo '{"spec":{"template":{"metadata":{"annotations":{"pcnode/rollout":"1"}}}}}' >"$T/roll.json"
k PATCH /apis/apps/v1/namespaces/pyclassify-system/daemonsets/pyclassify "$T/roll.json" >/dev/null
sleep 1
wait_for "the rolled DaemonSet Ready" 180 ds_ready
t1=$(now)
opened=$(k GET /api/v1/namespaces/default/pods/client/log | awk -v a="$t0" -v b="$t1" '$1 + 0 >= a && $1 + 0 <= b && $3 == "OK"' | wc -l)
tried=$(k GET /api/v1/namespaces/default/pods/client/log | awk -v a="$t0" -v b="$t1" '$1 + 0 >= a && $1 + 0 <= b' | wc -l)
say "DaemonSet rolled in $(python3 -c "print(f'{$t1 - $t0:.1f} s')"): $opened of $tried connection attempts during it opened"
web_ready=$(k GET /api/v1/namespaces/default/pods/web | json '[c["status"] for c in d["status"]["conditions"] if c["type"] == "Ready"][0]')
say "web Ready under the deny policy (kubelet's probe from the node): $web_ready"

cat >"$T/allow.yaml" <<'EOF'
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: web-allow-client, namespace: default}
spec:
  podSelector: {matchLabels: {app: web}}
  policyTypes: [Ingress]
  ingress:
  - from: [{podSelector: {matchLabels: {role: client}}}]
    ports: [{port: 8080, protocol: TCP}]
EOF
t=$(now)
k POST /apis/networking.k8s.io/v1/namespaces/default/networkpolicies "$T/allow.yaml" >/dev/null
wait_for "the allow policy to let client in" 30 allowed
say "allow from role=client lets client -> web through again $(since "$t") after it was created"
say "state on disk: $(du -sh "$T" | cut -f1) ($(du -sh "$T/containerd" | cut -f1) of it containerd's)"
