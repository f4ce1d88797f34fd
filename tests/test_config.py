"""config: value parsers, default < TOML file < LTOWRAP_* precedence, origins, XDG locations, and the
sh entry finding the cache by the same rule."""

from __future__ import annotations

import os
import re
from pathlib import Path

import platformdirs
import pytest

from helpers import ltowrap_env
from ltowrap import config
from ltowrap.config import ROWS, ConfigError, parse_age, parse_size


def resolve(env: dict[str, str]) -> dict[str, tuple[object, str]]:
    """Every setting's (value, origin)."""
    s = config.load(env)
    return {name: (getattr(s, name), s.origins[name]) for name in ROWS}

GiB, MiB, KiB = 1 << 30, 1 << 20, 1 << 10


# --- value parsers ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, size",
    [("5G", 5 * GiB), ("500M", 500 * MiB), ("5GiB", 5 * GiB), ("5GB", 5 * GiB), ("5g", 5 * GiB), (" 5G ", 5 * GiB),
     ("10K", 10 * KiB), ("1.5T", 3 << 39), ("0.5G", 512 * MiB), ("0", 0), ("1024", 1024), (7, 7)],
)
def test_parse_size(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "abc", "G", "5X", "5 G B", "1,5G"])
def test_parse_size_rejects(text):
    with pytest.raises(ValueError):
        parse_size(text)


@pytest.mark.parametrize("text", ["-1", "-5G"])
def test_parse_size_rejects_negative(text):
    with pytest.raises(ValueError):
        parse_size(text)


@pytest.mark.parametrize(
    "text, seconds",
    [("30d", 30 * 86400), ("12h", 12 * 3600), ("15m", 900), ("90s", 90), ("2w", 14 * 86400), ("1.5h", 5400),
     ("100", 100), (" 12H ", 12 * 3600)],
)
def test_parse_age(text, seconds):
    assert parse_age(text) == seconds


@pytest.mark.parametrize("text", ["", "x", "d", "12y"])
def test_parse_age_rejects(text):
    with pytest.raises(ValueError):
        parse_age(text)


# --- resolve: precedence and origins ---------------------------------------------------------------


@pytest.fixture
def cfg(tmp_path) -> Path:
    """Where LTOWRAP_CONFIG points; tests write it (or not)."""
    return tmp_path / "ltowrap.toml"


def env_for(cfg: Path, **vars: str) -> dict[str, str]:
    return {"LTOWRAP_CONFIG": str(cfg), **vars}


def test_defaults_when_there_is_no_file(cfg):
    values = resolve(env_for(cfg))
    for key, row in ROWS.items():
        if key not in ("cache_dir", "log"):
            assert values[key] == (row.default, "default")
    cache_dir = os.path.abspath(config.default_cache_dir(env_for(cfg)))
    assert values["cache_dir"] == (cache_dir, "default")
    assert values["log"] == (os.path.join(cache_dir, "links.jsonl"), "default")  # a link log by default


def test_the_link_log_is_off_only_when_asked(cfg):
    assert resolve(env_for(cfg, LTOWRAP_LOG="off"))["log"] == ("", "LTOWRAP_LOG")
    assert resolve(env_for(cfg, LTOWRAP_LOG="/l"))["log"] == ("/l", "LTOWRAP_LOG")


def test_file_overrides_defaults(cfg):
    cfg.write_text('max_size = "500M"\njobs = 3\ndisable = true\nlto = "thin"\ncache_dir = "/srv/ltowrap"\n')
    values = resolve(env_for(cfg))
    assert values["max_size"] == (500 * MiB, str(cfg))
    assert values["jobs"] == (3, str(cfg))
    assert values["disable"] == (True, str(cfg))
    assert values["lto"] == ("thin", str(cfg))
    assert values["cache_dir"] == ("/srv/ltowrap", str(cfg))
    assert values["keep"] == (False, "default")


