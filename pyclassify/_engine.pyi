"""Decision engine of pyclassify (Rust, pyo3). Keep in step with rust/py/src/; tests/test_stubs.py checks."""

from typing import Final

__version__: Final[str]

# header batch (rust/py/src/batch.rs)
HEADER_SIZE: Final[int]

def header_layout() -> list[tuple[str, int, int]]:
    """Layout of PacketHeader as [(name, offset, size), ...] in declaration order."""

def header_flags() -> list[tuple[str, int]]:
    """The flags bits of PacketHeader as [(name, value), ...]."""

# selector language (rust/py/src/selector.rs, errors in rust/py/src/errors.rs)
from collections.abc import Mapping
from typing import Any

MAX_SELECTOR_LEN: Final[int]
MAX_DEPTH: Final[int]
MAX_LABEL_LEN: Final[int]

class SelectorError(ValueError):
    message: str
    position: int | None
    field: str | None
    kind: str

class LabelRestriction:
    must_be_present: bool
    must_be_absent: bool
    must_have_one_of_values: list[str] | None

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
