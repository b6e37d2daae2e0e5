"""The engine spec's contract: what ``pyclassify.engine`` writes matches the TypedDicts of
``pyclassify.engine_spec`` (generated from the Rust types; ``cargo test`` holds the file to
them), and the engine refuses a key it does not declare, naming its path, rather than letting
it take its default."""

from __future__ import annotations

import types
import typing
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings

from pyclassify import _engine, engine_spec
from pyclassify.engine import EngineError, EngineState
from pyclassify.spec_builder import engine_spec as whole_world_spec
from tests.test_engine_differential import world_st


def conforms(value: object, annotation: Any, path: str) -> None:
    """Asserts that ``value`` is of the TypedDict-built ``annotation`` (keys exactly as declared)."""
    origin = typing.get_origin(annotation)
    if typing.is_typeddict(annotation):
        assert isinstance(value, dict), path
        hints = typing.get_type_hints(annotation)
        unknown = set(value) - set(hints)
        assert not unknown, f"{path}: keys {sorted(unknown)} not declared by {annotation.__name__}"
        missing = annotation.__required_keys__ - set(value)
        assert not missing, f"{path}: required keys {sorted(missing)} of {annotation.__name__} missing"
        for key, item in value.items():
            hint = hints[key]
            if typing.get_origin(hint) is typing.NotRequired:
                hint = typing.get_args(hint)[0]
            conforms(item, hint, f"{path}.{key}")
    elif origin in (types.UnionType, typing.Union):
        errors = []
        for alternative in typing.get_args(annotation):
            try:
                conforms(value, alternative, path)
                return
            except AssertionError as e:
                errors.append(str(e))
        raise AssertionError(f"{path}: {value!r} is none of {annotation}: {errors}")
    elif origin is list:
        assert isinstance(value, list), f"{path}: {value!r} is not a list"
        for i, item in enumerate(value):
            conforms(item, typing.get_args(annotation)[0], f"{path}[{i}]")
    elif origin is tuple:
        args = typing.get_args(annotation)
        assert isinstance(value, (list, tuple)) and len(value) == len(args), f"{path}: {value!r}"
        for i, (item, arg) in enumerate(zip(value, args)):
            conforms(item, arg, f"{path}[{i}]")
    elif origin is dict:
        assert isinstance(value, dict), f"{path}: {value!r} is not a dict"
        for key, item in value.items():
            conforms(item, typing.get_args(annotation)[1], f"{path}.{key}")
    elif annotation is type(None):
        assert value is None, f"{path}: {value!r} is not None"
    elif annotation is float:
        assert isinstance(value, (int, float)) and not isinstance(value, bool), f"{path}: {value!r}"
    elif annotation is int:
        assert isinstance(value, int) and not isinstance(value, bool), f"{path}: {value!r}"
    else:
        assert isinstance(value, annotation), f"{path}: {value!r} is not {annotation}"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(world_st())
def test_the_whole_world_spec_is_what_the_types_declare(world):
    policy_set, inventory = world
    spec = orjson.loads(orjson.dumps(whole_world_spec(policy_set, inventory)))
    conforms(spec, engine_spec.Spec, "spec")
    _engine.Engine(orjson.dumps(spec).decode())  # and the engine reads it


class Recording:
    """A model that keeps each delta it is given."""

    def __init__(self, model: _engine.Model) -> None:
        self.model = model
        self.sent: list[bytes] = []

    def __getattr__(self, name: str) -> object:
        return getattr(self.model, name)

    def apply(self, delta: bytes) -> None:
        self.sent.append(bytes(delta))
        self.model.apply(delta)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(world_st())
def test_every_delta_is_what_the_types_declare(world):
    policy_set, inventory = world
    state = EngineState()
    recording = Recording(state.model)
    state.model = recording  # type: ignore[assignment]
    state.update(policy_set, inventory)
    assert recording.sent
    for delta in recording.sent:
        conforms(orjson.loads(delta), engine_spec.Delta, "delta")


def _pod(**extra: object) -> dict[str, object]:
    return {
        "kind": "pod",
        "namespace": "a",
        "raw_labels": {},
        "sa_labels": {},
        "ips": ["10.0.0.1"],
        "ports": [],
        "host_network": False,
        "profiles": [],
        **extra,
    }


@pytest.mark.parametrize(
    ("delta", "path"),
    [
        ({"endpoints": [_pod(), _pod(namspace="a")]}, "endpoints[1]"),
        ({"endpoints": [_pod(ports=[{"name": None, "protocol": 6, "port": 80, "prot": 1}])]}, "endpoints[0].ports[0]"),
        ({"tiers": [{"name": "default", "default_action": "Deny", "ordr": 1.0}]}, "tiers[0]"),
        (
            {
                "policies": [
                    {
                        "tier": "default",
                        "types": ["ingress"],
                        "egress": [],
                        "ingress": [],
                        "subject": {"selector": "all()", "endpoint_kinds": ["pod"], "namespace_selectr": "all()"},
                    }
                ]
            },
            "policies[0].subject",
        ),
        (
            {
                "rule_lists": [
                    [{"action": "Allow", "not_protocols": [], "sources": [], "destinations": [], "protocol": [6]}]
                ]
            },
            "rule_lists[0][0]",
        ),
        ({"remove_endpoint": [3]}, None),
    ],
)
def test_a_misspelt_key_is_refused_naming_its_path(delta, path):
    model = _engine.Model()
    with pytest.raises(EngineError, match="unknown field") as refused:
        model.apply(orjson.dumps(delta))
    assert isinstance(refused.value, ValueError)
    if path is not None:
        assert str(refused.value).split(": ")[1].startswith(path), str(refused.value)
    model.apply(orjson.dumps({"endpoints": [_pod()]}))  # the model is still usable


def test_a_misspelt_key_of_a_whole_world_spec_is_refused():
    spec = {
        "namespaces": {},
        "endpoints": [_pod(adressable=True)],
        "network_sets": [],
        "nodes": [],
        "services": [],
        "tiers": [],
        "policies": [],
        "profiles": [],
    }
    with pytest.raises(EngineError, match=r"endpoints\[0\]\S*: unknown field `adressable`"):
        _engine.Engine(orjson.dumps(spec).decode())
