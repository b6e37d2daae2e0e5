"""Decision engine of pyclassify (Rust, pyo3). Keep in step with rust/py/src/; tests/test_stubs.py checks."""

from collections.abc import Mapping
from typing import Any, Final

__version__: Final[str]

# header batch (rust/py/src/batch.rs)
HEADER_SIZE: Final[int]

def header_layout() -> list[tuple[str, int, int]]:
    """Layout of PacketHeader as [(name, offset, size), ...] in declaration order."""

def header_flags() -> list[tuple[str, int]]:
    """The flags bits of PacketHeader as [(name, value), ...]."""

def error_kinds() -> list[tuple[str, int]]:
    """The values of PacketHeader.error_kind as [(name, value), ...] in value order."""

def encap_kinds() -> list[tuple[str, int]]:
    """The values of PacketHeader.encap (the tunnel a packet was found in) as [(name, value), ...]."""

ENGINE_API_SIZE: Final[int]

def record_layouts() -> list[tuple[str, tuple[str, int, int, list[tuple[str, int, int, str]]]]]:
    """Every record shared with C and numpy, a nested record before its user:
    [(name, (c_name, size, align, [(field, offset, size, type), ...])), ...]."""

# selector language (rust/py/src/selector.rs, errors in rust/py/src/errors.rs)

MAX_SELECTOR_LEN: Final[int]
MAX_DEPTH: Final[int]
MAX_LABEL_LEN: Final[int]

class SelectorError(ValueError):
    message: str
    position: int | None
    field: str | None
    kind: str

class LabelRestriction:
    """Read-only (a frozen pyclass)."""
    @property
    def must_be_present(self) -> bool: ...
    @property
    def must_be_absent(self) -> bool: ...
    @property
    def must_have_one_of_values(self) -> list[str] | None: ...

class Selector:
    def __new__(cls, text: str) -> Selector: ...
    @staticmethod
    def parse(text: str) -> Selector: ...
    @staticmethod
    def all() -> Selector: ...
    @staticmethod
    def from_label_selector(obj: Mapping[str, Any]) -> Selector: ...
    @property
    def canonical(self) -> str: ...
    @property
    def contains_global(self) -> bool: ...
    @property
    def is_global(self) -> bool: ...
    @property
    def is_all(self) -> bool: ...
    def matches(self, labels: Mapping[str, str]) -> bool: ...
    def restrictions(self) -> dict[str, LabelRestriction]: ...
    def keys(self) -> list[str]: ...
    def with_key_prefix(self, prefix: str) -> Selector: ...
    def __and__(self, other: Selector) -> Selector: ...
    def __hash__(self) -> int: ...
    def __eq__(self, other: object) -> bool: ...

def tokenize(text: str) -> list[tuple[str, str | None]]:
    """Tokens of a selector as [(calico_kind, value_or_None), ...]."""

# ContainerAdmissionPolicy image patterns (rust/py/src/admission.rs, errors in rust/py/src/errors.rs)
MAX_IMAGE_PATTERNS: Final[int]
MAX_IMAGE_PATTERN_LEN: Final[int]
MAX_IMAGE_LEN: Final[int]

class ImagePatternError(ValueError):
    message: str
    index: int | None

class ImagePatternSet:
    """Regular expressions matched anywhere in an image reference (linear-time engine)."""
    def __new__(cls, patterns: list[str]) -> ImagePatternSet: ...
    @property
    def patterns(self) -> list[str]: ...
    def is_match(self, image: str) -> bool: ...
    def first_match(self, image: str) -> int | None: ...
    def matches(self, image: str) -> list[int]: ...
    def __len__(self) -> int: ...

# decision engine (rust/py/src/engine.rs)
class EngineError(ValueError): ...

_Source = tuple[str, int]
_Log = tuple[int | None, _Source, int]
_Decision = tuple[bool, int | None, _Source | None, int | None, int, list[_Log], bool]

class Model:
    def __new__(cls) -> Model: ...
    def apply(self, delta_json: str | bytes) -> None: ...
    def set_domain_facts(self, facts: DomainFacts | None) -> None: ...
    def snapshot(self) -> Engine: ...
    def stats(self) -> list[tuple[str, int]]: ...

