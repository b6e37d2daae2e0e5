"""Container admission: Calico's ContainerAdmissionPolicy (containersecurity.tigera.io/v1beta1).

It decides on pod-creating resources, not packets, but is one more policy kind of the same family:
the same selector language, ordered policies, ordered first-match rules and explanations.

- ``policy``: the kind, validated into typed dataclasses (``load_admission``).
- ``scans``: the scan-results file (image or digest -> status and last-scan time).
- ``evaluate``: ``evaluate.evaluate()``, the decision for a resource and, per container, the policy and rule behind it.
- ``webhook``: a Kubernetes validating admission webhook (AdmissionReview v1 over HTTPS).

The ``admit`` and ``admission-webhook`` commands are ``pyclassify.cli.admission``.

Semantics (see ``evaluate`` for the details):

- Policies apply in ascending ``order`` (unset last), ties by name. A policy takes part when its
  ``selector`` matches the resource's labels and its ``namespaceSelector`` the labels of the
  resource's namespace (both default to ``all()``).
- Each container image (containers, initContainers, ephemeralContainers) is decided on its own:
  the first rule, of the first selecting policy, whose criteria all match decides (a rule without
  criteria matches everything). A policy none of whose rules match makes no decision and the next
  policy is asked; an image no policy decides is admitted. That is what the seed's sample implies:
  it ends with an explicit catch-all ``- action: Reject``, which would be redundant if falling off
  the end rejected. Write a final catch-all rule to get default-deny.
- A resource is admitted only if every container image is admitted; one no policy selects is
  admitted (and ``explain`` says so).
- ``imagePath`` values are regular expressions that match anywhere in the image reference as the
  pod spec writes it (anchor with ``^``/``$``, as the seed's sample does); they are compiled at load
  time by Rust's ``regex`` crate (linear time: no catastrophic backtracking).
"""

from pyclassify.admission.evaluate import (
    AdmissionResource,
    ContainerDecision,
    ResourceDecision,
    resource_from_document,
    resource_from_object,
)
from pyclassify.admission.policy import (
    AdmissionPolicy,
    AdmissionRule,
    AdmissionSet,
    build_admission,
    check_admission_documents,
    is_admission_policy,
    load_admission,
    normalize_admission_policy,
)
from pyclassify.admission.scans import ScanResult, ScanResults, load_scans

__all__ = [
    "AdmissionPolicy",
    "AdmissionResource",
    "AdmissionRule",
    "AdmissionSet",
    "ContainerDecision",
    "ResourceDecision",
    "ScanResult",
    "ScanResults",
    "build_admission",
    "check_admission_documents",
    "is_admission_policy",
    "load_admission",
    "load_scans",
    "normalize_admission_policy",
    "resource_from_document",
    "resource_from_object",
]
