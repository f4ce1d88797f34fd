"""The final link: the original command with each bitcode module replaced, in place, by its object.

Archives stay archives in spirit (--start-lib groups), so link order and laziness are
those of the original link. Messages naming our temporary objects are rewritten to name
the input the user gave, so a link error reads as it would without ltowrap.
"""

from __future__ import annotations

import os

from .. import proc
from ..formats import elf
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


def run(cmd: list[str], result: ThinLinkResult, workdir: str) -> tuple[int, bytes, bytes]:
    """Run the final link; its exit code and output, with our object paths renamed."""
    if sum(len(a) + 1 for a in cmd) > RESPONSE_FILE_THRESHOLD:
        rsp = f"{workdir}/final.rsp"
        with open(rsp, "w", encoding="utf-8", errors="surrogateescape") as f:
            f.write("\n".join(quote(a) for a in cmd[1:]))
        cmd = [cmd[0], "@" + rsp]
    rc, out, err = proc.capture(cmd)
    names = {j.output: j.module.origin for j in result.jobs}
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
