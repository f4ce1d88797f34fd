"""A developer's edit loop on a real project, each warm build held to what an empty cache makes.

Debian's pcre2 (10.42, the bookworm release: the edits below find their lines by text), built
as its NON-AUTOTOOLS-BUILD describes, by a plain Makefile with header dependencies (-MMD):
the 8-bit library as libpcre2-8.a and libpcre2-8.so (linked by ltowrap), and pcre2grep
linked against the static library (so ThinLTO imports library code into it). One tree, one
warm cache; the edits come one after another, as in a working day:

  a line shift (blank lines at the top of pcre2_compile.c, so every line number moves),
  a function attribute (noinline on ord2utf, which other modules import),
  an initialiser value (pcre2grep's default colour),
  a new module (a .c added to the library in the Makefile),
  a header change (config.h's MATCH_LIMIT: every module recompiles, few change),
  a revert to the first state (every file as unpacked; the new module's files stay, unlisted).

After each, `make` with the warm cache gives the outputs "warm"; then only the links are
redone, in the same tree, with an empty cache: the static library and both links are
deleted and `make` runs again. A link needs each module's compile-option record, which
lives in the cache that saw the compile, so the empty cache gets a copy of the warm cache's
records directory (r/) and nothing else: the thin-link, backend, driver-line and memo
entries are all made anew. The two must be byte-identical, pcre2grep must still run, each
step must change some output (else it tests nothing), and the revert must give back the
first build's outputs.
"""

from __future__ import annotations

import filecmp
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from helpers import clean_env
from needs import missing

from . import debsrc

pytestmark = pytest.mark.slow

VERSION = "10.42-1"  # the bookworm release (bookworm-security's sources are not on every mirror)
BIN = Path(sys.executable).parent  # the venv ltowrap is installed in
LLVM_BIN = Path("/usr/lib/llvm-22/bin")
OUTPUTS = ("libpcre2-8.a", "libpcre2-8.so", "pcre2grep")
LINKED = ("libpcre2-8.so", "pcre2grep")
LIB_MODULES = " ".join("""auto_possess chartables compile config context convert dfa_match error extuni find_bracket
  jit_compile maketables match match_data newline ord2utf pattern_info script_run serialize
  string_utils study substitute substring tables ucd valid_utf xclass""".split())
# -D for what configure would have found on Linux (config.h.generic leaves them all undefined).
MAKEFILE = f"""\
# pcre2's 8-bit library and pcre2grep, as NON-AUTOTOOLS-BUILD describes (pcre2_ucptables.c is
# #included by pcre2_tables.c; pcre2_jit_compile.c is compiled without JIT for its stubs).
CFLAGS = -O2 -g -flto=thin -fPIC
CPPFLAGS = -Isrc -DHAVE_CONFIG_H -DPCRE2_CODE_UNIT_WIDTH=8 -DSUPPORT_PCRE2_8 -DSUPPORT_UNICODE \\
  -DHAVE_UNISTD_H -DHAVE_DIRENT_H -DHAVE_SYS_STAT_H -DHAVE_SYS_TYPES_H -DHAVE_STRERROR -DHAVE_MEMMOVE \\
  -DHAVE_STDINT_H -DHAVE_INTTYPES_H -DHAVE_LIMITS_H -DHAVE_STRING_H -DHAVE_STDLIB_H
LDFLAGS = -fuse-ld=lld
LIB_SRCS = {LIB_MODULES}
LIB_OBJS = $(LIB_SRCS:%=src/pcre2_%.o)

all: libpcre2-8.a libpcre2-8.so pcre2grep
%.o: %.c
\t$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c $< -o $@
libpcre2-8.a: $(LIB_OBJS)
\trm -f $@ && $(AR) rcs $@ $(LIB_OBJS)
libpcre2-8.so: $(LIB_OBJS)
\t$(CC) $(CFLAGS) $(LDFLAGS) -shared -Wl,-soname,libpcre2-8.so.0 -o $@ $(LIB_OBJS)
pcre2grep: src/pcre2grep.o libpcre2-8.a
\t$(CC) $(CFLAGS) $(LDFLAGS) -o $@ src/pcre2grep.o libpcre2-8.a
-include $(LIB_OBJS:.o=.d) src/pcre2grep.d
"""
NEW_MODULE = """\
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include "pcre2_internal.h"

/* A module added during the edit loop: one more exported function. */
int pcre2_edit_loop_probe(int x)
{
return PRIV(ord2utf)((uint32_t)x, NULL) + x;
}
"""


