"""Every setting: its name, environment variable, parser, default and meaning, and how they combine.

The `Settings` class below *is* the table: each class attribute is one `Setting` row, and an
instance holds one value per row plus where it came from (`origins`). Precedence, lowest
first: the default, the TOML config file, then the setting's environment variable
(`LTOWRAP_<NAME>`; a few older spellings are still accepted, the documented one wins).
An empty variable counts as unset.

Every Python entry resolves settings here (`load`), and the sh entries find the cache by
the same rule (scripts/ltowrap-clang; tests/test_config.py runs both and compares).

This runs on the compile path, so it imports only small standard-library modules (no
dataclasses, typing or enum: each costs milliseconds to import) and reads the config file only if it
exists. The XDG locations are computed here as platformdirs computes them on Linux (a
test checks they agree); elsewhere platformdirs itself is asked.
"""

from __future__ import annotations

import os
import sys

from .cachedirs import LINK_LOG

TYPE_CHECKING = False  # typing and collections.abc cost milliseconds: for type checkers only
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping
    from typing import Any, TypeVar, overload
    from typing import Generic as _Row

    T = TypeVar("T")
else:

    class _Row:
        """Generic, to a type checker (Setting[str]), without importing typing."""

        def __class_getitem__(cls, item: object) -> type:
            return cls

    T = None

APP = "ltowrap"
ENV_PREFIX = "LTOWRAP_"
CONFIG_ENV = "LTOWRAP_CONFIG"  # names the config file; not itself a setting


class ConfigError(Exception):
    pass


# --- parsers: raw text (or a TOML value) -> value; ValueError/TypeError when it makes no sense ---

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


def parse_bool(v: object) -> bool:
    if isinstance(v, bool):
        return v
    s = str(v).strip().lower()
    if s in _TRUE or s in _FALSE:
        return s in _TRUE
    raise ValueError(f"expected a boolean (1/0, true/false, yes/no, on/off), got {v!r}")


def _int(v: object) -> int:
    if isinstance(v, (bool, float)) or not isinstance(v, (int, str)):
        raise ValueError(f"expected an integer, got {v!r}")
    return int(v)


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


def _fraction(v: object) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        raise ValueError(f"expected a fraction from 0 to 1, got {v!r}")
    f = float(v)
    if not 0 <= f <= 1:
        raise ValueError(f"expected a fraction from 0 to 1, got {v!r}")
    return f


def pick(fraction: float) -> bool:
    """True for about `fraction` of the calls (which cache hits `verify` checks)."""
    return fraction >= 1 or (fraction > 0 and int.from_bytes(os.urandom(4), "little") < fraction * 2**32)


def _remote_url(v: object) -> str:
    s = str(v).strip()
    if s and not s.startswith(("grpc://", "grpcs://")):
        raise ValueError(f"expected grpc://host:port or grpcs://host:port, got {v!r}")
    return s


def parse_platform(v: object) -> dict[str, str]:
    """'OSFamily=linux,container-image=docker://x' -> {name: value}; '' -> {}."""
    properties: dict[str, str] = {}
    for item in str(v).split(","):
        if not item.strip():
            continue
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise ValueError(f"expected name=value[,name=value...], got {item.strip()!r} in {v!r}")
        if name in properties:
            raise ValueError(f"platform property {name!r} given twice in {v!r}")
        properties[name] = value.strip()
    return properties


def platform_properties(settings: Settings) -> dict[str, str]:
    """The platform properties of remote actions: remote_platform's, else this OS's family."""
    return parse_platform(settings.remote_platform) or {"OSFamily": sys.platform}


def _platform(v: object) -> str:
    parse_platform(v)
    return str(v).strip()


def _seconds(v: object) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        raise ValueError(f"expected a number of seconds, got {v!r}")
    seconds = float(v)
    if seconds <= 0:
        raise ValueError(f"expected a positive number of seconds, got {v!r}")
    return seconds


def _choice(*allowed: str) -> Callable[[object], str]:
    def parse(v: object) -> str:
        s = str(v).strip().lower()
        if s not in allowed:
            raise ValueError(f"expected one of {', '.join(allowed)}, got {v!r}")
        return s

    return parse


# --- the table -----------------------------------------------------------------------------------


