"""The final link: the original command with each bitcode module replaced, in place, by its object.

Archives stay archives in spirit (--start-lib groups), so link order and laziness are
those of the original link. Messages naming our temporary objects are rewritten to name
the input the user gave, so a link error reads as it would without ltowrap; the files the
link writes that name its inputs (`--dependency-file`, `-Map`) are rewritten to name them as
in-process lld does (name_outputs).
"""

from __future__ import annotations

import os
import re

from .. import fsutil, proc
from ..formats import depfile, elf
from .backend import Job, side_output
from .plan import LinkPlan, Module
from .thinlink import ThinLinkResult

# Beyond this many bytes of arguments, pass them in a response file.
RESPONSE_FILE_THRESHOLD = 100_000


def extraction_object(result: ThinLinkResult, workdir: str) -> str | None:
    """An object of undefined references to result.extractions (elf.undefined_references),
    written in workdir for the target of the link's objects; None when there are none.

    lld extracts an archive member for a bitcode module's reference before LTO, and links it
    even if LTO removes the reference (a pure virtual's __cxa_pure_virtual, a call LTO found
    dead): the member's code, data and constructors are in the in-process output. The final
    link sees only what LTO left, so these references keep the same members in it."""
    objects = [j.output for j in result.jobs] + ([result.full_lto_object] if result.full_lto_object else [])
    if not result.extractions or not objects:
        return None
    path = os.path.join(workdir, "extractions.o")
    with open(objects[0], "rb") as f:
        like = f.read(64)
    with open(path, "wb") as f:
        f.write(elf.undefined_references(list(result.extractions), like))
    return path


def write_side_outputs(jobs: list[Job], remarks_file: str | None) -> None:
    """What each job wrote besides its object (a split-DWARF .dwo, optimization records), from
    beside its object to the name in-process lld gives it (relative to the link's directory, as
    lld writes it), a directory made as lld makes the dwo_dir (mode 0770 and files 0666, through
    the umask). With --opt-remarks-filename, lld also writes the file itself, the regular-LTO
    task's records: empty in a link without regular-LTO code (the only kind distributed)."""
    for job in jobs:
        for kind, name in job.side_outputs():
            os.makedirs(os.path.dirname(name) or ".", mode=0o770, exist_ok=True)
            fsutil.atomic_write(name, fsutil.read_bytes(side_output(job.output, kind)), mode=0o666, create_dirs=False)
    if remarks_file:
        fsutil.atomic_write(remarks_file, b"", mode=0o666, create_dirs=False)


def argv(plan: LinkPlan, result: ThinLinkResult, ld: list[str], extractions: str | None = None) -> list[str]:
    """Each module replaced by its object. In the place of the first module come the object of
    `extractions` (extraction_object), then, in the place of the first module with a
    regular-LTO part, the regular-LTO object (result.full_lto_object) before that module's own
    object (a split LTO unit has both), as lld resolved symbols in that order."""
    natives = {j.module.path: j.output for j in result.jobs}
    full_lto = [result.full_lto_object] if result.full_lto_object else []
    first = [extractions] if extractions else []

    def replace(m: Module) -> list[str]:
        out = [first.pop()] if first else []
        if full_lto and m.path == result.regular_modules[0]:
            out.append(full_lto.pop())
        native = natives.get(m.path)  # None: a -flto=full module, or lazy bitcode the link did not pull in
        return out + [native] if native else out

    tokens = plan.tokens(replace, eager=True)
    if full_lto:  # regular-LTO code whose module position we did not see
        tokens += full_lto
    return ld + tokens


def quote(arg: str) -> str:
    """GNU response-file quoting, which lld reads on Unix."""
    return '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'


def run(cmd: list[str], plan: LinkPlan, result: ThinLinkResult, workdir: str) -> tuple[int, bytes, bytes]:
    """Run the final link; its exit code and output, each object of ours named as in-process
    lld names it (object_names)."""
    if sum(len(a) + 1 for a in cmd) > RESPONSE_FILE_THRESHOLD:
        rsp = f"{workdir}/final.rsp"
        with open(rsp, "w", encoding="utf-8", errors="surrogateescape") as f:
            f.write("\n".join(quote(a) for a in cmd[1:]))
        cmd = [cmd[0], "@" + rsp]
    rc, out, err = proc.capture(cmd)
    names = object_names(plan, result)
    return rc, _rename(out, names), _rename(err, names)