class Engine:
    def __new__(cls, spec_json: str) -> Engine: ...
    def stats(self) -> list[tuple[str, int]]: ...
    def compile_stats(self) -> list[tuple[str, int]]: ...
    def walked_for_memory(self) -> list[tuple[str, list[int], int, list[int]]]: ...
    def owner_of(self, ip: str) -> int | None: ...
    def address_class(self, ip: str) -> int: ...
    def class_prefixes(self) -> list[str]: ...
    def port_bounds(self) -> list[int]: ...
    def identity_of(self, endpoint: int) -> int | None: ...
    def tier_policies(self, endpoint: int, direction: str, tier: int) -> list[int]: ...
    def capsule(self) -> Any:
        """PyCapsule "pyclassify._engine.EngineRef" for native loops."""
    def evaluate(
        self,
        src_ip: str | None,
        src_endpoint: int | None,
        dst_ip: str | None,
        dst_endpoint: int | None,
        protocol: int,
        sport: int | None,
        dport: int | None,
        icmp_type: int | None,
        icmp_code: int | None,
        pod_allow: bool,
        host_allow: bool,
        ts_ns: int | None = None,
        request: tuple[str, str] | None = None,
    ) -> tuple[bool, _Decision | None, _Decision | None, bool]: ...
    def judge(
        self,
        headers: Any,
        out: Any,
        pod_allow: bool,
        host_allow: bool,
        tracker: ConnTrack | None = None,
        quotes: Any = None,
        interpret: bool = False,
        data: Any = None,
        segments: Any = None,
        memo: bool = True,
    ) -> None: ...
    def judge_lanes(
        self,
        batch: Any,
        lanes: list[tuple[Engine, Any, Any, Any, ConnTrack | None, Any, Any]],
        pod_allow: bool,
        host_allow: bool,
        data: Any = None,
        dns: Any = None,
    ) -> tuple[int, int, list[int], int] | None: ...
    def judge_via(
        self, headers: Any, out: Any, endpoint: int | None, ingress: bool, pod_allow: bool, host_allow: bool
    ) -> None: ...
    def compiled_listing(
        self, endpoint: int, direction: str, family: int
    ) -> list[
        tuple[
            int | None,
            int | None,
            str | None,
            list[tuple[str, tuple[str, int], int]],
            list[tuple[str, tuple[int, int], str, tuple[int, int], int | None, int | None, int | None, int, bool]],
        ]
    ]: ...

VERDICT_SIZE: Final[int]
PACKET_NOT_IP: Final[int]
HTTP_AWAITS: Final[int]
HTTP_REQUEST: Final[int]
HTTP_TABLE_FULL: Final[int]
HTTP_ERROR: Final[int]
HTTP_OUT_OF_ORDER: Final[int]
HTTP_ERROR_NAMES: Final[list[str]]
ENGINE_ABI_VERSION: Final[int]
CT_STATS_NAMES: Final[list[str]]

# connection tracking (rust/py/src/conntrack.rs, errors in rust/py/src/errors.rs)
class ConnTrackError(ValueError): ...

# (src, dst, sport, dport, proto), original direction; ICMP queries: sport = identifier,
# dport = request type << 8.
_CtFlow = tuple[str, str, int, int, int]

class ConnTrack:
    """The engine's flow table: both directions, TCP state, timeouts, cap with early drop."""

    NEW: Final[int]
    ESTABLISHED: Final[int]
    REPLY: Final[int]
    RELATED: Final[int]
    INVALID: Final[int]
    UNTRACKED: Final[int]
    DENIED: Final[int]
    NEW_PICKUP: Final[int]
    NEW_PICKUP_REPLY: Final[int]
    QUOTED_SIZE: Final[int]
    def __new__(
        cls,
        *,
        max_entries: int = 262144,
        tcp_loose: bool = True,
        sweep_per_packet: int = 2,
        timeouts: Mapping[str, float] | None = None,
    ) -> ConnTrack: ...
    @property
    def config(self) -> dict[str, Any]: ...
    def track(self, batch: Any, verdicts: Any, now_ns: int | None = None, quoted: Any = None) -> tuple[Any, Any]:
        """(states, allowed) uint8 arrays for a HEADER_DTYPE batch; the GIL is released."""
    def expire(self, now_ns: int, budget: int = 4096) -> int: ...
    def revalidate(self, predicate: Any, now_ns: int | None = None) -> list[_CtFlow]: ...
    def flows(self) -> list[dict[str, Any]]: ...
    def stats(self) -> dict[str, int]: ...
    def http_stats(self) -> dict[str, Any]: ...
    def clear(self) -> None: ...
    def __len__(self) -> int: ...