def test_environment_overrides_file(cfg):
    cfg.write_text('max_size = "500M"\njobs = 3\nlog = "/file.log"\n')
    values = resolve(env_for(cfg, LTOWRAP_MAX_SIZE="2G", LTOWRAP_JOBS="8"))
    assert values["max_size"] == (2 * GiB, "LTOWRAP_MAX_SIZE")
    assert values["jobs"] == (8, "LTOWRAP_JOBS")
    assert values["log"] == ("/file.log", str(cfg))


def test_every_setting_has_an_environment_variable(cfg):
    env = env_for(cfg, **{f"LTOWRAP_{k.upper()}": v for k, v in {
        "cache_dir": "/c", "max_size": "1M", "jobs": "2", "disable": "1", "log": "/l", "lto": "off",
        "backend_opts": "link", "sections": "module", "memo": "0", "small_link": "3", "fork_server": "0", "use_lld": "0", "clang": "/usr/bin/clang", "keep": "yes", "debug": "on",
        "verbose": "1", "progress": "1", "remote": "grpc://127.0.0.1:9", "remote_mode": "execute", "remote_instance": "main",
        "remote_header": "authorization: Bearer t", "remote_tls_ca": "/ca.pem", "remote_jobs": "4", "remote_local": "0",
        "remote_timeout": "5", "remote_exec_timeout": "60", "verify": "0.25",
        "remote_platform": "OSFamily=linux,pool=big", "remote_compiler": "/opt/llvm/bin/clang"}.items()})
    values = resolve(env)
    assert {k: o for k, (_, o) in values.items()} == {k: f"LTOWRAP_{k.upper()}" for k in ROWS}
    assert {k: v for k, (v, _) in values.items()} == {
        "cache_dir": "/c", "max_size": MiB, "jobs": 2, "disable": True, "log": "/l", "lto": "off",
        "backend_opts": "link", "sections": "module", "memo": False, "small_link": 3, "fork_server": False, "use_lld": False, "clang": "/usr/bin/clang", "keep": True, "debug": True,
        "verbose": True, "progress": "1", "remote": "grpc://127.0.0.1:9", "remote_mode": "execute", "remote_instance": "main",
        "remote_header": "authorization: Bearer t", "remote_tls_ca": "/ca.pem", "remote_jobs": 4, "remote_local": False,
        "remote_timeout": 5.0, "remote_exec_timeout": 60.0, "verify": 0.25,
        "remote_platform": "OSFamily=linux,pool=big", "remote_compiler": "/opt/llvm/bin/clang"}


def test_remote_settings_are_checked(cfg):
    for var, value in (("LTOWRAP_REMOTE", "http://host:1"), ("LTOWRAP_REMOTE_MODE", "both"),
                       ("LTOWRAP_REMOTE_TIMEOUT", "0"), ("LTOWRAP_REMOTE_PLATFORM", "OSFamily"),
                       ("LTOWRAP_REMOTE_PLATFORM", "OSFamily=linux,OSFamily=darwin"),
                       ("LTOWRAP_REMOTE_PLATFORM", "=linux")):
        with pytest.raises(ConfigError, match=var):
            resolve(env_for(cfg, **{var: value}))


def test_empty_environment_variable_is_ignored(cfg):
    cfg.write_text("jobs = 3\n")
    assert resolve(env_for(cfg, LTOWRAP_JOBS=""))["jobs"] == (3, str(cfg))


def test_old_spelling_ltowrap_dir_still_sets_the_cache_dir(cfg, tmp_path):
    cfg.write_text('cache_dir = "/from/file"\n')
    assert resolve(env_for(cfg, LTOWRAP_DIR=str(tmp_path / "d")))["cache_dir"] == (str(tmp_path / "d"), "LTOWRAP_DIR")
    assert resolve(env_for(cfg, LTOWRAP_CACHE_DIR="/c"))["cache_dir"] == ("/c", "LTOWRAP_CACHE_DIR")
    both = resolve(env_for(cfg, LTOWRAP_DIR="/d", LTOWRAP_CACHE_DIR="/c"))
    assert both["cache_dir"] == ("/c", "LTOWRAP_CACHE_DIR")  # the documented spelling wins


