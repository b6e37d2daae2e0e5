"""Manifests for the namespace topology: three namespaces a, b, c with one pod each at
10.244.{1,2,3}.2; a NetworkPolicy, an AdminNetworkPolicy and a Calico GlobalNetworkPolicy."""

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


def replace(path, text):
    """Write ``text`` to ``path`` atomically (as editors and kubectl tooling do)."""
    tmp = path.with_name("." + path.name + ".tmp")
    tmp.write_text(text)
    tmp.rename(path)