# label index (rust/py/src/labelindex.rs)
class LabelIndex:
    """Which endpoints each selector matches, kept up to date incrementally. Ids are str."""
    def __new__(cls, parent_prefix: str = "pcns.", record_events: bool = False) -> LabelIndex: ...
    def add_selector(self, id: str, selector: Selector | str) -> None: ...
    def remove_selector(self, id: str) -> bool: ...
    def upsert_endpoint(self, id: str, labels: Mapping[str, str], parent: str | None = None) -> None: ...
    def remove_endpoint(self, id: str) -> bool: ...
    def upsert_parent(self, id: str, labels: Mapping[str, str]) -> None: ...
    def remove_parent(self, id: str) -> bool: ...
    def matching_endpoints(self, id: str) -> list[str]: ...
    def matching_selectors(self, id: str) -> list[str]: ...
    def effective_labels(self, id: str) -> dict[str, str]: ...
    def strategy(self, id: str) -> tuple[str, str | None, list[str]]: ...
    def take_events(self) -> list[tuple[str, str, bool]]:
        """Match changes since the last call: [(selector, endpoint, started), ...]."""
    @property
    def record_events(self) -> bool: ...
    @record_events.setter
    def record_events(self, on: bool) -> None: ...
    @property
    def parent_prefix(self) -> str: ...
    @property
    def selector_count(self) -> int: ...
    @property
    def endpoint_count(self) -> int: ...
    @property
    def evaluations(self) -> int: ...
    def check_invariants(self) -> None: ...

# replay's accounting (rust/py/src/flows.rs)
class FlowSet:
    """The distinct connections (5-tuples, the same both ways) of every batch added."""
    def __init__(self) -> None: ...
    def add(self, headers: Any, skip: Any | None = None) -> None: ...
    def __len__(self) -> int: ...

class VerdictTally:
    """A batch's ``VERDICT_DTYPE`` verdicts counted; its table of decisions by rule is reused."""
    def __init__(self) -> None: ...
    def add(
        self, verdicts: Any, outcomes_by_rule: bool = False
    ) -> tuple[
        int, int, list[int], int, int, tuple[int, int], list[tuple[tuple[int, int, int, int, int, int, int], int]]
    ]:
        """(packets, allowed, [packets by reason], policy_allowed, pickups, (no policy egress,
        ingress), [((direction, tier, source_kind, source, rule, reason, allow), packets)])."""

class ServiceIndex:
    """Service entries ``[(address (16 bytes), protocol, port), ...]``, the first of equal keys
    winning, and the lookup of a header batch against them."""
    def __init__(self, entries: list[tuple[bytes, int, int]]) -> None: ...
    def __len__(self) -> int: ...
    def lookup(self, headers: Any, entry: Any, forward: Any) -> None: ...

# manifest reading (rust/py/src/manifest.rs)
class ManifestError(ValueError):
    """The lines of a manifest document could not be recovered (a span that is not a document)."""

class ManifestReader:
    """The documents of one manifest file's bytes (YAML 1.2 as ruamel.yaml reads it, or JSON),
    one record at a time:

    Spans and regions are ``(start byte, end byte (0: not known yet), line, column)``.

    - ``("document", value, line, region)``: a whole document (None if empty);
    - ``("list", kind, api_version | None, line, region)``: a List whose items follow;
    - ``("item", value, index, line, span)``: one item of that List;
    - ``("fallback", line, region, index | None, span | None)``: a document (or item ``index``
      at ``span`` of the List in ``region``) that only ruamel reads;
    - ``("problem", line, message)``: an invalid document or item (skipped), or invalid syntax
      or bytes that are not UTF-8 (the last record).
    """
    def __init__(self, data: bytes) -> None: ...
    @property
    def syntax(self) -> str:
        """ "json" or "yaml"."""
    @property
    def data(self) -> bytes: ...
    def __iter__(self) -> ManifestReader: ...
    def __next__(self) -> tuple[Any, ...]: ...