def _rename(text: bytes, names: dict[str, str]) -> bytes:
    if not text:
        return text
    # Longest first, so no path is rewritten inside a longer one.
    for path in sorted(names, key=len, reverse=True):
        text = text.replace(path.encode("utf-8", "surrogateescape"), names[path].encode("utf-8", "surrogateescape"))
    return text


def undefined_symbols(stderr: bytes) -> list[str] | None:
    """The symbols a failed link reports undefined, if that is all it reports (else None)."""
    names = []
    for line in stderr.decode("utf-8", "replace").splitlines():
        if ": error: " not in line or "too many errors" in line:
            continue
        if "undefined symbol: " not in line:
            return None
        names.append(line.split("undefined symbol: ", 1)[1].strip())
    return names or None


def user_error(stderr: bytes, plan: LinkPlan, nm: str) -> bool:
    """Did the final link fail only on symbols the user's inputs never define?

    Such links (configure probes, busybox's link script) must fail fast and as without
    ltowrap, so their errors are reported directly. If a bitcode module defines one of the
    missing symbols (llvm-nm reads its symbol table), the distributed link lost it: not the
    user's error, so the original command decides. A promoted local (`name.llvm.<hash>`)
    is always ours.
    """
    names = undefined_symbols(stderr)
    if not names or any(".llvm." in n for n in names):
        return False
    rc, out, _ = proc.capture([nm, "--defined-only", "--format=just-symbols", *(m.path for m in plan.modules)])
    if rc != 0:
        return False
    defined = set(out.decode("utf-8", "replace").split())
    return not any(n.split("@", 1)[0] in defined for n in names)


# From this lld release on, in-process ThinLTO names each native object after its module, in a
# map and wherever lld names an input (`prog.lto.main.o`, `d/prog.lto.lib.a(m.o at 88).o`), and
# the regular-LTO one `prog.lto.o`; before it, every one is `lto.tmp`. (13-16 print lto.tmp,
# 19 and 22 the new names; 17 and 18 are taken to be as 19, unchecked.)
LTO_NAMES_SINCE = 18


def lto_object_name(lld_major: int, output: str, lld_id: str) -> str:
    """What in-process lld `lld_major` calls the object compiled from the module it names
    `lld_id` (plan.Module.lld_id), for the link writing `output`: lld's LTO.cpp, beside the
    bitcode, the output's file name, `.lto.`, then the member's name (an archive member)
    or the file's stem, `.o`, with `.`/`..` components folded."""
    if lld_major < LTO_NAMES_SINCE:
        return "lto.tmp"
    directory, base = os.path.split(lld_id)
    if not lld_id.endswith(")"):
        base = os.path.splitext(base)[0]
    name = os.path.basename(output) + ".lto." + base + ".o"
    return depfile.normal(os.path.join(directory, name)) if directory else name


def regular_lto_name(lld_major: int, output: str) -> str:
    """What in-process lld calls the regular-LTO object (the first task's, `ld-temp.o`)."""
    return "lto.tmp" if lld_major < LTO_NAMES_SINCE else output + ".lto.o"


def _last_value(argv: list[str], name: str) -> str | None:
    """The last value of the option `name` on an ld.lld line (-name=V, --name=V, -name V, --name V):
    the one lld takes."""
    value = None
    for i, a in enumerate(argv):
        bare = a[2:] if a.startswith("--") else a[1:] if a.startswith("-") else None
        if bare == name and i + 1 < len(argv):
            value = argv[i + 1]
        elif bare is not None and bare.startswith(name + "="):
            value = bare[len(name) + 1 :]
    return value


def _written(plan: LinkPlan, name: str) -> str | None:
    """Where the user's link writes the file of option `name` (its last value), if it asks."""
    values = [v for o, v in plan.command.written if name in o.names and v]
    return values[-1] if values else None


