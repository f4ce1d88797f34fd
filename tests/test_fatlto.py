"""FatLTO objects (`-ffat-lto-objects`): native ELF objects that carry their module's bitcode in a
`.llvm.lto` section. lld with --fat-lto-objects links that bitcode instead of the native code,
for plain objects and archive members alike; without the option, the native code. The
distributed link does the same: the bitcode is a module, and the final link gets the object
compiled from it in the fat object's place.

FatLTO came in LLVM 17: these run on the releases of helpers.LLVM_VERSIONS whose ld.lld
says it takes --fat-lto-objects (toolchain.lld_facts); on the others (clang 14 ignores
-ffat-lto-objects, lld 14 has no --fat-lto-objects) tests/test_versions.py's test_gates
checks that such a link runs unchanged, with lld's own error.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from helpers import (LLVM_VERSIONS, Toolchain, compile_lto, expected_output, links, ltowrap_env, run, sources,
                     toolchain, wrapper, write)
from ltowrap import toolchain as tools
from ltowrap.formats import elf

FAT = ("-ffat-lto-objects",)


def _fat_versions() -> list[int]:
    """The releases whose ld.lld takes --fat-lto-objects, as it says (one not installed is kept:
    helpers.toolchain then says it is missing)."""
    found = []
    for v in LLVM_VERSIONS:
        lld = str(Toolchain(v).lld)
        if not os.path.exists(lld) or "fat-lto-objects" in tools.lld_facts(lld)["takes"]:
            found.append(v)
    return found


FAT_VERSIONS = _fat_versions()


@pytest.fixture(params=FAT_VERSIONS, ids=[f"llvm{v}" for v in FAT_VERSIONS])
def fat_tc(request) -> Toolchain:
    return toolchain(request.param)


def test_fat_objects_are_distributed(project, tmp_path, fat_tc):
    sources(project)
    compile_lto(project, fat_tc, "main", "add", "mul", "twice", flags=FAT)
    want = expected_output(project, fat_tc)
    objs = ["main.o", "add.o", "mul.o", "twice.o"]
    assert all(elf.section((project / o).read_bytes(), elf.LLVM_LTO) for o in objs)
    run([wrapper("ltowrap-clang"), "-fuse-ld=lld", "-flto=thin", *FAT, *objs, "-o", "prog"], project, env=ltowrap_env(fat_tc))
    assert run(["./prog"], project).stdout == want
    rec = links(tmp_path)[-1]
    assert "--fat-lto-objects" in rec["argv"]  # the driver passes it for -ffat-lto-objects
    assert rec["decision"] == "distributed" and rec["modules"] == 4 and rec["backend_compiles"] == 4, rec
    # Their option records were found: recorded under the fat object's own bytes.
    assert not any("recorded" in b for b in rec["backends"]), rec["backends"]


def test_fat_object_recorded_by_the_python_entry(project, tmp_path, fat_tc):
    """`-oFILE` takes the Python entry (not the sh fast path): it records FatLTO objects too."""
    write(project / "f.c", "int f(void) { return 3; }\n")
    write(project / "main.c", "int f(void);\nint main(void) { return f(); }\n")
    env = ltowrap_env(fat_tc)
    for n in ("f", "main"):
        run([wrapper("ltowrap-clang"), "-O1", "-flto=thin", *FAT, "-c", f"{n}.c", f"-o{n}.o"], project, env=env)
    run([wrapper("ltowrap-clang"), "-fuse-ld=lld", "-flto=thin", *FAT, "f.o", "main.o", "-o", "prog"], project, env=env)
    assert run(["./prog"], project, check=False).returncode == 3
    rec = links(tmp_path)[-1]
    assert rec["decision"] == "distributed" and not any("recorded" in b for b in rec["backends"]), rec


def test_without_the_option_fat_objects_stay_native(project, tmp_path, fat_tc):
    sources(project)
    compile_lto(project, fat_tc, "main", "add", "mul", "twice", flags=FAT)
    want = expected_output(project, fat_tc)
    objs = ["main.o", "add.o", "mul.o", "twice.o"]
    run([wrapper("ltowrap-clang"), "-fuse-ld=lld", "-flto=thin", *objs, "-o", "prog"], project, env=ltowrap_env(fat_tc))
    assert run(["./prog"], project).stdout == want
    rec = links(tmp_path)[-1]
    assert "--fat-lto-objects" not in rec["argv"] and rec["decision"] == "passthrough", rec


MIX = {
    "main.c": '#include <stdio.h>\nint fat1(void); int thin1(void); int nat1(void);\n'
              'int main(void) { printf("%d %d %d\\n", fat1(), thin1(), nat1()); return 0; }\n',
    "fat1.c": "int fat2(void);\nint fat1(void) { return 10 + fat2(); }\n",
    "fat2.c": "int fat2(void) { return 1; }\n",  # pulled in only through fat1's reference
    "thin1.c": "int fat2(void);\nint thin1(void) { return 20 + fat2(); }\n",
    "nat1.c": "int nat1(void) { return 30; }\n",
    "unused.c": '#include <stdio.h>\n__attribute__((constructor)) static void hi(void) { puts("unused member linked"); }\n'
                "int unused(void) { return 0; }\n",  # never pulled: its constructor must not run
}


def mixed_archive(d: Path, tc: Toolchain) -> None:
    """libmix.a: FatLTO members (fat1, fat2, unused), a ThinLTO member, a native member."""
    for name, text in MIX.items():
        write(d / name, text)
    env = ltowrap_env(tc)
    for n, flags in (("main", ()), ("fat1", FAT), ("fat2", FAT), ("unused", FAT), ("thin1", ())):
        run([wrapper("ltowrap-clang"), "-O2", "-flto=thin", *flags, "-c", f"{n}.c"], d, env=env)
    run([tc.clang, "-O2", "-c", "nat1.c"], d)
    run([tc.ar, "rcs", "libmix.a", "fat1.o", "thin1.o", "nat1.o", "unused.o", "fat2.o"], d)


@pytest.mark.parametrize("fat", [True, False], ids=["--fat-lto-objects", "native"])
def test_archive_of_fat_thin_and_native_members(project, tmp_path, fat_tc, fat):
    mixed_archive(project, fat_tc)
    flags = [*FAT] if fat else []
    run([fat_tc.clang, "-fuse-ld=lld", "-flto=thin", *flags, "main.o", "libmix.a", "-o", "inprocess"], project)
    run([wrapper("ltowrap-clang"), "-fuse-ld=lld", "-flto=thin", *flags, "main.o", "libmix.a", "-o", "prog"], project,
        env=ltowrap_env(fat_tc))
    want = run(["./inprocess"], project).stdout
    assert want == "11 21 30\n"
    assert run(["./prog"], project).stdout == want
    rec = links(tmp_path)[-1]
    assert rec["decision"] == "distributed", rec
    compiled = sorted(b["module"] for b in rec["backends"])
    if fat:  # the fat members are modules; the unused one is not compiled, the native one is linked as is
        assert rec["modules"] == 5 and compiled == ["libmix.a(fat1.o)", "libmix.a(fat2.o)", "libmix.a(thin1.o)", "main.o"]
    else:  # only real bitcode is; the fat members link their native code, as lld's
        assert rec["modules"] == 2 and compiled == ["libmix.a(thin1.o)", "main.o"]
    assert symbols(fat_tc, project / "prog") == symbols(fat_tc, project / "inprocess")


def symbols(tc: Toolchain, binary: Path) -> list[str]:
    """The functions and objects the program defines (the members it really took)."""
    out = subprocess.run([str(tc.bindir / "llvm-nm"), "--defined-only", "--format=just-symbols", str(binary)],
                         check=True, capture_output=True, text=True).stdout
    return sorted(s for s in out.split() if s in ("fat1", "fat2", "thin1", "nat1", "unused", "hi", "main"))


def test_a_fat_link_with_a_broken_section_falls_back(project, tmp_path, fat_tc):
    """A `.llvm.lto` section that holds no bitcode: lld's error is the user's to see."""
    write(project / "main.c", "int main(void) { return 0; }\n")
    run([fat_tc.clang, "-c", "main.c"], project)
    write(project / "junk.bin", "not bitcode")
    run([str(fat_tc.bindir / "llvm-objcopy"), "--add-section", ".llvm.lto=junk.bin", "main.o"], project)
    plain = run([fat_tc.clang, "-fuse-ld=lld", "-flto=thin", *FAT, "main.o", "-o", "prog"], project, check=False)
    ours = run([wrapper("ltowrap-clang"), "-fuse-ld=lld", "-flto=thin", *FAT, "main.o", "-o", "prog"], project,
               env=ltowrap_env(fat_tc), check=False)
    assert ours.returncode == plain.returncode != 0
    rec = links(tmp_path)[-1]
    assert rec["decision"] == "fallback" and "holds no bitcode" in rec["detail"], rec


# --- the ELF reader, on what clang and llvm-mc write ---


@pytest.mark.parametrize("target", ["x86_64-linux-gnu", "i686-linux-gnu", "powerpc64-linux-gnu"],
                         ids=["elf64-le", "elf32-le", "elf64-be"])
def test_elf_section_is_what_objcopy_dumps(project, tc22, target):
    write(project / "a.c", "int g = 5;\nint get(void) { return g; }\n")
    run([tc22.clang, f"--target={target}", "-O2", "-flto=thin", *FAT, "-c", "a.c"], project)
    run([str(tc22.bindir / "llvm-objcopy"), "--dump-section=.llvm.lto=dumped.bc", "a.o"], project)
    data = (project / "a.o").read_bytes()
    assert elf.section(data, elf.LLVM_LTO) == (project / "dumped.bc").read_bytes()
    assert elf.section(data, b".no-such-section") is None
    assert elf.section((project / "dumped.bc").read_bytes(), elf.LLVM_LTO) is None  # bitcode is no ELF


def test_elf_section_with_extended_numbering(project, tc22):
    """66000 sections: e_shnum is 0 and the count is section 0's sh_size; then e_shstrndx
    set to SHN_XINDEX, the index in section 0's sh_link (patched in, as readelf reads it)."""
    text = "".join(f'.section .text.f{i},"ax",@progbits\n.byte 0\n' for i in range(66000))
    write(project / "many.s", text + '.section .llvm.lto,"e",@llvm_lto\n.ascii "BC\\300\\336payload"\n')
    run([str(tc22.bindir / "llvm-mc"), "-filetype=obj", "-triple=x86_64-linux-gnu", "many.s", "-o", "many.o"], project)
    data = bytearray((project / "many.o").read_bytes())
    assert int.from_bytes(data[0x3C:0x3E], "little") == 0  # extended e_shnum
    assert elf.section(bytes(data), elf.LLVM_LTO) == b"BC\xc0\xdepayload"
    shoff = int.from_bytes(data[0x28:0x30], "little")
    shstrndx = int.from_bytes(data[0x3E:0x40], "little")
    data[0x3E:0x40] = (0xFFFF).to_bytes(2, "little")
    data[shoff + 40 : shoff + 44] = shstrndx.to_bytes(4, "little")  # section 0's sh_link
    (project / "xindex.o").write_bytes(data)
    assert ".llvm.lto" in run([str(tc22.bindir / "llvm-readelf"), "-S", "xindex.o"], project).stdout
    assert elf.section(bytes(data), elf.LLVM_LTO) == b"BC\xc0\xdepayload"


def test_elf_refuses_broken_tables(project, tc22):
    write(project / "a.c", "int get(void) { return 5; }\n")
    run([tc22.clang, "-O2", "-flto=thin", *FAT, "-c", "a.c"], project)
    data = (project / "a.o").read_bytes()
    shoff = int.from_bytes(data[0x28:0x30], "little")
    for broken in (data[: shoff + 10], data[:0x28] + (len(data) * 2).to_bytes(8, "little") + data[0x30:]):
        with pytest.raises(elf.BadElf):
            elf.section(broken, elf.LLVM_LTO)
    assert elf.section(data[:16], elf.LLVM_LTO) is None  # too short to be an object