def test_cache_dir_is_expanded_and_absolute(cfg, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    assert resolve(env_for(cfg, LTOWRAP_CACHE_DIR="~/cache"))["cache_dir"][0] == str(tmp_path / "home" / "cache")
    assert resolve(env_for(cfg, LTOWRAP_CACHE_DIR="rel/cache"))["cache_dir"][0] == str(tmp_path / "rel" / "cache")


@pytest.mark.parametrize(
    "text, value",
    [("1", True), ("true", True), ("TRUE", True), ("yes", True), ("on", True), (" On ", True),
     ("0", False), ("false", False), ("no", False), ("off", False)],
)
def test_boolean_spellings(cfg, text, value):
    assert resolve(env_for(cfg, LTOWRAP_KEEP=text))["keep"] == (value, "LTOWRAP_KEEP")


def test_choices_are_case_insensitive(cfg):
    assert resolve(env_for(cfg, LTOWRAP_LTO="THIN"))["lto"] == ("thin", "LTOWRAP_LTO")


def test_missing_file_named_by_ltowrap_config_means_defaults(tmp_path):
    values = resolve({"LTOWRAP_CONFIG": str(tmp_path / "does" / "not" / "exist.toml")})
    assert all(origin == "default" for _, origin in values.values())


# --- errors --------------------------------------------------------------------------------------


def test_unknown_key_in_file(cfg):
    cfg.write_text("max_sise = 5\n")
    with pytest.raises(ConfigError, match="max_sise"):
        resolve(env_for(cfg))


@pytest.mark.parametrize(
    "line, key",
    [('max_size = "lots"', "max_size"), ('jobs = "many"', "jobs"), ('lto = "fat"', "lto"),
     ('backend_opts = "both"', "backend_opts"), ('progress = "maybe"', "progress"), ("max_size = [1]", "max_size"),
     ("max_size = 1.5", "max_size")],
)
def test_bad_value_in_file(cfg, line, key):
    cfg.write_text(line + "\n")
    with pytest.raises(ConfigError, match=key) as e:
        resolve(env_for(cfg))
    assert str(cfg) in str(e.value)


@pytest.mark.parametrize("line", ["jobs = 2.5", "jobs = true", "max_size = true"])
def test_wrongly_typed_toml_number_is_an_error(cfg, line):
    cfg.write_text(line + "\n")
    with pytest.raises(ConfigError):
        resolve(env_for(cfg))


@pytest.mark.parametrize(
    "var, value",
    [("LTOWRAP_MAX_SIZE", "5X"), ("LTOWRAP_JOBS", "four"), ("LTOWRAP_LTO", "full"), ("LTOWRAP_PROGRESS", "2"),
     ("LTOWRAP_BACKEND_OPTS", "none")],
)
def test_bad_value_in_environment(cfg, var, value):
    with pytest.raises(ConfigError, match=var):
        resolve(env_for(cfg, **{var: value}))


@pytest.mark.parametrize("value", ["y", "maybe", "2"])
def test_bad_boolean_is_an_error(cfg, value):
    with pytest.raises(ConfigError, match="LTOWRAP_DISABLE"):
        resolve(env_for(cfg, LTOWRAP_DISABLE=value))


def test_invalid_toml(cfg):
    cfg.write_text("jobs = = 3\n")
    with pytest.raises(ConfigError, match="cannot read config file"):
        resolve(env_for(cfg))


def test_lenient_load_keeps_what_it_can_and_says_what_was_wrong(cfg):
    cfg.write_text("jobs = = 3\n")
    s = config.load(env_for(cfg, LTOWRAP_CLANG="/my/clang", LTOWRAP_JOBS="many"), strict=False)
    assert (s.clang, s.jobs) == ("/my/clang", 0)
    assert len(s.problems) == 2 and "cannot read config file" in s.problems[0] and "LTOWRAP_JOBS" in s.problems[1]


# --- the table -------------------------------------------------------------------------------------


def test_every_setting_is_documented_once_in_the_readme():
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    section = readme.split("\n## Settings\n", 1)[1].split("\n## ", 1)[0]
    table = re.findall(r"^\| `([a-z_]+)` \|", section, re.M)
    assert sorted(table) == sorted(ROWS)
    assert all(row.doc and row.env == "LTOWRAP_" + name.upper() for name, row in ROWS.items())


def test_settings_load(cfg):
    cfg.write_text('jobs = 4\nbackend_opts = "link"\n')
    s = config.load(env_for(cfg, LTOWRAP_CACHE_DIR="/ltowrap-cache", LTOWRAP_DEBUG="1"))
    assert (s.cache_dir, s.jobs, s.backend_opts, s.debug, s.max_size, s.use_lld) == (
        "/ltowrap-cache", 4, "link", True, 5 * GiB, True)
    assert s.origins["cache_dir"] == "LTOWRAP_CACHE_DIR"
    assert s.origins["jobs"] == str(cfg)
    assert s.origins["debug"] == "LTOWRAP_DEBUG"
    assert s.origins["max_size"] == "default"
    with pytest.raises(AttributeError):
        s.jobs = 1  # type: ignore[misc]


# --- XDG locations agree with platformdirs -----------------------------------------------------------


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    h = tmp_path / "home"
    h.mkdir()
    monkeypatch.setenv("HOME", str(h))
    return h


@pytest.mark.parametrize("xdg", [None, "", "   ", "abs"], ids=["unset", "empty", "blank", "absolute"])
def test_default_cache_dir_matches_platformdirs(home, monkeypatch, xdg):
    if xdg is None:
        monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    else:
        monkeypatch.setenv("XDG_CACHE_HOME", str(home / "xdg-cache") if xdg == "abs" else xdg)
    assert config.default_cache_dir() == platformdirs.user_cache_dir("ltowrap")
    expected = home / "xdg-cache" / "ltowrap" if xdg == "abs" else home / ".cache" / "ltowrap"
    assert config.default_cache_dir() == str(expected)


@pytest.mark.parametrize("xdg", [None, "", "   ", "abs"], ids=["unset", "empty", "blank", "absolute"])
def test_default_config_file_matches_platformdirs(home, monkeypatch, xdg):
    if xdg is None:
        monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    else:
        monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "xdg-config") if xdg == "abs" else xdg)
    path = config.config_path(ltowrap_env(LTOWRAP_CONFIG=None))
    assert path == platformdirs.user_config_dir("ltowrap") + "/ltowrap.toml"
    expected = home / "xdg-config" / "ltowrap" if xdg == "abs" else home / ".config" / "ltowrap"
    assert path == str(expected / "ltowrap.toml")


def test_default_config_file_is_read(home, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "xdg-config"))
    (home / "xdg-config" / "ltowrap").mkdir(parents=True)
    (home / "xdg-config" / "ltowrap" / "ltowrap.toml").write_text("jobs = 5\n")
    env = {"XDG_CONFIG_HOME": str(home / "xdg-config")}
    assert resolve(env)["jobs"] == (5, str(home / "xdg-config" / "ltowrap" / "ltowrap.toml"))


def test_ltowrap_config_overrides_the_default_location(home, monkeypatch, cfg):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "xdg-config"))
    assert config.config_path({"LTOWRAP_CONFIG": str(cfg)}) == str(cfg)


@pytest.mark.parametrize("var", ["XDG_CACHE_HOME", "XDG_CONFIG_HOME"])
def test_relative_xdg_home_is_ignored_like_platformdirs(home, monkeypatch, var):
    monkeypatch.setenv(var, "relative/dir")
    if var == "XDG_CACHE_HOME":
        assert config.default_cache_dir() == platformdirs.user_cache_dir("ltowrap")
    else:
        assert config.config_path(ltowrap_env(LTOWRAP_CONFIG=None)) == platformdirs.user_config_dir("ltowrap") + "/ltowrap.toml"
