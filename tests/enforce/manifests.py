"""Manifests for the namespace topology: three namespaces a, b, c with one pod each at
10.244.{1,2,3}.2; a NetworkPolicy, an AdminNetworkPolicy, a Calico GlobalNetworkPolicy, a
BaselineAdminNetworkPolicy and a ClusterNetworkPolicy (v1alpha2), each deciding some pod pair."""

INVENTORY = """
apiVersion: v1
kind: Namespace
metadata: {name: a}
---
apiVersion: v1
kind: Namespace
metadata: {name: b}
---
apiVersion: v1
kind: Namespace
metadata: {name: c}
---
apiVersion: v1
kind: Pod
metadata: {name: a1, namespace: a, labels: {app: a}}
spec: {containers: [{name: s, image: x, ports: [{name: http, containerPort: 8080}]}]}
status: {podIP: 10.244.1.2}
---
apiVersion: v1
kind: Pod
metadata: {name: b1, namespace: b, labels: {app: b}}
spec: {containers: [{name: s, image: x, ports: [{name: http, containerPort: 8080}]}]}
status: {podIP: 10.244.2.2}
---
apiVersion: v1
kind: Pod
metadata: {name: c1, namespace: c, labels: {app: c}}
spec: {containers: [{name: s, image: x, ports: [{name: http, containerPort: 8080}]}]}
status: {podIP: 10.244.3.2}
"""

# b accepts TCP 8080 from namespace a only.
NETPOL = """
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: b-from-a, namespace: b}
spec:
  podSelector: {}
  policyTypes: [Ingress]
  ingress:
  - from:
    - namespaceSelector:
        matchLabels: {kubernetes.io/metadata.name: a}
    ports:
    - {protocol: TCP, port: 8080}
"""

# Nothing from namespace b reaches namespace c.
ANP = """
apiVersion: policy.networking.k8s.io/v1alpha1
kind: AdminNetworkPolicy
metadata: {name: c-not-from-b}
spec:
  priority: 10
  subject:
    namespaces:
      matchLabels: {kubernetes.io/metadata.name: c}
  ingress:
  - name: deny-b
    action: Deny
    from:
    - namespaces:
        matchLabels: {kubernetes.io/metadata.name: b}
"""

# Pods of app a take no UDP.
GNP = """
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: a-no-udp}
spec:
  selector: app == 'a'
  types: [Ingress]
  ingress:
  - action: Deny
    protocol: UDP
  - action: Allow
"""

# Baseline: namespace c takes no TCP from namespace a (c has no NetworkPolicy, so the
# baseline tier decides c's ingress once the admin tier passes).
BANP = """
apiVersion: policy.networking.k8s.io/v1alpha1
kind: BaselineAdminNetworkPolicy
metadata: {name: default}
spec:
  subject:
    namespaces:
      matchLabels: {kubernetes.io/metadata.name: c}
  ingress:
  - name: no-tcp-from-a
    action: Deny
    from:
    - namespaces:
        matchLabels: {kubernetes.io/metadata.name: a}
    ports:
    - portNumber: {protocol: TCP, port: 8080}
"""

# ClusterNetworkPolicy (v1alpha2), admin tier: namespace a sends no UDP to namespace c.
CNP = """
apiVersion: policy.networking.k8s.io/v1alpha2
kind: ClusterNetworkPolicy
metadata: {name: a-no-udp-to-c}
spec:
  tier: Admin
  priority: 20
  subject:
    namespaces:
      matchLabels: {kubernetes.io/metadata.name: a}
  egress:
  - name: deny-udp-to-c
    action: Deny
    to:
    - namespaces:
        matchLabels: {kubernetes.io/metadata.name: c}
    protocols:
    - udp: {destinationPort: {number: 5353}}
"""

# The live change: b takes nothing any more.
NETPOL_DENY_ALL = """
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: b-from-a, namespace: b}
spec:
  podSelector: {}
  policyTypes: [Ingress]
"""

# Invalid: a port that is not one.
NETPOL_INVALID = """
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: b-from-a, namespace: b}
spec:
  podSelector: {}
  policyTypes: [Ingress]
  ingress:
  - ports:
    - {protocol: TCP, port: 99999999}
"""


def write(directory, netpol=NETPOL):
    (directory / "00-inventory.yaml").write_text(INVENTORY)
    (directory / "10-netpol.yaml").write_text(netpol)
    (directory / "20-anp.yaml").write_text(ANP)
    (directory / "30-gnp.yaml").write_text(GNP)
    (directory / "40-banp.yaml").write_text(BANP)
    (directory / "50-cnp.yaml").write_text(CNP)


def replace(path, text):
    """Write ``text`` to ``path`` atomically (as editors and kubectl tooling do)."""
    tmp = path.with_name("." + path.name + ".tmp")
    tmp.write_text(text)
    tmp.rename(path)