def manifest_lines(
    data: bytes, syntax: str, start: int, end: int, line: int, col: int, item: int | None = None
) -> dict[tuple[str | int, ...], int]:
    """The line of every key and item of the document or List item at ``data[start:end]``
    (``end`` 0: to the end), which starts at ``line``/``col``; with ``item``, the span is a
    List's document and the lines are those of ``items[item]``, relative to it."""

# strict field validation (rust/py/src/schema.rs)
class SchemaChecker:
    """The bundled schemas (pyclassify/schemas/*.json), compiled."""
    def __init__(self, files: list[str]) -> None:
        """``files``: the schema files' JSON text; ValueError if one is not a schema file."""
    @property
    def kinds(self) -> list[str]:
        """Every ``apiVersion/Kind`` with a schema, sorted."""
    def check(self, obj: Any) -> bool | None:
        """Whether the object ``obj`` has only fields the schema of its own apiVersion and kind
        knows, of the types it allows (a typed list: ``v1`` ``List``'s); None when there is no
        such schema. False also for a value whose JSON type it cannot tell (a timestamp, an
        integer beyond 64 bits): the detailed walk judges those."""

# domains from DNS (rust/py/src/dns.rs, errors in rust/py/src/errors.rs)
DNS_ERROR_NAMES: Final[list[str]]

class DomainPatternError(ValueError):
    message: str
    pattern: str

def domain_pattern_error(text: str) -> str | None:
    """Why ``text`` is not a valid domain pattern (exact, or one ``*`` label standing for one or
    more labels), or None when it is."""

class DomainFacts:
    """(name, address) facts learned from DNS, each valid from when it was learned until its TTL
    plus ``grace_s`` seconds have passed; at most ``capacity`` (the first-expiring fact is evicted
    for a new one). Thread-safe; calls release the GIL."""
    def __new__(cls, capacity: int = 100000, grace_s: int = 0) -> DomainFacts: ...
    @property
    def capacity(self) -> int: ...
    @property
    def grace_s(self) -> int: ...
    def learn(self, name: str, ip: str, ttl: int, now_ns: int) -> bool:
        """Whether the fact was new (a known one gets the later window)."""
    def learn_payload(self, payload: bytes, now_ns: int, tcp: bool = False) -> tuple[int, str | None]:
        """(new facts learned, the DNS_ERROR_NAMES entry that stopped decoding or None) for a UDP
        payload (one DNS response) or, with ``tcp``, a TCP payload of length-prefixed messages
        (the complete messages before an error are learned)."""
    def names_at(self, ip: str, now_ns: int | None = None) -> list[str]: ...
    def matches(self, ip: str, patterns: list[str], now_ns: int | None = None) -> bool:
        """Raises DomainPatternError for an invalid pattern."""
    def expire(self, now_ns: int) -> int: ...
    def stats(self) -> dict[str, int]:
        """learned, refreshed, evicted, expired."""
    @property
    def generation(self) -> int: ...
    def __len__(self) -> int: ...

# flow records (rust/py/src/records.rs)
class RecordStream:
    """One input of flow records read chunk by chunk: ``feed`` returns the records each chunk
    completes as (headers, counts) bytes of ``HEADER_DTYPE`` and ``FLOW_COUNTS_DTYPE`` arrays;
    the names they use and the problems met accumulate."""
    def __init__(self, format: str) -> None: ...
    def feed(self, chunk: bytes | bytearray | memoryview, last: bool) -> tuple[bytes, bytes]: ...
    def read(self, chunk: bytes | bytearray | memoryview, last: bool) -> int:
        """Reads what ``chunk`` completes and keeps it for ``RecordJudge.judge_stream``."""
    @property
    def placed(self) -> int: ...
    def place(self, found: list[tuple[bytes, int] | None]) -> None: ...
    def names_since(self, start: int) -> list[tuple[str, str, str]]: ...
    @property
    def name_count(self) -> int: ...
    @property
    def records(self) -> int: ...
    def problems(self) -> tuple[list[tuple[str, int]], list[tuple[str, int, str]]]: ...

def detect_format(head: bytes) -> str | None:
    """The format of an input whose first bytes are ``head``, or None."""