class Setting(_Row[T]):
    """One row of the table; on a Settings instance, the attribute reads that setting's value."""

    def __init__(self, default: T, parse: Callable[[object], T], doc: str, old_env: tuple[str, ...] = (),
                 output: bool = False) -> None:
        self.default = default
        self.parse = parse
        self.doc = doc
        self.old_env = old_env  # spellings released before the LTOWRAP_<NAME> rule; still read
        self.output = output  # it changes what a link writes: every key of a whole link holds it
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper()

    if TYPE_CHECKING:

        @overload
        def __get__(self, obj: None, owner: type) -> Setting[T]: ...

        @overload
        def __get__(self, obj: Settings, owner: type) -> T: ...

    def __get__(self, obj: Settings | None, owner: type | None = None) -> Any:
        return self if obj is None else obj._values[self.name]


class Settings:
    """The resolved settings: one attribute per row below, and `origins[name]`
    ('default', the config file's path, or the environment variable that set it)."""

    cache_dir = Setting("", _str, "where the backend cache, module store and stats live (default ~/.cache/ltowrap)",
                        old_env=("LTOWRAP_DIR",))
    max_size = Setting(5 << 30, parse_size, "cache size limit (e.g. 5G, 500M; 0 = unlimited)")
    jobs = Setting(0, _int, "parallel backend compiles (0 = usable CPUs)")
    disable = Setting(False, parse_bool, "pass every command through unchanged")
    log = Setting("", _str, "append one JSON line per link to this file (default: links.jsonl in the cache directory; "
                  "kept to 16 MiB, the part before in <file>.1; 'off': no log)")
    lto = Setting("", _choice("", "off", "thin"), "'thin': add -flto=thin to C/C++ compiles and link with lld")
    backend_opts = Setting("module", _choice("module", "link"), "backend options: each module's own, or the link's",
                           output=True)
    sections = Setting("link", _choice("link", "module"),
                       "backend sections: 'link', -ffunction-sections -fdata-sections for every module, as in-process "
                       "lld gives them (the same code); 'module', each module's own, as the kernel's distributed ThinLTO "
                       "does (fewer sections, a faster final link)", output=True)
    memo = Setting(True, parse_bool, "restore a whole link from the cache when nothing it read changed (the link memo)")
    small_link = Setting(1, _int, "links of at most this many bitcode modules (no bitcode archive among the inputs) "
                         "are linked by lld in-process, uncached, as without ltowrap: they have nothing to import or "
                         "spread (0 = distribute every link)")
    fork_server = Setting(True, parse_bool, "start the backend clangs by forking one clang a link that has loaded its "
                          "libraries already (false: each started anew)")
    use_lld = Setting(True, parse_bool, "link bitcode with the ld.lld beside clang when the driver would use another linker")
    clang = Setting("", _str, "path of the real clang driver (else the first clang on PATH that is not ltowrap)",
                    output=True)
    keep = Setting(False, parse_bool, "keep each link's temporary directory")
    verify = Setting(0.0, _fraction, "share of cache hits checked by doing the work again (a backend hit recompiled, "
                     "a restored link relinked) and comparing bytes; a mismatch takes the fresh result and replaces "
                     "the entry (0 = none, 1 = every hit)")
    debug = Setting(False, parse_bool, "write what was hashed for each backend compile beside the cache entry")
    verbose = Setting(False, parse_bool, "print the backend clangs' own output as it comes, the output of a failed step, "
                      "and why make's jobserver was not used")
    progress = Setting("auto", _choice("auto", "0", "1"), "progress line on a terminal")
    remote = Setting("", _remote_url, "REAPI service for backend compiles: grpc://host:port or grpcs://host:port")
    remote_mode = Setting("cache", _choice("cache", "execute"),
                          "'cache': share results through its action cache; 'execute': run backends on its workers")
    remote_instance = Setting("", _str, "REAPI instance name")
    remote_header = Setting("", _str, "header sent with every remote request, 'name: value' (e.g. an authorization token)")
    remote_tls_ca = Setting("", _str, "PEM file of the CAs that sign a grpcs:// server (default: the system's)")
    remote_platform = Setting("", _platform, "platform properties of remote actions, 'name=value,name=value' "
                              "(e.g. OSFamily=linux,container-image=docker://...); default OSFamily=<this OS>")
    remote_compiler = Setting("", _str, "path of clang on the remote workers (default: the same path as here)")
    remote_local = Setting(True, parse_bool, "execute mode: compile here too, beside the workers (each job goes to "
                           "whichever side frees first); false: here only what the workers cannot")
    remote_jobs = Setting(16, _int, "remote requests in flight at most (fewer while the server pushes back)")
    remote_timeout = Setting(30.0, _seconds, "seconds one remote request may take")
    remote_exec_timeout = Setting(600.0, _seconds, "seconds one remote execution may take, queueing included")

    def __init__(self, values: Mapping[str, object], origins: Mapping[str, str], problems: tuple[str, ...] = ()) -> None:
        object.__setattr__(self, "_values", dict(values))
        object.__setattr__(self, "origins", dict(origins))
        object.__setattr__(self, "problems", problems)  # what load(strict=False) ignored

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"settings are read-only: {name}")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Settings) and self._values == other._values

    def __repr__(self) -> str:
        return f"Settings({self._values!r})"

    if TYPE_CHECKING:
        _values: dict[str, Any]
        origins: dict[str, str]
        problems: tuple[str, ...]


