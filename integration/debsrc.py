"""Debian source packages for the integration tests: downloaded once, unpacked fresh per test.

`fetch("lua5.4")` returns the package's .dsc in the source cache (env LTOWRAP_SRC_CACHE,
default integration/.cache/src), running `apt-get source --download-only` only if the
cache does not hold it yet. If apt has no deb-src entry, one is added beside the machine's
deb822 /etc/apt/sources.list.d/debian.sources (same URIs, suites, components, Signed-By)
and `apt-get update` is run: that part needs root. `SourcePackage.unpack(dest)` runs
`dpkg-source -x --no-check`, which applies the Debian patches; no build-deps are needed.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

DEFAULT_CACHE = Path(__file__).resolve().parent / ".cache" / "src"
APT_SOURCES = Path("/etc/apt/sources.list.d")
MAIN_SOURCES = APT_SOURCES / "debian.sources"
DEB_SRC_SOURCES = APT_SOURCES / "ltowrap-deb-src.sources"
DEB822_KEYS = ("URIs", "Suites", "Components", "Signed-By")


class SourceError(RuntimeError):
    pass


def run(argv: list[str], cwd: Path | None = None) -> str:
    done = subprocess.run(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        raise SourceError(f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout}")
    return done.stdout


@dataclass(frozen=True)
class SourcePackage:
    name: str
    dsc: Path  # in the source cache; the tarballs it lists sit beside it

    @property
    def version(self) -> str:
        return self.dsc.stem.split("_", 1)[1]

    def unpack(self, dest: Path) -> Path:
        """A fresh, patched tree at `dest` (which must not exist yet)."""
        run(["dpkg-source", "-x", "--no-check", str(self.dsc), str(dest)])
        return dest


def lua_upstream_tree(dest: Path) -> Path:
    """Debian's lua5.4, unpacked at `dest` and prepared by prepare_lua_upstream."""
    tree = fetch("lua5.4").unpack(dest)
    prepare_lua_upstream(tree)
    return tree


def prepare_lua_upstream(tree: Path) -> None:
    """Give an unpacked lua5.4 tree its upstream Makefiles, as debian/rules would prepare it.

    Debian's 0001-build-system.patch turns the upstream Makefiles into a libtool build
    (needing dpkg-buildflags, a version script and C++ copies of every object): that one
    patch is reversed, the others (module paths, extern "C", CVE fixes) stay, and the
    multiarch header that the module-path patch includes is written.
    """
    run(["patch", "-R", "-p1", "-s", "-d", str(tree), "-i", str(tree / "debian/patches/0001-build-system.patch")])
    arch = run(["dpkg-architecture", "-qDEB_HOST_MULTIARCH"]).strip()
    (tree / "src" / "lua5.4-deb-multiarch.h").write_text(f'#define DEB_HOST_MULTIARCH "{arch}"\n')


def cache_dir() -> Path:
    return Path(os.environ.get("LTOWRAP_SRC_CACHE") or DEFAULT_CACHE)


def fetch(name: str, cache: Path | None = None, version: str | None = None) -> SourcePackage:
    """The source package `name` (that `version`, if given: a test that edits the tree by line
    wants the same text every time) from the cache, downloaded into it first if need be."""
    cache = cache or cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    with FileLock(str(cache / f".{name}.lock")):
        found = cached(name, cache, version)
        if found is not None:
            return found
        ensure_deb_src(name)
        staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=cache))
        try:
            run(["apt-get", "source", "--download-only", f"{name}={version}" if version else name], cwd=staging)
            # The .dsc last: a .dsc in the cache means its files are there too.
            for f in sorted(staging.iterdir(), key=lambda p: p.suffix == ".dsc"):
                os.replace(f, cache / f.name)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    found = cached(name, cache, version)
    if found is None:
        raise SourceError(f"apt-get source {name} left no complete .dsc in {cache}")
    return found


def cached(name: str, cache: Path, version: str | None = None) -> SourcePackage | None:
    """The newest complete copy of `name` (of `version`, if given: without its epoch) in the cache
    (every file the .dsc lists, checksums right)."""
    pattern = f"{name}_{version.split(':', 1)[-1]}.dsc" if version else f"{name}_*.dsc"
    for dsc in sorted(cache.glob(pattern), key=lambda p: p.stat().st_mtime, reverse=True):
        if all(_sha256(cache / f) == digest for f, digest in dsc_files(dsc).items()):
            return SourcePackage(name, dsc)
    return None


def dsc_files(dsc: Path) -> dict[str, str]:
    """File name -> sha256, from the .dsc's Checksums-Sha256 field."""
    text = dsc.read_text(errors="replace")
    field = re.search(r"^Checksums-Sha256:\n((?:[ \t].*\n?)+)", text, re.M)
    if field is None:
        raise SourceError(f"{dsc}: no Checksums-Sha256 field")
    return {name: digest for digest, _size, name in (line.split() for line in field.group(1).splitlines())}


def _sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def ensure_deb_src(name: str) -> None:
    """Make `apt-get source name` possible: a deb-src entry and its index."""
    if _apt_has_source(name):
        return
    if not _deb_src_configured():
        DEB_SRC_SOURCES.write_text(deb_src_stanzas(MAIN_SOURCES.read_text()))
    run(["apt-get", "update"])
    if not _apt_has_source(name):
        raise SourceError(f"no Debian source package {name!r} after adding deb-src and apt-get update")


def _apt_has_source(name: str) -> bool:
    done = subprocess.run(["apt-cache", "showsrc", "--only-source", name], capture_output=True, text=True)
    return done.returncode == 0 and f"Package: {name}\n" in done.stdout


def _deb_src_configured() -> bool:
    """Does any enabled apt source entry, in either format, have type deb-src?"""
    out = run(["apt-get", "indextargets", "--format", "$(CREATED_BY)"])
    return "Sources" in out.split()


def deb_src_stanzas(deb822: str) -> str:
    """The `Types: deb` stanzas of a deb822 .sources file, as deb-src stanzas (comments dropped)."""
    stanzas = []
    for block in re.split(r"\n\s*\n", deb822):
        fields: dict[str, str] = {}
        key = ""
        for line in block.splitlines():
            if line.startswith("#") or not line.strip():
                continue
            if line[0].isspace() and key:  # a continuation line (an inline Signed-By key)
                fields[key] += "\n" + line
            elif ":" in line:
                key, value = line.split(":", 1)
                key = key.strip()
                fields[key] = value.strip()
        if "deb" in fields.get("Types", "").split() and fields.get("Enabled", "yes") != "no":
            stanzas.append("\n".join(["Types: deb-src"] + [f"{k}: {fields[k]}" for k in DEB822_KEYS if k in fields]))
    if not stanzas:
        raise SourceError(f"no 'Types: deb' stanza in {MAIN_SOURCES} to derive a deb-src entry from")
    return "\n\n".join(stanzas) + "\n"