def replace_once(path: Path, old: str, new: str) -> None:
    """Edit a file by text; the edit must find its text (else the test edits nothing)."""
    text = path.read_text()
    assert old in text, f"{path.name} no longer contains {old!r}: the edit loop needs pcre2 {VERSION}"
    path.write_text(text.replace(old, new, 1))


def line_shift(tree: Path) -> None:
    path = tree / "src/pcre2_compile.c"
    path.write_text("\n\n\n" + path.read_text())


def noinline(tree: Path) -> None:
    # The second definition is the one built with SUPPORT_UNICODE.
    path = tree / "src/pcre2_ord2utf.c"
    text = path.read_text()
    head, sep, tail = text.rpartition("unsigned int\nPRIV(ord2utf)(")
    assert sep, f"{path.name}: no ord2utf definition"
    path.write_text(head + "__attribute__((noinline)) unsigned int\nPRIV(ord2utf)(" + tail)


def initialiser(tree: Path) -> None:
    replace_once(tree / "src/pcre2grep.c", 'static const char *colour_string = "1;31";',
                 'static const char *colour_string = "1;32";')


def new_module(tree: Path) -> None:
    (tree / "src/pcre2_edit_loop_probe.c").write_text(NEW_MODULE)
    replace_once(tree / "Makefile", "string_utils study", "string_utils edit_loop_probe study")


def header(tree: Path) -> None:
    replace_once(tree / "src/config.h", "#define MATCH_LIMIT 10000000", "#define MATCH_LIMIT 5000000")


@dataclass
class Step:
    name: str
    warm_links: list[str] = field(default_factory=list)  # what the warm links did (the log's decisions)
    stale: list[str] = field(default_factory=list)
    runs: str = ""


class Project:
    def __init__(self, tmp: Path) -> None:
        if not (LLVM_BIN / "clang").exists() or not (LLVM_BIN / "llvm-ar").exists():
            missing(f"clang/llvm-ar 22 ({LLVM_BIN})", "dev/setup installs clang-22 and llvm-22")
        if shutil.which("make") is None:
            missing("make")
        self.tmp = tmp
        try:
            pkg = debsrc.fetch("pcre2", version=VERSION)
        except debsrc.SourceError as e:
            missing(f"Debian's pcre2 {VERSION} source ({str(e).splitlines()[0]})", "a deb-src entry and network")
        self.tree = pkg.unpack(tmp / "pcre2")
        src = self.tree / "src"
        shutil.copy(src / "config.h.generic", src / "config.h")
        shutil.copy(src / "pcre2.h.generic", src / "pcre2.h")
        shutil.copy(src / "pcre2_chartables.c.dist", src / "pcre2_chartables.c")
        (self.tree / "Makefile").write_text(MAKEFILE)
        self.pristine = tmp / "pristine"  # the first state, for the revert
        shutil.copytree(self.tree, self.pristine, symlinks=True)
        self.warm_cache = tmp / "cache-warm"
        self.env = clean_env(PATH=f"{LLVM_BIN}:{BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}",
                             LTOWRAP_CONFIG=str(tmp / "no-config.toml"), LTOWRAP_JOBS="2")

    def make(self, cache: Path, log: Path) -> None:
        env = dict(self.env, LTOWRAP_CACHE_DIR=str(cache), LTOWRAP_LOG=str(log))
        done = subprocess.run(["make", "-j2", f"CC={BIN / 'ltowrap-clang'}", f"AR={LLVM_BIN / 'llvm-ar'}"],
                              cwd=self.tree, env=env, capture_output=True, text=True)
        assert done.returncode == 0, f"make (cache {cache.name}) exited {done.returncode}:\n{done.stderr[-3000:]}"

    def keep(self, dest: Path) -> Path:
        dest.mkdir(parents=True)
        for out in OUTPUTS:
            shutil.copy(self.tree / out, dest / out)
        return dest

    def cold_relink(self, label: str) -> Path:
        """The links (and the archive) redone in the same tree with an empty cache holding only
        the warm cache's compile-option records."""
        cache = self.tmp / f"cache-{label}"
        cache.mkdir()
        if (self.warm_cache / "r").is_dir():
            shutil.copytree(self.warm_cache / "r", cache / "r")
        for out in OUTPUTS:
            (self.tree / out).unlink()
        self.make(cache, self.tmp / f"log-{label}.jsonl")
        return self.keep(self.tmp / label)

    def revert(self) -> None:
        """Every file back to its first state: written anew, so make sees them changed."""
        for src in self.pristine.rglob("*"):
            if src.is_file() and not src.is_symlink():
                dest = self.tree / src.relative_to(self.pristine)
                if dest.read_bytes() != src.read_bytes():
                    dest.write_bytes(src.read_bytes())

    def runs(self) -> str:
        """What pcre2grep says when run: its version and one search (empty on success)."""
        grep = str(self.tree / "pcre2grep")
        version = subprocess.run([grep, "--version"], capture_output=True, text=True)
        found = subprocess.run([grep, "-o", r"w.r\w+"], input="hello world\nnothing\n", capture_output=True, text=True)
        if "10.42" not in version.stdout or found.stdout != "world\n":
            return (f"pcre2grep --version: {version.returncode} {version.stdout!r} {version.stderr!r}; "
                    f"-o: {found.returncode} {found.stdout!r} {found.stderr!r}")
        return ""