def rows() -> Iterator[Setting]:
    """The table, in order."""
    return (v for v in vars(Settings).values() if isinstance(v, Setting))


ROWS: dict[str, Setting] = {row.name: row for row in rows()}


def output_values(settings: Settings) -> list[tuple[str, str]]:
    """(name, value) of every setting that changes what a link writes (the `output` column)."""
    return [(name, str(settings._values[name])) for name, row in ROWS.items() if row.output]


# --- where things are -------------------------------------------------------------------------------


def _xdg(var: str, fallback: str, env: Mapping[str, str]) -> str:
    if sys.platform.startswith("linux"):
        value = env.get(var, "")
        base = value if os.path.isabs(value) else os.path.expanduser(fallback)  # as XDG and platformdirs
        return os.path.join(base, APP)
    import platformdirs

    return platformdirs.user_cache_dir(APP) if var == "XDG_CACHE_HOME" else platformdirs.user_config_dir(APP)


def default_cache_dir(env: Mapping[str, str] = os.environ) -> str:
    return _xdg("XDG_CACHE_HOME", "~/.cache", env)


def config_path(env: Mapping[str, str] = os.environ) -> str:
    return env.get(CONFIG_ENV) or os.path.join(_xdg("XDG_CONFIG_HOME", "~/.config", env), "ltowrap.toml")


# --- resolution ---------------------------------------------------------------------------------------


def _parse(row: Setting, raw: object, where: str) -> object:
    try:
        return row.parse(raw)
    except (ValueError, TypeError) as e:
        raise ConfigError(f"{where}: bad value for {row.name}: {e}") from e


def _from_file(path: str) -> dict[str, object]:
    import tomllib

    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"cannot read config file {path}: {e}") from e
    unknown = sorted(set(data) - set(ROWS))
    if unknown:
        raise ConfigError(f"{path}: unknown setting {unknown[0]!r}")
    return data


def env_value(row: Setting, env: Mapping[str, str]) -> tuple[str, str] | None:
    """(raw value, variable) from the environment: the documented variable, else an old spelling."""
    for var in (row.env, *row.old_env):
        raw = env.get(var)
        if raw:
            return raw, var
    return None


def load(env: Mapping[str, str] = os.environ, strict: bool = True) -> Settings:
    """The settings for this process; ConfigError names the file or variable that is wrong.

    Not `strict` (the compile path, which must never fail for a bad setting): a bad file is
    ignored, a bad variable leaves the value below it, and `problems` says what was wrong.
    """
    values: dict[str, object] = {name: row.default for name, row in ROWS.items()}
    origins = dict.fromkeys(ROWS, "default")
    problems: list[str] = []

    def take(name: str, raw: object, where: str) -> None:
        try:
            values[name], origins[name] = _parse(ROWS[name], raw, where), where
        except ConfigError as e:
            if strict:
                raise
            problems.append(str(e))

    path = config_path(env)
    if os.path.exists(path):
        try:
            found = _from_file(path)
        except ConfigError as e:
            if strict:
                raise
            problems.append(str(e))
            found = {}
        for name, raw in found.items():
            take(name, raw, path)
    for name, row in ROWS.items():
        from_env = env_value(row, env)
        if from_env is not None:
            take(name, from_env[0], from_env[1])
    values["cache_dir"] = os.path.abspath(os.path.expanduser(str(values["cache_dir"]) or default_cache_dir(env)))
    values["log"] = "" if values["log"] == "off" else str(values["log"]) or os.path.join(str(values["cache_dir"]), LINK_LOG)
    return Settings(values, origins, tuple(problems))
