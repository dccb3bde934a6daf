"""Checks of KvtierTier's options (docs/VLLM.md, "Configure").

Why: the options come from kv_connector_extra_config, JSON typed by hand or on a command
line, and reach the tier unchecked. A wrong type failed far from its cause (a TypeError
naming no option, `invalid literal for int()`) or, worse, was taken for something else:
the string "false" is truthy, so enable_kv_events="false" turned events on, and a
load_deadline_ms of 0 made every load fail. Each check here raises one ValueError line
naming the option and what it accepts.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

MODEL_INTS = ("layers", "kv_heads", "head_dim")
MODEL_STRS = ("revision", "hash_algo")


def _bad(name: str, want: str, value: Any) -> ValueError:
    shown = ascii(value)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return ValueError(f"KvtierTier option {name} must be {want}, not {shown} "
                      f"({type(value).__name__})")


def flag(name: str, value: Any) -> bool:
    """A bool, or the strings "true"/"false" (any case)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise _bad(name, 'true or false (a JSON boolean, or the string "true"/"false")', value)


# A bound on every number option: a year of seconds or milliseconds is no deadline anyone
# means, and a larger one (inf, 1e300) overflows the nanoseconds libkvtier takes
# (OverflowError out of a load's start, into vLLM's scheduler, until 2026-12-05).
NUMBER_MAX = 365 * 86400 * 1000


def number(name: str, value: Any, unit: str, zero_ok: bool = False) -> float:
    """A finite number (not a bool, not a string) > 0, or >= 0 with zero_ok, at most
    NUMBER_MAX."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and (
        value > 0 or (zero_ok and value == 0)) and math.isfinite(value) and value <= NUMBER_MAX
    if not ok:
        raise _bad(name, f"a finite {'non-negative' if zero_ok else 'positive'} number of "
                   f"{unit} (at most {NUMBER_MAX})", value)
    return float(value)


def text(name: str, value: Any, none_ok: bool = True) -> str | None:
    if value is None and none_ok:
        return None
    if not isinstance(value, str):
        raise _bad(name, "a string", value)
    return value


def choice(name: str, value: Any, allowed: tuple[str, ...]) -> str | None:
    if value is None or (isinstance(value, str) and value in allowed):
        return value
    raise _bad(name, "one of " + ", ".join(allowed), value)


def config(value: Any) -> Mapping | None:
    if value is None or isinstance(value, Mapping):
        return value
    raise _bad("config", "an object of kvtier keys (docs/CONFIG.md; for an INI file use "
               "config_file)", value)


def config_file(value: Any) -> str | os.PathLike | None:
    if value is None or isinstance(value, (str, os.PathLike)):
        return value
    raise _bad("config_file", "a path", value)


def model(value: Any) -> dict | None:
    """{"layers", "kv_heads", "head_dim": positive ints; "revision", "hash_algo": strings}."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise _bad("model", 'an object like {"layers": 32, "kv_heads": 8, "head_dim": 128}',
                   value)
    for k, v in value.items():
        if k in MODEL_INTS:
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise _bad(f"model.{k}", "a positive integer", v)
        elif k in MODEL_STRS:
            text(f"model.{k}", v, none_ok=False)
        else:
            raise ValueError(f"KvtierTier option model has an unknown key {ascii(k)} "
                             f"(known: {', '.join(MODEL_INTS + MODEL_STRS)})")
    return dict(value)