def decisions(log: Path) -> list[str]:
    records = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return [f"{Path(r['argv'][r['argv'].index('-o') + 1]).name if '-o' in r['argv'] else '?'}: {r.get('decision')}"
            f" (backends {r.get('backend_compiles', 0)} compiled, {r.get('backend_hits', 0)} hits)"
            for r in records if r.get("tool", "").startswith("ld.lld")]


def differing(a: Path, b: Path, names: tuple[str, ...] = OUTPUTS) -> list[str]:
    return [n for n in names if not filecmp.cmp(a / n, b / n, shallow=False)]


EDITS: list[tuple[str, Callable[[Path], None] | None]] = [
    ("line shift", line_shift), ("noinline attribute", noinline), ("initialiser value", initialiser),
    ("new module", new_module), ("header change", header), ("revert to the first state", None),
]


def test_pcre2_edit_loop(tmp_path: Path) -> None:
    p = Project(tmp_path)
    p.make(p.warm_cache, tmp_path / "log-0.jsonl")
    assert not p.runs(), p.runs()
    first = previous = p.keep(tmp_path / "warm-0")
    steps: list[Step] = []
    unchanged: list[str] = []
    for i, (name, edit) in enumerate(EDITS, 1):
        if edit is None:
            p.revert()
        else:
            edit(p.tree)
        log = tmp_path / f"log-{i}.jsonl"
        p.make(p.warm_cache, log)
        step = Step(name, decisions(log))
        warm = p.keep(tmp_path / f"warm-{i}")
        step.runs = p.runs()
        if not differing(previous, warm):
            unchanged.append(name)
        cold = p.cold_relink(f"cold-{i}")
        step.stale = differing(warm, cold)
        steps.append(step)
        previous = warm
    report = "\n".join(f"  {s.name}: {'STALE ' + str(s.stale) if s.stale else 'warm == cold'}"
                       f"{'; pcre2grep: ' + s.runs if s.runs else ''}; warm links: {s.warm_links}" for s in steps)
    print(report)  # with -s: what each warm link did
    stale = [s for s in steps if s.stale]
    assert not stale, (f"warm builds differ from an empty cache's relink of the same tree "
                       f"(cmp -l {tmp_path}/warm-N/X {tmp_path}/cold-N/X | head):\n{report}")
    assert not [s for s in steps if s.runs], f"pcre2grep no longer runs:\n{report}"
    assert not unchanged, f"these edits changed none of {OUTPUTS}, so they test nothing: {unchanged}\n{report}"
    back = differing(first, previous)
    assert not back, f"after the revert, {back} differ from the first build's (cmp -l {first}/X {previous}/X)\n{report}"
