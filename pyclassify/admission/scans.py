"""Image scan facts: a scan-results file, and (when trusted) a resource's own annotation.

The scan-results file (``--scans FILE``) is YAML or JSON read by the shared loader, so its errors
read ``file:line: path: message`` too::

    apiVersion: admission.pyclassify.io/v1
    kind: ImageScanResults
    results:
      - image: gcr.io/company/production-repository/app:1.4   # an image reference, and/or
        digest: sha256:4f2a...                                  # the image's digest
        status: Pass                                            # Pass | Warn | Fail
        lastScan: "2025-05-01T12:00:00Z"                        # RFC 3339; optional

Several documents (or files) add up; a later entry for the same image replaces an earlier one.
An image is looked up by its reference as written, then by its normalized reference
(``nginx`` = ``docker.io/library/nginx:latest``), then by the digest in ``name@sha256:...``.
An image with no result has status ``Unknown`` and no last-scan time.

The annotation ``admission.pyclassify.io/image-scans`` on a resource (or its pod template)
holds a JSON object of image reference -> ``{"status": ..., "lastScan": ...}``. It is read only on
request (``--trust-scan-annotations``): whoever creates a resource writes its annotations, so a
policy that trusts them lets that person vouch for their own images. The file wins over the
annotation for an image both describe.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyclassify.admission.policy import SCAN_STATUSES, parse_time
from pyclassify.documents import Document, FieldPath, Problems
from pyclassify.loader import load_paths

SCANS_API_VERSION = "admission.pyclassify.io/v1"
SCANS_KIND = "ImageScanResults"
SCAN_ANNOTATION = "admission.pyclassify.io/image-scans"
_DIGEST = re.compile(r"[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[a-zA-Z0-9=_-]{32,}")  # fullmatch: no trailing newline
_ENTRY_KEYS = {"image", "digest", "status", "lastScan"}


@dataclass(frozen=True)
class ScanResult:
    status: str
    last_scan: dt.datetime | None = None
    source: str = ""  # where the fact came from: "file:line" or "annotation"


def normalize_image(ref: str) -> str:
    """The canonical form of an image reference, as container runtimes resolve it:
    ``nginx`` -> ``docker.io/library/nginx:latest``; ``repo/app@sha256:x`` keeps its digest and
    gets no implied tag."""
    name, at, digest = ref.strip().partition("@")
    slash = name.rfind("/")
    colon = name.rfind(":")
    tag = None
    if colon > slash:
        name, tag = name[:colon], name[colon + 1 :]
    first, sep, rest = name.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        domain, path = first, rest
    else:
        domain, path = "docker.io", name
    if domain in ("index.docker.io", "registry-1.docker.io"):
        domain = "docker.io"
    if domain == "docker.io" and "/" not in path:
        path = "library/" + path
    out = f"{domain}/{path}"
    if tag:
        out += f":{tag}"
    elif not at:
        out += ":latest"
    if at:
        out += f"@{digest}"
    return out


def image_digest(ref: str) -> str | None:
    _, at, digest = ref.partition("@")
    return digest if at and digest else None


@dataclass
class ScanResults:
    by_image: dict[str, ScanResult] = field(default_factory=dict)  # normalized reference -> result
    by_digest: dict[str, ScanResult] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.by_image) + len(self.by_digest)

    def add(self, image: str | None, digest: str | None, result: ScanResult) -> None:
        if image:
            self.by_image[normalize_image(image)] = result
            embedded = image_digest(image)
            if embedded and not digest:
                self.by_digest[embedded] = result
        if digest:
            self.by_digest[digest] = result

    def lookup(self, image: str) -> ScanResult | None:
        found = self.by_image.get(normalize_image(image))
        if found is not None:
            return found
        digest = image_digest(image)
        return self.by_digest.get(digest) if digest else None

    def merged_over(self, other: ScanResults) -> ScanResults:
        """These results, falling back to ``other`` for images these do not describe."""
        return ScanResults({**other.by_image, **self.by_image}, {**other.by_digest, **self.by_digest})


def _entry(
    entry: Any, where: str, problems_out: list[tuple[FieldPath, str]], path: FieldPath
) -> tuple[str | None, str | None, ScanResult] | None:
    """One scan entry; problems go to ``problems_out`` as (path, message)."""
    if not isinstance(entry, dict):
        problems_out.append((path, "a scan result must be an object"))
        return None
    n = len(problems_out)
    for key in entry:
        if key not in _ENTRY_KEYS:
            problems_out.append((path + (key,), f"unknown field {key!r}"))
    image = entry.get("image")
    digest = entry.get("digest")
    if image is not None and (not isinstance(image, str) or not image.strip()):
        problems_out.append((path + ("image",), f"must be an image reference, got {image!r}"))
    if digest is not None and (not isinstance(digest, str) or not _DIGEST.fullmatch(digest)):
        problems_out.append((path + ("digest",), f"Invalid value: {digest!r}: must be a digest such as sha256:<hex>"))
    if image is None and digest is None:
        problems_out.append((path, "Required value: image or digest"))
    status = entry.get("status")
    if status not in SCAN_STATUSES:
        problems_out.append(
            (
                path + ("status",),
                f"Unsupported value: {status!r}: supported values: " + ", ".join(f'"{s}"' for s in SCAN_STATUSES),
            )
        )
    last = entry.get("lastScan")
    when = None
    if last is not None:
        when = parse_time(last) if isinstance(last, str) else None
        if when is None:
            problems_out.append(
                (path + ("lastScan",), f"Invalid value: {last!r}: must be an RFC 3339 time (2006-01-02T15:04:05Z07:00)")
            )
    if len(problems_out) != n:
        return None
    return image, digest, ScanResult(str(status), when, where)


def scans_from_documents(docs: Iterable[Document], problems: Problems) -> ScanResults:
    results = ScanResults()
    for doc in docs:
        if doc.kind != SCANS_KIND or doc.api_version != SCANS_API_VERSION:
            problems.error(
                doc,
                ("kind",),
                f"a scan-results file holds kind {SCANS_KIND} "
                f"(apiVersion {SCANS_API_VERSION}), not {doc.api_version}/{doc.kind}",
            )
            continue
        for key in doc.obj:
            if key not in ("apiVersion", "kind", "metadata", "results"):
                problems.error(doc, (key,), f"unknown field {key!r}")
        entries = doc.obj.get("results")
        if entries is None:
            entries = []
        if not isinstance(entries, list):
            problems.error(doc, ("results",), "must be a list of scan results")
            continue
        for i, entry in enumerate(entries):
            path: FieldPath = ("results", i)
            found: list[tuple[FieldPath, str]] = []
            parsed = _entry(entry, f"{doc.file}:{doc.line_of(path)}", found, path)
            for where, message in found:
                problems.error(doc, where, message)
            if parsed is not None:
                results.add(*parsed)
    return results


def load_scans(paths: Iterable[str | Path], problems: Problems) -> ScanResults:
    """Scan results from files (YAML or JSON); every problem is reported, none raised."""
    return scans_from_documents(load_paths([str(p) for p in paths], problems), problems)


def scans_from_annotations(annotations: Mapping[str, Any]) -> tuple[ScanResults, list[str]]:
    """The scan facts a resource's annotation claims, and the problems with it (as messages)."""
    raw = annotations.get(SCAN_ANNOTATION)
    results = ScanResults()
    if raw is None:
        return results, []
    where = f"metadata.annotations[{SCAN_ANNOTATION!r}]"
    try:
        obj = json.loads(raw) if isinstance(raw, str) else None
    except (ValueError, RecursionError) as e:
        return results, [f"{where}: invalid JSON: {e}"]
    if not isinstance(obj, dict):
        return results, [f"{where}: must be a JSON object of image reference -> {{status, lastScan}}"]
    messages: list[str] = []
    for image, entry in obj.items():
        found: list[tuple[FieldPath, str]] = []
        if isinstance(entry, dict):
            entry = {**entry, "image": image}
        parsed = _entry(entry, "annotation", found, (image,))
        messages.extend(f"{where}[{image!r}]: {msg}" for _, msg in found)
        if parsed is not None:
            results.add(*parsed)
    return results, messages