class VpcColumns:
    """The records of one batch of VPC Flow Logs' Parquet columns, kept in Rust for
    ``RecordJudge.judge_columns`` (the batch's memory reused from one read to the next)."""

    def __init__(self) -> None: ...
    def read(
        self,
        rows: int,
        first_row: int,
        text: dict[str, tuple[Any, Any, Any | None, int, int, tuple[Any, Any | None, int] | None]],
        ints: dict[str, tuple[Any, Any | None, int, int]],
    ) -> tuple[list[tuple[str, int]], list[tuple[str, int, str]]]:
        """Reads ``rows`` rows of columns in place of the records read before, by the text
        reader's rules; returns the problems. ``text``: Arrow strings' (offsets, data,
        validity, offset, offset width 4 or 8, indices), ``indices`` (int32 buffer, validity,
        offset) when the strings are a dictionary; ``ints``: Arrow int32/int64 arrays'
        (values, validity, offset, width 4 or 8)."""
    def arrays(self) -> tuple[bytes, bytes]:
        """The records read last as (headers, counts) bytes."""
    def __len__(self) -> int: ...

def record_formats() -> list[tuple[str, str]]:
    """Every input format as (name, what it is)."""

class RecordLines:
    """``replay --traffic --out``'s lines, written natively a chunk at a time; the texts they
    name (side decisions, endpoints, Services, protocols) given once each as JSON."""
    def __init__(
        self, protocols: list[str], orientations: list[str], reported: list[str], services: list[str]
    ) -> None: ...
    def missing(self, headers: bytes, counts: bytes, verdicts: bytes) -> tuple[list[tuple[int, bytes]], list[bytes]]:
        """What these records' lines need not learned yet: ([(direction, side bytes)], [address])."""
    def learn_side(self, direction: int, side: bytes, json: str) -> None: ...
    def learn_owner(self, address: bytes, json: str) -> None: ...
    def write(self, headers: bytes, counts: bytes, verdicts: bytes, services: bytes, file: str, unit: str) -> bytes:
        """The records' lines as UTF-8 (``file``: the input's name as JSON; ``unit``: line or byte)."""
    @property
    def index(self) -> int: ...

class RecordJudge:
    """Flow records judged under one engine (replay, usage) or two (a diff's old and new), each
    distinct decision once (addresses, protocol, destination port, source port class, ICMP),
    summed as they go; records to a Service's virtual address through its backends."""
    def __init__(
        self,
        engines: list[Engine],
        pod_allow: bool,
        host_allow: bool,
        logs: bool = False,
        services: list[tuple[bytes, int, int, list[tuple[bytes, int]]]] | None = None,
        keep_keys: bool = False,
    ) -> None: ...
    def restart(self) -> None:
        """Starts every sum over (the keys a ``keep_keys`` judge decided stay)."""
    def judge_stream(
        self, stream: RecordStream, file: int, keep: bool = False
    ) -> tuple[bytes, bytes, bytes, bytes] | None:
        """Judges what ``stream.read`` kept; ``keep``: (headers, counts, verdicts, service entries) bytes."""
    def judge_columns(
        self, columns: VpcColumns, file: int, keep: bool = False
    ) -> tuple[bytes, bytes, bytes, bytes] | None:
        """Judges what ``columns.read`` kept; ``keep`` as ``judge_stream``."""
    def judge(
        self, headers: Any, counts: Any, file: int, keep: bool = False
    ) -> tuple[bytes, bytes, bytes, bytes] | None: ...
    def fold(self) -> None:
        """Folds the distinct decisions' sums into the totals (before reading them)."""
    def measures(self) -> tuple[list[int], list[int], list[int], list[int], list[list[int]], list[int]]:
        """(totals, allowed, denied, unplaced, [no policy egress, ingress], outside)."""
    def by_rule(self) -> list[tuple[tuple[int, int, int, int, int, int, int], list[int]]]: ...
    def logged(self) -> list[tuple[tuple[int, int, int, int, int], list[int]]]: ...
    def reported(self) -> list[list[int]]: ...
    def examples(self) -> list[tuple[int, int, bytes, bytes, bytes]]: ...
    def time_range(self) -> tuple[int, int]: ...
    def stats(self) -> tuple[int, int]:
        """(distinct decisions made, records judged)."""
    def flipped(self) -> list[tuple[bytes, bytes, bytes, list[int], int, int, list[tuple[int, int]]]]: ...
