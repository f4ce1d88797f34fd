"""Settings: defaults, then the TOML config file, then LTOWRAP_* variables; one frozen object.

Runs on the compile path, so it imports only the standard library and reads the config
file only if it exists (one stat otherwise). The XDG locations are computed here as
platformdirs computes them on Linux (a test checks they agree); elsewhere platformdirs
itself is asked.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

APP = "ltowrap"

# name -> (default, parser). Each is LTOWRAP_<NAME> in the environment and <name> in the file.
_TRUE = ("1", "true", "yes", "on")


_FALSE = ("0", "false", "no", "off", "")


def _bool(v: object) -> bool:
    if isinstance(v, bool):
        return v
    s = str(v).strip().lower()
    if s in _TRUE or s in _FALSE:
        return s in _TRUE
    raise ValueError(f"expected a boolean (1/0, true/false, yes/no, on/off), got {v!r}")


def _int(v: object) -> int:
    if isinstance(v, (bool, float)):
        raise ValueError(f"expected an integer, got {v!r}")
    return int(v)  # type: ignore[arg-type]


def parse_size(v: object) -> int:
    """'5G', '500M', '5GiB', '1.5T', '0' or a plain number of bytes -> bytes."""
    if isinstance(v, (bool, float)):
        raise ValueError(f"expected a size like 5G or 500M, got {v!r}")
    s = str(v).strip().upper().removesuffix("IB").removesuffix("B")
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    size = int(float(s[:-1]) * units[s[-1]]) if s and s[-1] in units else int(s)
    if size < 0:
        raise ValueError(f"a size cannot be negative: {v!r}")
    return size


def parse_age(v: str) -> float:
    """'30d', '12h', '15m', '90s' -> seconds."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
    s = v.strip().lower()
    if s and s[-1] in units:
        return float(s[:-1]) * units[s[-1]]
    return float(s)


def _str(v: object) -> str:
    return str(v)


def _remote_url(v: object) -> str:
    s = str(v).strip()
    if s and not s.startswith(("grpc://", "grpcs://")):
        raise ValueError(f"expected grpc://host:port or grpcs://host:port, got {v!r}")
    return s


def _seconds(v: object) -> float:
    if isinstance(v, bool):
        raise ValueError(f"expected a number of seconds, got {v!r}")
    seconds = float(v)  # type: ignore[arg-type]
    if seconds <= 0:
        raise ValueError(f"expected a positive number of seconds, got {v!r}")
    return seconds


def _choice(*allowed: str):
    def parse(v: object) -> str:
        s = str(v).strip().lower()
        if s not in allowed:
            raise ValueError(f"expected one of {', '.join(allowed)}, got {v!r}")
        return s

    return parse


SETTINGS: dict[str, tuple[object, object, str]] = {
    "cache_dir": ("", _str, "where the backend cache, module store and stats live"),
    "max_size": (5 << 30, parse_size, "cache size limit (e.g. 5G, 500M; 0 = unlimited)"),
    "jobs": (0, _int, "parallel backend compiles (0 = usable CPUs)"),
    "disable": (False, _bool, "pass every command through unchanged"),
    "log": ("", _str, "append one JSON line per invocation to this file"),
    "lto": ("", _choice("", "off", "thin"), "'thin': add -flto=thin to C/C++ compiles and link with lld"),
    "backend_opts": ("module", _choice("module", "link"), "backend options: each module's own, or the link's"),
    "use_lld": (True, _bool, "link bitcode with the ld.lld beside clang when the driver would use another linker"),
    "clang": ("", _str, "path of the real clang driver (else the first clang on PATH that is not ltowrap)"),
    "keep": (False, _bool, "keep each link's temporary directory"),
    "debug": (False, _bool, "write what was hashed for each backend compile beside the cache entry"),
    "progress": ("auto", _choice("auto", "0", "1"), "progress line on a terminal"),
    "remote": ("", _remote_url, "REAPI service for backend compiles: grpc://host:port or grpcs://host:port"),
    "remote_mode": ("cache", _choice("cache", "execute"), "'cache': share results through its action cache; "
                    "'execute': run backends on its workers"),
    "remote_instance": ("", _str, "REAPI instance name"),
    "remote_header": ("", _str, "header sent with every remote request, 'name: value' (e.g. an authorization token)"),
    "remote_tls_ca": ("", _str, "PEM file of the CAs that sign a grpcs:// server (default: the system's)"),
    "remote_jobs": (16, _int, "remote requests in flight at once"),
    "remote_timeout": (30.0, _seconds, "seconds one remote request may take"),
    "remote_exec_timeout": (600.0, _seconds, "seconds one remote execution may take, queueing included"),
}


def _xdg(var: str, fallback: str) -> str:
    if sys.platform.startswith("linux"):
        value = os.environ.get(var, "")
        base = value if os.path.isabs(value) else os.path.expanduser(fallback)  # as XDG and platformdirs
        return os.path.join(base, APP)
    import platformdirs

    return platformdirs.user_cache_dir(APP) if var == "XDG_CACHE_HOME" else platformdirs.user_config_dir(APP)


def default_cache_dir() -> str:
    return _xdg("XDG_CACHE_HOME", "~/.cache")


def config_path(env: Mapping[str, str] = os.environ) -> str:
    return env.get("LTOWRAP_CONFIG") or os.path.join(_xdg("XDG_CONFIG_HOME", "~/.config"), "ltowrap.toml")


class ConfigError(Exception):
    pass


def resolve(env: Mapping[str, str] = os.environ) -> dict[str, tuple[object, str]]:
    """Every setting's value and where it came from ('default', the file's path, or a variable)."""
    values: dict[str, tuple[object, str]] = {k: (d, "default") for k, (d, _, _) in SETTINGS.items()}
    path = config_path(env)
    if os.path.exists(path):
        import tomllib

        try:
            with open(path, "rb") as f:
                data = tomllib.load(f)
        except (OSError, tomllib.TOMLDecodeError) as e:
            raise ConfigError(f"cannot read config file {path}: {e}") from e
        for key, raw in data.items():
            if key not in SETTINGS:
                raise ConfigError(f"{path}: unknown setting {key!r}")
            values[key] = (_parse(key, raw, path), path)
    for key in SETTINGS:
        var = f"LTOWRAP_{key.upper()}"
        if key == "cache_dir" and env.get("LTOWRAP_DIR"):
            var = "LTOWRAP_DIR"
        raw = env.get(var)
        if raw:
            values[key] = (_parse(key, raw, var), var)
    cache_dir, origin = values["cache_dir"]
    values["cache_dir"] = (os.path.abspath(os.path.expanduser(str(cache_dir) or default_cache_dir())), origin)
    return values


def _parse(key: str, raw: object, where: str) -> object:
    parser = SETTINGS[key][1]
    try:
        return parser(raw)  # type: ignore[operator]
    except (ValueError, TypeError) as e:
        raise ConfigError(f"{where}: bad value for {key}: {e}") from e
