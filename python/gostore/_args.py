"""Argument checking shared by the store's API modules: pure Python, no
native library involved. A helper raises ``TypeError`` for a value of the
wrong type (as a binding would) and returns ``None`` (or False) for a value
of the right type that can never be valid, which the caller answers with
-600 (INVALID_PARAMS)."""

from __future__ import annotations

import operator
from array import array
from typing import Any, List, Optional, Sequence, Tuple

from .config import DEFAULT_CONFIG_NATIVE, ReplicateConfig
from .errors import ErrorCode

_INVALID = int(ErrorCode.INVALID_PARAMS)  # -600
_U64_MAX = 2**64 - 1


def _addr(a: array) -> int:
    return a.buffer_info()[0]


def _tname(x: Any) -> str:
    return type(x).__name__


def _key(key: Any, what: str = "key") -> Optional[bytes]:
    """UTF-8 bytes of ``key``; ``None`` if empty/unencodable; TypeError if not str."""
    if not isinstance(key, str):
        raise TypeError(f"{what} must be str, not {_tname(key)}")
    if not key:
        return None
    try:
        return key.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates
        return None


def _seq(x: Any, what: str) -> Sequence[Any]:
    if not isinstance(x, (list, tuple)):
        raise TypeError(f"{what} must be a list, not {_tname(x)}")
    return x


def _strs(x: Any, what: str) -> Sequence[str]:
    """``x`` when it is a list of str; TypeError otherwise."""
    x = _seq(x, what)
    for k in x:
        if not isinstance(k, str):
            raise TypeError(f"{what} must contain only str, found {_tname(k)}")
    return x


def _keys(keys: Any, what: str = "keys") -> List[Optional[bytes]]:
    return [_key(k) for k in _strs(keys, what)]


def _int(x: Any, what: str) -> int:
    try:
        return operator.index(x)
    except TypeError:
        raise TypeError(f"{what} must be int, not {_tname(x)}") from None


def _ints(xs: Any, what: str) -> List[int]:
    xs = _seq(xs, what)
    out = []
    for x in xs:
        try:
            out.append(operator.index(x))
        except TypeError:
            raise TypeError(f"{what} must contain only int, found {_tname(x)}") from None
    return out


def _u64(v: int) -> bool:
    return 0 <= v <= _U64_MAX


def _u64_int(x: Any, what: str) -> int:
    """``x`` as an int in 0..2**64-1 (numpy integers too); TypeError for
    another type or a value outside, as a binding taking a uint64 raises."""
    try:
        v = operator.index(x)
    except TypeError:
        raise TypeError(f"{what} must be int, not {_tname(x)}") from None
    if not 0 <= v <= _U64_MAX:
        raise TypeError(f"{what} must be in 0..2**64-1, got {v}")
    return v


def _bool(x: Any, what: str) -> bool:
    if isinstance(x, (bool, int)) or _tname(x) == "bool_":
        return bool(x)
    raise TypeError(f"{what} must be bool, not {_tname(x)}")


def _config(config: Any) -> Optional[Tuple[int, int, bytes]]:
    if config is None:
        return DEFAULT_CONFIG_NATIVE
    if not isinstance(config, ReplicateConfig):
        raise TypeError(f"config must be a ReplicateConfig, not {_tname(config)}")
    return config._to_native()


def _segment_name(name: Any, what: str) -> Optional[bytes]:
    """UTF-8 of a segment name; None if it cannot name one (blank, or with a
    newline: the ABI separates names by newlines); TypeError if not str."""
    if not isinstance(name, str):
        raise TypeError(f"{what} must be str, not {_tname(name)}")
    if not name.strip() or "\n" in name:
        return None
    try:
        return name.encode("utf-8")
    except UnicodeEncodeError:
        return None


def _pack_keys(keys: Sequence[bytes]) -> Tuple[bytes, array]:
    return b"".join(keys), array("I", [len(k) for k in keys])


def _size_arg(x: Any, what: str) -> Any:
    """A setup() size: int (bytes) or str like "16MB" (parsed by Go)."""
    if isinstance(x, bool) or not isinstance(x, (int, str)):
        try:
            return operator.index(x)  # numpy integers
        except TypeError:
            raise TypeError(f"{what} must be int or str, not {_tname(x)}") from None
    return x


def _str_arg(x: Any, what: str) -> str:
    if not isinstance(x, str):
        raise TypeError(f"{what} must be str, not {_tname(x)}")
    return x
