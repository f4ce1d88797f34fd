"""The Linux kernel through ltowrap's shims (issue 41).

Debian's Linux 6.1, configured as integration/kernel.py says (x86_64 tinyconfig, ThinLTO,
ORC and so objtool), built by Kbuild unchanged with `make LLVM=-19` and ltowrap's shims first
on PATH. vmlinux.o's link (`ld.lld -r` over the thin archive of thin archives vmlinux.a) must
be distributed, every module through a backend compile; objtool must then accept the native
code the backends wrote (it writes the ORC tables into vmlinux.o), and the final link of
vmlinux must pass. Then the same vmlinux.a is linked again by in-process lld (ltowrap
disabled: Kbuild's own vmlinux.o link, objtool and final link), and the two vmlinux must have
the same functions, compared as integration/fidelity.py compares two binaries (`sections =
link`, the default, gives the backends in-process's sections).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import clean_env
from needs import missing

from . import debsrc, fidelity, kernel

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent  # the venv ltowrap is installed in
# Kbuild's host tools: kconfig's parser (flex, bison), objtool (libelf), and make.
HOST_TOOLS = {"make": "make", "flex": "flex", "bison": "bison", "bc": "bc"}


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    for tool in [f"clang-{kernel.LLVM}", f"ld.lld-{kernel.LLVM}", f"llvm-ar-{kernel.LLVM}", *HOST_TOOLS]:
        if shutil.which(tool) is None:
            missing(tool, "dev/setup installs it")
    if not Path("/usr/include/gelf.h").exists():
        missing("libelf's headers (objtool needs them)", "dev/setup installs libelf-dev")
    try:
        return kernel.tree(tmp_path_factory.mktemp("kernel") / "linux")
    except debsrc.SourceError as e:
        said = str(e).strip().splitlines()  # the command, and apt's last word on why (E: ... 404 Not Found)
        why = said[0] if len(said) == 1 else f"{said[0]} {said[-1]}"
        missing(f"Debian's linux {kernel.VERSION} source ({why})", "a deb-src entry and network")


def test_vmlinux_o_is_distributed_and_objtool_and_the_final_link_pass(source, tmp_path):
    shims = subprocess.run([str(BIN / "ltowrap"), "shims"], capture_output=True, text=True, check=True).stdout.strip()
    env = clean_env(tmp_path, PATH=f"{shims}:{BIN}:/usr/bin:/bin", LTOWRAP_JOBS="2")
    build = tmp_path / "build"
    kernel.configure(source, build, env=env)
    done = subprocess.run(kernel.make_argv(build, "vmlinux"), cwd=source, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    log = Path(env["LTOWRAP_LOG"])
    links = [json.loads(x) for x in log.read_text().splitlines()]
    (vmlinux_o,) = [r for r in links if r["tool"].startswith("ld.lld") and kernel.is_vmlinux_o_link(r["argv"])]
    assert vmlinux_o["decision"] == "distributed", (vmlinux_o.get("reason"), vmlinux_o.get("detail"))
    # Every module the link uses through a backend compile (an empty cache): lib.a's members
    # that nothing pulls in are modules of the link that need none.
    assert vmlinux_o["backend_compiles"] == len(vmlinux_o["backends"]) > 400
    assert {b["source"] for b in vmlinux_o["backends"]} == {"compiled"}

    # objtool ran on vmlinux.o (Kbuild runs it right after the link): the ORC tables are its,
    # the link itself writes none.
    sections = subprocess.run([f"llvm-readelf-{kernel.LLVM}", "-S", "-W", str(build / "vmlinux.o")],
                              capture_output=True, text=True, check=True).stdout
    assert re.search(r"\] \.orc_unwind_ip +PROGBITS", sections)
    symbols = subprocess.run([f"llvm-nm-{kernel.LLVM}", str(build / "vmlinux")], capture_output=True, text=True,
                             check=True).stdout
    assert re.search(r"^[0-9a-f]+ [Tt] start_kernel$", symbols, re.M)  # local: LTO internalises it

    # The same vmlinux.a through in-process ThinLTO: Kbuild links vmlinux.o again (its only input
    # that changed is gone), then objtool and the final link, as for ours.
    ours = tmp_path / "vmlinux.ltowrap"
    shutil.copy(build / "vmlinux", ours)
    (build / "vmlinux.o").unlink()
    logged = log.read_text()
    done = subprocess.run(kernel.make_argv(build, "vmlinux"), cwd=source, env=env | {"LTOWRAP_DISABLE": "1"},
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert log.read_text() == logged  # ltowrap passed every command through
    r = fidelity.compare(ours, build / "vmlinux", fidelity.OBJDUMP)
    symbols = subprocess.run([f"llvm-readelf-{kernel.LLVM}", "-s", "-W", str(ours)], capture_output=True, text=True,
                             check=True).stdout
    functions = {m.group(1) for m in re.finditer(r" FUNC +\w+ +\w+ +\d+ (\S+)$", symbols, re.M)}
    # Only functions: a label of the linker script (__sched_text_end) or a section without one
    # (.altinstr_replacement) runs on into padding and tables whose order is the final link's.
    # The two final links lay vmlinux out differently (ltowrap's keeps each module's object in its
    # place, in-process lld puts its objects after every other input), so an address the link
    # computes, or one an object of no size shares, may get another name (fidelity.layout_only).
    differing = [n for n in r.differing if n.split("#")[0] in functions
                 and not fidelity.layout_only(ours, build / "vmlinux", fidelity.OBJDUMP, n)]
    assert r.identical > 8000 and not differing and not r.only_a and not r.only_b, r.summary() + "".join(
        f"\n{fidelity.diff(ours, build / 'vmlinux', fidelity.OBJDUMP, n)}" for n in differing[:5])
