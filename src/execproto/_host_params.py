"""Params of the calls about the executor's own setup: ``environmentConfig/read`` and the
capability discovery pair. The adapter reads the files; these only validate what was asked."""

from __future__ import annotations

from typing import Any

from . import _sandbox
from ._errors import invalid_params
from ._fields import Fields, text, wrong_type
from ._paths import path_from_uri
from ._structs import as_struct, short_struct


def _key_paths(value: Any) -> tuple[tuple[str, ...], ...]:
    """A list of TOML key paths, each a list of keys: ``[["mcp_servers", "foo"]]``."""
    if not isinstance(value, list):
        raise wrong_type(value, "a sequence")
    out = []
    for item in value:
        if not isinstance(item, list):
            raise wrong_type(item, "a sequence")
        out.append(tuple(text(key) for key in item))
    return tuple(out)


def config_read(raw: Any) -> dict[str, Any]:
    f = Fields(raw, "EnvironmentConfigReadParams")
    cwd = path_from_uri(f.text("cwd"))
    config_paths = f.required("configPaths", _key_paths)
    requirements_paths = f.required("requirementsPaths", _key_paths)
    selected = config_paths + requirements_paths
    if not selected:
        raise invalid_params("at least one config or requirements path is required")
    if any(not path for path in selected):
        raise invalid_params("TOML paths must contain at least one key segment")
    return {"cwd": cwd, "configPaths": config_paths, "requirementsPaths": requirements_paths}


def unit(raw: Any) -> None:
    """Params of a method that takes none: absent, null or an empty object (serde's unit)."""
    if raw is not None and raw != {}:
        raise wrong_type(raw, "unit")


_DISCOVER_V2_FIELDS = ("cwd", "sandbox")


def discover_v2(raw: Any) -> dict[str, Any]:
    if not isinstance(raw, (dict, list)):
        raise wrong_type(raw, "struct DiscoverV2CapabilitiesRequest")
    f = Fields(as_struct(raw, _DISCOVER_V2_FIELDS), "DiscoverV2CapabilitiesRequest")
    cwd = path_from_uri(text(f.raw("cwd"))) if f.has("cwd") else None
    short_struct(raw, "DiscoverV2CapabilitiesRequest", _DISCOVER_V2_FIELDS, 1)
    if cwd is None:
        raise invalid_params("missing field `cwd`")
    # The skills are read as an fs call with this sandbox reads (the server narrows it). Its
    # sandbox, unlike an fs call's, must name its cwd (the reference's answer, measured).
    sandbox = _sandbox.parse(f.raw("sandbox"), for_fs=True)
    if sandbox is not None and "cwd" not in f.raw("sandbox"):
        raise invalid_params("missing field `cwd`")
    return {"cwd": cwd, "sandbox": sandbox}


def _root(value: Any) -> dict[str, Any]:
    """A root to scan, and the sandbox it is scanned under (None: the server's own scope)."""
    f = Fields(value, "WireCapabilityRoot")
    return {"id": f.text("id"), "path": path_from_uri(f.text("path")),
            "sandbox": _sandbox.parse(f.raw("sandbox"), for_fs=True)}


def _roots(value: Any) -> tuple[dict[str, Any], ...]:
    if not isinstance(value, list):
        raise wrong_type(value, "a sequence")
    return tuple(_root(item) for item in value)


def discover_v1(raw: Any) -> dict[str, Any]:
    f = Fields(raw, "WireCapabilityRootsDiscoverParams")
    return {"roots": f.required("roots", _roots)}
