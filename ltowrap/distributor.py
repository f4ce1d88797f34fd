"""ltowrap as the distributor of lld's integrated DTLTO (`-fthinlto-distributor=ltowrap-distributor`).

lld (LLVM >= 21) does the thin-link and the final link itself and hands the backend
compiles to a distributor: it runs `<distributor> [--thinlto-distributor-arg values] <file.json>`
with, as written by lld 22:

    {"common": {"linker_output": str, "args": [clang, "-c", <codegen options>...], "inputs": [str]},
     "jobs":   [{"args": [<module>, "-fthinlto-index=<shard>", "-o", <object>],
                 "inputs": [<module>, <shard>, <imported modules>...], "outputs": [<object>]}]}

Every job runs through ltowrap's executor: the backend cache, the local pool under make's
jobserver, the empty-object checks, and the module's recorded compile options. The key is
built by the same recipe as for ltowrap's own links, with module paths in the shard
replaced by content digests. lld's per-link temporary names for archive members also
change its value numbering in some shards, so a DTLTO relink hits only where a shard
comes out the same. (lld's common options, e.g. -fpic and --target, differ from
ltowrap's own backend command line, so the two paths keep separate entries.)
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass

from . import log
from .cachekey import facts_pack_key, file_digests
from .config import ConfigError, Settings, load
from .errors import ToolFailed, Unsupported
from .fsutil import read_bytes
from .jobs import jobrun
from .stages import diagnostics
from .stages.backend import Job, module_options, read_facts
from .stages.plan import Module

SCHEMA = {"": {"common", "jobs"}, "common": {"linker_output", "args", "inputs"}, "job": {"args", "inputs", "outputs"}}
# Options of lld's common args that fix the output's relocation model: they stay last.
RELOC_FLAGS = ("-fpic", "-fPIC", "-fpie", "-fPIE", "-fno-pic", "-fno-pie")


class SchemaError(Exception):
    pass


@dataclass(frozen=True)
class DtltoBackend:
    """The backend compile as lld's DTLTO spells it: its common arguments, then the module's."""

    common: tuple[str, ...]  # lld's: clang, -c, target and codegen options

    def argv(self, module: str, shard: str, output: str, recorded: list[str] | None, dwo: str = "") -> list[str]:
        reloc = [a for a in self.common if a in RELOC_FLAGS]
        return [*self.common, *(recorded or []), *reloc, "-x", "ir", module, f"-fthinlto-index={shard}", "-o", output]

    def unrecorded(self, module: Module) -> list[str]:
        """For a module without a record, what it says of itself (backend.module_options):
        its own triple over lld's one --target for the whole link, and its relocation
        model when lld passed none (-r, and static links, where clang's default would
        otherwise apply). Unreadable: lld's options alone, as before."""
        relocation = not any(a in RELOC_FLAGS for a in self.common)
        facts = read_facts(module, relocation)
        if facts is None:
            return []
        try:
            return module_options(facts, relocation)
        except Unsupported:
            return module_options(facts, False)


def _check(obj: object, kind: str, where: str) -> dict:
    if not isinstance(obj, dict):
        raise SchemaError(f"{where}: expected an object")
    unknown = set(obj) - SCHEMA[kind]
    if unknown:
        raise SchemaError(f"{where}: unknown field {sorted(unknown)[0]!r} (this ltowrap knows lld 22's DTLTO schema)")
    missing = SCHEMA[kind] - set(obj) - {"inputs", "linker_output"}
    if missing:
        raise SchemaError(f"{where}: missing field {sorted(missing)[0]!r}")
    return obj


def parse_job(raw: object, n: int) -> tuple[str, str, str, list[str]]:
    """(module, shard, output, imports) of job n, from its args and inputs."""
    job = _check(raw, "job", f"jobs[{n}]")
    args = job["args"]
    shard = next((a.split("=", 1)[1] for a in args if a.startswith("-fthinlto-index=")), None)
    output = args[args.index("-o") + 1] if "-o" in args and args.index("-o") + 1 < len(args) else None
    module = next((a for a in args if not a.startswith("-") and a != output), None)
    if shard is None or output is None or module is None:
        raise SchemaError(f"jobs[{n}].args: expected a module, -fthinlto-index=<shard> and -o <object>, got {args!r}")
    imports = [i for i in job.get("inputs", []) if i not in (module, shard)]
    return module, shard, output, imports


def run(json_path: str, settings: Settings | None = None) -> int:
    try:
        settings = settings or load()
        with open(json_path, encoding="utf-8") as f:
            data = _check(json.load(f), "", json_path)
        common = _check(data["common"], "common", "common")
        parsed = [parse_job(j, n) for n, j in enumerate(data["jobs"])]
    except (OSError, ValueError, SchemaError, ConfigError) as e:
        print(f"ltowrap-distributor: {e}", file=sys.stderr)
        return 2
    record = log.Record(tool="distributor", argv=sys.argv, decision=log.Decision.FAILED)
    with jobrun.job_run(settings, record) as job_run:
        job_run.stats.add("distributor_runs")
        jobs = [Job(Module.of(read_bytes(module), module, module), read_bytes(shard), shard, tuple(imports), output)
                for module, shard, output, imports in parsed]
        record.modules = len(jobs)
        digest_of = file_digests({j.module.path: j.module.digest for j in jobs}, job_run.cache,
                                 facts_pack_key(os.getcwd(), common.get("linker_output", "")))
        clang = common["args"][0]
        try:
            with job_run.executor(DtltoBackend(tuple(common["args"])), clang, digest_of,
                                  common.get("linker_output", ""), len(jobs)) as executor:
                executor.run(jobs, {j.module.path: j.module.size for j in jobs})
            digest_of.keep()
            # What each backend clang printed, as lld's own distributor leaves it (the clang's
            # stderr is the link's): on a hit too, from the cache.
            for module, text in executor.printed():
                sys.stderr.write(diagnostics.named(text, {j.module.digest: j.module.path for j in jobs}))
        except ToolFailed as e:
            sys.stderr.write(e.output if e.output.endswith("\n") else e.output + "\n")
            return 1
        record.decision = log.Decision.DISTRIBUTED
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or not args[-1].endswith(".json"):
        print("usage: ltowrap-distributor [ignored lld distributor args] <job file.json>", file=sys.stderr)
        return 2
    return run(args[-1])