def name_outputs(final: list[str], plan: LinkPlan, result: ThinLinkResult, workdir: str, cache_root: str) -> None:
    """The user's `--dependency-file` and `-Map`, as the final link `final` wrote them, rewritten
    to name what in-process lld names: the inputs the command named, never ltowrap's objects.

    Depfile: each module's object (and the store's copy of an archive's native member) gives
    way to the input it came from (the bitcode file, the archive), in lld's order, once; the
    objects ltowrap adds (regular-LTO, extractions.o) are left out; an input whose objects the
    final link did not read (lazy bitcode no one pulled in) is listed where lld read it. When
    the link memo made the final link write its list into the work directory, that list is
    the one read. Map: each object is named as in-process names it (lto_object_name, and
    `lib.a(m.o)` for a native member), so the map is the same on every build."""
    wanted = _written(plan, "dependency-file")
    written = _last_value(final, "dependency-file")
    if wanted and written:
        listed = depfile.read(written)
        if listed is not None:
            ours = tuple(os.path.abspath(d) + os.sep for d in (cache_root, workdir))
            depfile.write(wanted, plan.command.output, _inputs(plan, result, listed, ours))
    map_file = _written(plan, "Map")
    if map_file and map_file != "-":
        _rename_map(map_file, plan, result, workdir, cache_root)


def _inputs(plan: LinkPlan, result: ThinLinkResult, listed: list[str], ours: tuple[str, ...]) -> list[str]:
    """lld's list of the final link, `listed`, with ltowrap's files (under `ours`) replaced by
    the inputs of `plan` they stand for."""
    natives = {j.module.path: j.output for j in result.jobs}
    piece_of: dict[str, int] = {}  # one of our files (as lld prints it) -> the piece it came from
    plain_at: dict[str, int] = {}  # an input left as it was -> its piece
    rewritten: list[int] = []
    for i, p in enumerate(plan.pieces):
        if p.arg.input is None:
            continue
        if not p.rewritten:
            plain_at.setdefault(depfile.normal(p.arg.input), i)
            continue
        rewritten.append(i)
        for m in p.members:
            path = natives.get(m.path) if isinstance(m, Module) else m
            if path:
                piece_of.setdefault(depfile.normal(path), i)
    out: list[str] = []
    done: set[int] = set()

    def add(name: str) -> None:
        if name not in out:
            out.append(name)

    def up_to(k: int) -> None:  # the rewritten pieces before piece k that have not appeared
        for i in rewritten:
            if i < k and i not in done:
                done.add(i)
                add(depfile.normal(plan.pieces[i].arg.input or ""))

    for path in listed:
        k = piece_of.get(path)
        if k is not None:
            up_to(k + 1)  # piece k's input, after any before it lld read nothing of ours for
            continue
        if os.path.abspath(path).startswith(ours):
            continue  # extractions.o, the regular-LTO object: ltowrap's own
        k = plain_at.get(path)
        if k is not None:
            up_to(k)
        add(path)
    up_to(len(plan.pieces))
    return out


def object_names(plan: LinkPlan, result: ThinLinkResult) -> dict[str, str]:
    """Each object of ours in the final link -> what in-process lld calls it: the native objects
    of the modules, the regular-LTO object, the native members of archives."""
    names: dict[str, str] = {}
    output, major = plan.command.output, plan.lld_major
    for j in result.jobs:
        names[j.output] = lto_object_name(major, output, j.module.lld_id)
    if result.full_lto_object:
        names[result.full_lto_object] = regular_lto_name(major, output)
    for p in plan.pieces:
        for m, name in zip(p.members, p.names):
            if name and isinstance(m, str):
                names.setdefault(m, name)
    return names


def _rename_map(path: str, plan: LinkPlan, result: ThinLinkResult, workdir: str, cache_root: str) -> None:
    """Rewrite the map at `path`: every object of ours named as in-process lld names it."""
    names = object_names(plan, result)
    try:
        text = fsutil.read_bytes(path).decode("utf-8", "surrogateescape")
    except OSError:
        return
    # Our paths, found by where they live (a map may be large: one pass, not one per object).
    dirs = {d.rstrip("/") for d in (workdir, cache_root, os.path.abspath(workdir), os.path.abspath(cache_root))}
    roots = "|".join(re.escape(d) for d in sorted(dirs, key=len, reverse=True))
    pattern = re.compile(f"(?:{roots})/[^\n:]*")
    renamed = pattern.sub(lambda m: names.get(m.group(0), m.group(0)), text)
    if renamed != text:
        fsutil.atomic_write(path, renamed.encode("utf-8", "surrogateescape"), mode=0o666, create_dirs=False)
