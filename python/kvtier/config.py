"""A kvtier configuration (docs/CONFIG.md) built from a dict, an INI file and/or the
KVTIER_* environment, through the library's own parser: a bad key or value raises with
the library's one-line reason, never falls back to a default."""

from __future__ import annotations

import ctypes
import os
from typing import Any, Iterator, Mapping

from ._lib import cstr, lib
from .errors import check, error
from .keys import ns_field

# the namespace fields: what docs/FORMAT.md section 1 refuses is refused before C sees it
_NS_KEYS = {"model.name", "model.revision", "model.tenant"}


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(_text(v) for v in value)
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return str(value)


def flatten(values: Mapping[str, Any]) -> dict[str, str]:
    """{"dram": {"bytes": "1GiB"}, "store.tiers": ["dram", "fs"]} ->
    {"dram.bytes": "1GiB", "store.tiers": "dram,fs"}."""
    out: dict[str, str] = {}
    for k, v in values.items():
        if isinstance(v, Mapping):
            for k2, v2 in flatten(v).items():
                out[f"{k}.{k2}"] = v2
        else:
            out[str(k)] = _text(v)
    return out


def _msg(err) -> str:
    """The library's one-line reason. It quotes the offending value, which may be any
    bytes (a config file's), or cut inside a UTF-8 character: undecodable bytes must not
    turn the reason into a UnicodeDecodeError."""
    return err.value.decode(errors="replace")


class Config:
    """Owns a struct kvt_config. Values apply in this order: defaults, file, environment
    (env=True), then the dict."""

    def __init__(self, values: Mapping[str, Any] | None = None, *,
                 file: str | os.PathLike | None = None, env: bool = False):
        p = ctypes.c_void_p()
        check(lib.kvt_config_create(ctypes.byref(p)), "kvt_config_create")
        self._ptr = p
        if file is not None:
            err = ctypes.create_string_buffer(512)
            rc = lib.kvt_config_load_file(self._ptr, cstr(os.fsencode(file), "config file"),
                                          err, len(err))
            if rc < 0:
                raise error(rc, f"config file {os.fspath(file)}", _msg(err))
        if env:
            err = ctypes.create_string_buffer(512)
            rc = lib.kvt_config_apply_env(self._ptr, err, len(err))
            if rc < 0:
                raise error(rc, "KVTIER_* environment", _msg(err))
        for k, v in flatten(values or {}).items():
            self.set(k, v)

    def set(self, key: str, value: Any) -> None:
        text = _text(value)
        if key in _NS_KEYS:
            ns_field(f"config key {key}", text)
        k, v = cstr(key, "a config key"), cstr(text, f"config key {key}'s value")
        err = ctypes.create_string_buffer(512)
        rc = lib.kvt_config_set(self._ptr, k, v, err, len(err))
        if rc < 0:
            raise error(rc, f"config key {key}", _msg(err))

    def get(self, key: str) -> str:
        n = 256
        while True:
            buf = ctypes.create_string_buffer(n)
            rc = lib.kvt_config_get(self._ptr, cstr(key, "a config key"), buf, n)
            if rc != -28 or n > 1 << 20:  # -ENOSPC: grow the buffer
                check(rc, f"config key {key}")
                return buf.value.decode(errors="surrogateescape")
            n *= 4

    def __getitem__(self, key: str) -> str:
        return self.get(key)

    def __setitem__(self, key: str, value: Any) -> None:
        self.set(key, value)

    @staticmethod
    def keys() -> Iterator[tuple[str, str, str]]:
        """Every documented key: (name, default, help)."""
        i = 0
        while True:
            d, h = ctypes.c_char_p(), ctypes.c_char_p()
            name = lib.kvt_config_key_info(i, ctypes.byref(d), ctypes.byref(h))
            if name is None:
                return
            yield name.decode(), (d.value or b"").decode(), (h.value or b"").decode()
            i += 1

    def as_dict(self) -> dict[str, str]:
        return {name: self.get(name) for name, _, _ in self.keys()}

    def close(self) -> None:
        if self._ptr:
            lib.kvt_config_destroy(self._ptr)
            self._ptr = None

    def __del__(self):
        self.close()
