"""The ld.lld option table: consistent with itself, and with what every installed lld says of its options."""

from __future__ import annotations

import re
import subprocess

import pytest

from helpers import LLVM_VERSIONS, toolchain
from ltowrap import toolchain as tools
from ltowrap.errors import Reason
from ltowrap.linkline import lldopts
from ltowrap.linkline.lldopts import OPTIONS, TAKES_VALUE, match


def test_every_row_is_well_formed():
    for o in OPTIONS:
        assert o.kind in lldopts.KINDS and o.dashes in ("-", "--", "*"), o
        assert o.role is None or o.role in lldopts.ROLES, o
        assert not o.reads or o.kind in TAKES_VALUE | {"optional"}, f"{o.name} names no file"
        if o.kind == "letter":
            assert len(o.names) == 1 and len(o.name) == 1 and o.dashes == "-", o


def test_a_row_is_its_kind_its_dashes_its_spellings_marks_and_attributes():
    """A word is a spelling unless it is a mark or a key=value attribute (the first of a key
    counts); a bare `probe` is a spelling."""
    [o] = lldopts._rows("value  --  probe no-probe reads role=output role=group varies=x probe=gate split")
    assert (o.names, o.kind, o.dashes, o.reads, o.writes, o.stored) == (("probe", "no-probe"), "value", "--", True, False, False)
    assert (o.role, o.varies, o.probe, o.refused) == ("output", "x", "gate", Reason.ALREADY_SPLIT)
    [o] = lldopts._rows("flag  *  save-temps writes=stored unsupported")
    assert (o.names, o.writes, o.stored, o.role, o.refused) == (("save-temps",), True, True, None, Reason.UNSUPPORTED_OPTION)


def test_no_spelling_has_two_meanings():
    """A spelling is in one row, except lld's pairs of `--x value` and `--x=value` rows."""
    seen: dict[tuple[str, str], lldopts.Option] = {}
    for o in OPTIONS:
        for name in o.names:
            for dashes in ("-", "--"):
                if o.accepts(dashes):
                    other = seen.setdefault((dashes, name), o)
                    assert other is o or {other.kind, o.kind} == {"separate", "joined"}, (name, other, o)


def test_the_roles_cmdline_reads_are_all_in_the_table():
    used = {o.role for o in OPTIONS if o.role}
    assert used == lldopts.ROLES


def test_every_gate_is_a_feature_ld_lld_is_asked_about():
    """A `probe=` names a toolchain.LLD_PROBES feature, which pipeline checks against lld's answer."""
    gated = {name: o.probe for o in OPTIONS if o.probe for name in o.names}
    assert set(gated.values()) <= set(tools.LLD_PROBES)
    assert gated == {"fat-lto-objects": "fat-lto-objects", "no-fat-lto-objects": "fat-lto-objects",
                     "thinlto-emit-index-files": "thinlto-emit-index-files",
                     "thinlto-distributor": "thinlto-distributor", "thinlto-distributor-arg": "thinlto-distributor"}


@pytest.mark.parametrize(
    "token, name, value, takes_next",
    [("-O2", "O", "2", False), ("--lto-O3", "lto-O", "3", False), ("-lfoo", "l", "foo", False),
     ("-l", "l", None, True), ("-L=/d", "L", "=/d", False), ("--output=x", "output", "x", False),
     ("-output", "o", "utput", False),  # `--output` only takes two dashes: lld reads -o utput
     ("-export-dynamic", "export-dynamic", None, False),  # a flag, not -e xport-dynamic
     # --export-dynamic-symbol-list takes two dashes: with one, lld reads -e xport-dynamic-symbol-list
     ("-export-dynamic-symbol-list", "e", "xport-dynamic-symbol-list", False),
     ("--export-dynamic-symbol-list", "export-dynamic-symbol-list", None, True),
     ("-y", "y", None, True), ("--retain-symbols-file", "retain-symbols-file", None, True),
     ("--reproduce", "reproduce", None, True), ("-rpath-link", "rpath-link", None, True),
     ("-rpath-link=/x", "rpath-link", "/x", False), ("-dT", "dT", None, True), ("--build-id", "build-id", None, False),
     ("--build-id=sha1", "build-id", "sha1", False), ("-znow", "z", "now", False), ("-mllvm", "mllvm", None, True),
     ("-help", "help", None, False), ("--icf=all", "icf=all", None, False), ("-Map", "Map", None, True),
     ("-s", "s", None, False), ("-soname", "soname", None, True), ("-emain", "e", "main", False)],
)
def test_tokens_are_read_as_lld_reads_them(token, name, value, takes_next):
    m = match(token)
    assert (m.name, m.value, m.takes_next) == (name, value, takes_next)


def test_refused_options_keep_their_reason_in_any_spelling():
    for token in ("--thinlto-distributor", "--thinlto-distributor=x", "--thinlto-index-only", "--thinlto-index-only=f"):
        assert match(token).option.refused is Reason.ALREADY_SPLIT, token
    for token in ("--lto-emit-asm", "--save-temps", "-save-temps", "--reproduce=r.tar", "--lto-CGO2", "-b", "--format=binary"):
        assert match(token).option.refused is Reason.UNSUPPORTED_OPTION, token


def help_options(ld: str) -> list[tuple[str, bool]]:
    """(an example of the option, whether it takes a value) for every option `ld.lld --help` lists,
    its metavariable replaced by a value: `--soname=<value>` -> ('--soname=x', True), `-o <path>`
    -> ('-o', True), `--lto-O<opt-level>` -> ('--lto-Ox', True), `--gc-sections` -> (.., False)."""
    out = []
    for line in subprocess.run([ld, "--help"], capture_output=True, text=True, check=True).stdout.splitlines():
        if not line.startswith("  -") or line.startswith(("  -(", "  -)")):
            continue
        token = line[2:].split("  ")[0].strip()
        if token.startswith("--plugin-opt="):  # LLVMgold's options, a table of their own
            out.append((re.sub(r"<[^>]*>", "x", token.split(" ")[0]), "<" in token))
            continue
        spelling, sep, meta = re.match(r"^(-[^ <\[=]+(?:=(?![<\[])[^ =<\[]+(?==))?)(=| |)(.*)$", token).groups()
        if not meta or (sep == " " and not meta.startswith(("<", "["))):  # a long flag, then its help text
            out.append((spelling, False))
        elif sep == " ":
            out.append((spelling, True))
        elif sep == "=" and not meta.startswith(("<", "[")) and match(f"{spelling}={meta}").name == f"{spelling[2:]}={meta}":
            out.append((f"{spelling}={meta}", False))  # a flag whose name has '=' in it: --icf=all
        else:
            out.append((f"{spelling}{sep}x", True))
    return out


@pytest.mark.parametrize("version", LLVM_VERSIONS, ids=[f"llvm{v}" for v in LLVM_VERSIONS])
def test_the_table_agrees_with_ld_lld_help(version):
    listed = help_options(toolchain(version).lld)
    assert len(listed) > 200, "ld.lld --help was not understood"
    wrong = []
    for example, takes_value in listed:
        if example.startswith("--plugin-opt="):
            if lldopts.plugin_opt_meaning(example[len("--plugin-opt="):]) is None:
                wrong.append(f"{example}: no -plugin-opt meaning")
            continue
        m = match(example)
        if m.option is None:
            wrong.append(f"{example}: not in the table")
        elif takes_value != (m.value is not None or m.takes_next):
            wrong.append(f"{example}: lld {'takes' if takes_value else 'takes no'} value, the table has {m.option.kind}")
    assert wrong == []
