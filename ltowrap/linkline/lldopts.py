"""ld.lld's options as one table: spelling, arity, the files they read or write, and what ltowrap does with them.

Each row of TABLE is `kind dashes names... [attributes]`:
- kind, how a value is given:
    flag      no value
    optional  a flag, or `--name=value`
    value     `--name=value` or `--name value`
    joined    `--name=value` only
    separate  `--name value` only
    letter    a single letter: `-xVALUE` or `-x VALUE`
    prefix    the value follows the name directly: `--lto-O3`
- dashes, the prefixes lld accepts: `-`, `--`, or `*` (either);
- names: the option's spellings, canonical first (`o output`: `-o` and `--output`);
- attributes: `reads` (the value names a file the link reads: part of the thin-link key),
  `writes` (the link writes a file besides -o; `writes=stored`: one the link memo restores
  beside -o, so a link writing it can still be memoised), `varies=V` (with the value V, the
  output differs from one link to the next: such a link is never memoised), `role=X` (what ltowrap's link model takes
  from it, see ROLES), `split` / `unsupported` (a link ltowrap does not distribute: it runs
  unchanged, counted under errors.Reason.ALREADY_SPLIT / UNSUPPORTED_OPTION), `probe=P` (the
  option came in some lld release: on an ld.lld that does not take toolchain.LLD_PROBES[P], a
  link naming it runs unchanged, counted under LINKER_OPTION, and lld says why itself).
  Every option that writes a file or prints the link's inputs (issue 38) either writes what
  in-process lld writes (tests/test_outputs.py's OUTPUT_OPTIONS) or is `unsupported`: what names
  the inputs lld read (--trace, -y, --why-extract, --print-archive-stats, --cref, --why-live,
  --print-gc-sections, --print-icf-sections, --time-trace) would name the final link's objects,
  where in-process names the bitcode and the order and lines in which it read it.
Options not in the table are taken as flags; lld itself rejects unknown ones, so such a
link fails at the thin-link and then runs unchanged, failing as it would without ltowrap.

The rows follow lld 22's and 14's Options.td; tests/test_lldopts.py checks them against
`ld.lld --help` of every installed lld and for consistency.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import Reason

KINDS = frozenset(["flag", "optional", "value", "joined", "separate", "letter", "prefix"])
TAKES_VALUE = frozenset(["value", "joined", "separate", "letter", "prefix"])
# What ltowrap's link model takes from an option (cmdline.parse), and the backend's codegen meaning.
ROLES = frozenset("""
    output library library-path sysroot whole-archive no-whole-archive start-lib end-lib group
    static dynamic push-state pop-state shared pie no-pie relocatable lto-O mllvm plugin-opt
    sample-profile fat-lto-objects no-fat-lto-objects script nostdlib emulation
    fatal-warnings no-fatal-warnings no-warnings error-limit section-order lto-partitions
    remarks-file remarks-format remarks-passes
""".split())

TABLE = """
flag      -   (                                     role=group
flag      -   )                                     role=group
flag      *   allow-multiple-definition no-allow-multiple-definition
flag      *   allow-shlib-undefined no-allow-shlib-undefined
flag      --  android-memtag-heap no-android-memtag-heap android-memtag-stack no-android-memtag-stack
value     --  android-memtag-mode
flag      --  apply-dynamic-relocs no-apply-dynamic-relocs
flag      *   as-needed no-as-needed
value     *   auxiliary
separate  -   f
separate  -   b                                     unsupported
value     *   format                                unsupported
flag      *   Bdynamic dy call_shared               role=dynamic
flag      *   Bstatic static dn non_shared          role=static
flag      *   be8 Bno-symbolic Bsymbolic Bsymbolic-functions Bsymbolic-non-weak Bsymbolic-non-weak-functions
flag      --  bp-compression-sort-startup-functions no-bp-compression-sort-startup-functions
joined    --  bp-compression-sort bp-startup-sort      role=section-order
flag      --  branch-to-branch no-branch-to-branch
flag      *   Bshareable shared                     role=shared
optional  *   build-id                              varies=uuid
value     *   call-graph-ordering-file              reads role=section-order
optional  --  call-graph-profile-sort
flag      --  no-call-graph-profile-sort
flag      *   check-sections no-check-sections
separate  --  chroot
flag      --  cmse-implib
optional  --  color-diagnostics
flag      --  no-color-diagnostics
value     *   compress-debug-sections
value     --  compress-sections
flag      --  cref                                  unsupported
flag      -   d g
flag      *   dc dp define-common no-define-common
flag      --  debug-names no-debug-names
value     --  default-script                        reads role=script
separate  -   dT                                    reads role=script
value     *   defsym
flag      *   demangle no-demangle
value     --  dependency-file                       writes=stored
flag      --  dependent-libraries no-dependent-libraries
flag      *   disable-new-dtags enable-new-dtags discard-all discard-locals discard-none
flag      -   x X q
value     *   dynamic-linker
flag      *   no-dynamic-linker
value     *   dynamic-list                          reads
flag      -   E
letter    -   e
value     *   entry
flag      *   EB EL
flag      *   eh-frame-hdr no-eh-frame-hdr emit-relocs
flag      --  enable-non-contiguous-regions
flag      *   end-group start-group                 role=group
flag      *   end-lib                               role=end-lib
flag      *   start-lib                             role=start-lib
value     --  error-handling-script
value     --  error-limit                           role=error-limit
flag      *   error-unresolved-symbols warn-unresolved-symbols
value     *   exclude-libs
flag      --  execute-only no-execute-only
flag      *   export-dynamic no-export-dynamic
value     --  export-dynamic-symbol
value     --  export-dynamic-symbol-list            reads
separate  -   F
value     *   filter
flag      --  fat-lto-objects                       role=fat-lto-objects probe=fat-lto-objects
flag      --  no-fat-lto-objects                    role=no-fat-lto-objects probe=fat-lto-objects
flag      *   fatal-warnings                        role=fatal-warnings
flag      *   no-fatal-warnings                     role=no-fatal-warnings
value     *   fini init
flag      *   fix-cortex-a53-843419 fix-cortex-a8
flag      --  force-group-allocation
flag      --  fortran-common no-fortran-common
flag      *   gc-sections no-gc-sections
flag      --  gdb-index no-gdb-index gnu-unique no-gnu-unique
letter    -   G
value     *   hash-style
letter    -   h
value     *   soname
flag      *   help version verbose
flag      -   v V
flag      *   icf=all icf=safe icf=none
flag      --  ignore-data-address-equality ignore-function-address-equality
value     --  image-base
value     --  in-implib                             reads
value     --  out-implib                            writes
value     --  irpgo-profile                         reads
value     *   just-symbols                          reads
value     *   keep-unique
letter    -   l                                     role=library
value     *   library                               role=library
letter    -   L                                     role=library-path
value     *   library-path                          role=library-path
value     --  load-pass-plugin                      unsupported
joined    --  lto
joined    --  lto-aa-pipeline                       unsupported
flag      --  lto-basic-block-address-map no-lto-basic-block-address-map
joined    --  lto-basic-block-sections              unsupported
prefix    --  lto-CGO                               unsupported
joined    --  lto-cs-profile-file                   unsupported
flag      --  lto-cs-profile-generate               unsupported
flag      --  lto-debug-pass-manager
flag      --  lto-emit-asm                          unsupported
flag      --  lto-emit-llvm                         unsupported
value     --  lto-known-safe-vtables
flag      --  lto-legacy-pass-manager no-lto-legacy-pass-manager
joined    --  lto-newpm-passes                      unsupported
prefix    --  lto-O                                 role=lto-O
joined    --  lto-obj-path                          unsupported writes
joined    --  lto-partitions                        role=lto-partitions
flag      --  lto-pgo-warn-mismatch no-lto-pgo-warn-mismatch
joined    --  lto-sample-profile                    reads role=sample-profile
flag      --  lto-unique-basic-block-section-names no-lto-unique-basic-block-section-names
flag      --  lto-validate-all-vtables-have-type-infos no-lto-validate-all-vtables-have-type-infos
flag      --  lto-whole-program-visibility no-lto-whole-program-visibility
flag      -   M
flag      *   print-map print-memory-usage
letter    -   m                                     role=emulation
value     *   Map                                   writes=stored
flag      *   merge-exidx-entries no-merge-exidx-entries
value     *   mips-got-size
value     *   mllvm                                 role=mllvm
flag      --  mmap-output-file no-mmap-output-file
flag      -   N n
flag      *   nmagic no-nmagic no-omagic noinhibit-exec no-undefined no-warn-mismatch pic-veneer
flag      *   nostdlib                              role=nostdlib
flag      --  omagic
flag      --  optimize-bb-jumps no-optimize-bb-jumps
flag      --  no-warnings                           role=no-warnings
flag      -   w                                     role=no-warnings
flag      *   long-plt no-copy-dt-needed-entries no-ctors-in-init-array no-keep-memory secure-plt
flag      *   sort-common stats warn-execstack warn-once warn-shared-textrel
flag      --  no-add-needed
letter    -   o                                     role=output
value     --  output                                role=output
letter    -   O
value     --  oformat
separate  --  opt-remarks-filename                  writes role=remarks-file
separate  --  opt-remarks-format                    role=remarks-format
separate  --  opt-remarks-passes                    role=remarks-passes
value     --  opt-remarks-hotness-threshold         unsupported
flag      --  opt-remarks-with-hotness              unsupported
value     *   orphan-handling
value     --  pack-dyn-relocs
joined    --  package-metadata
flag      --  pcrel-optimize no-pcrel-optimize toc-optimize no-toc-optimize
flag      *   pie pic-executable                    role=pie
flag      *   no-pie                                role=no-pie
value     *   plugin
value     *   plugin-opt                            role=plugin-opt
optional  --  power10-stubs
flag      --  no-power10-stubs
joined    *   print-archive-stats                   unsupported writes
optional  *   print-gc-sections                     unsupported
flag      *   print-icf-sections                    unsupported
flag      *   no-print-gc-sections no-print-icf-sections
value     *   print-symbol-order                    writes
flag      *   pop-state                             role=pop-state
flag      *   push-state                            role=push-state
flag      -   r                                     role=relocatable
flag      *   relocatable                           role=relocatable
letter    -   R
value     *   rpath
separate  *   rpath-link
joined    *   rpath-link
joined    --  randomize-section-padding
flag      --  relax no-relax relax-gp no-relax-gp
value     --  remap-inputs
joined    --  remap-inputs-file                     reads
value     --  reproduce                             unsupported writes
value     *   retain-symbols-file                   reads
flag      --  rosegment no-rosegment xosegment no-xosegment
value     --  rsp-quoting
flag      -   S s
flag      -   t                                     unsupported
optional  *   save-temps                            unsupported writes
letter    -   T                                     reads role=script
value     *   script                                reads role=script
value     *   section-start
value     --  shuffle-sections
value     *   sort-section
value     *   split-stack-adjust-size
flag      *   strip-all strip-debug
value     --  symbol-ordering-file                  reads role=section-order
value     *   sysroot                               role=sysroot
flag      *   target1-abs target1-rel
value     *   target2
value     *   Tbss Tdata Ttext
separate  *   Ttext-segment
joined    *   Ttext-segment
joined    --  thinlto-cache-dir
value     --  thinlto-cache-policy
joined    --  thinlto-distributor thinlto-distributor-arg split probe=thinlto-distributor
joined    --  thinlto-remote-compiler thinlto-remote-compiler-arg thinlto-remote-compiler-prepend-arg
flag      --  thinlto-emit-imports-files            writes
flag      --  thinlto-emit-index-files              split probe=thinlto-emit-index-files
optional  --  thinlto-index-only                    split
joined    --  thinlto-jobs
joined    --  thinlto-object-suffix-replace thinlto-prefix-replace
joined    --  thinlto-single-module                 unsupported
value     --  threads
optional  --  time-trace                            unsupported writes
value     *   time-trace-file                       unsupported writes
value     --  time-trace-granularity
flag      *   trace                                 unsupported
flag      *   unique undefined-version no-undefined-version
value     *   trace-symbol                          unsupported
letter    -   y                                     unsupported
letter    -   u
value     *   undefined
value     --  undefined-glob
value     *   unresolved-symbols
flag      --  use-android-relr-tags no-use-android-relr-tags
flag      --  verbose-bp-section-orderer vs-diagnostics
value     *   version-script                        reads
flag      --  warn-backrefs no-warn-backrefs
value     --  warn-backrefs-exclude
flag      *   warn-common no-warn-common
flag      --  warn-ifunc-textrel no-warn-ifunc-textrel warn-symbol-ordering no-warn-symbol-ordering
flag      *   whole-archive                         role=whole-archive
flag      *   no-whole-archive                      role=no-whole-archive
joined    --  why-extract                           unsupported writes
value     --  why-live                              unsupported
value     *   wrap
letter    -   z
"""

# The values of -plugin-opt (LLVMgold's spelling, which clang passes to every linker), by
# prefix, longest first: what each means for the backend compiles.
PLUGIN_OPTS = """
O                       lto-O
mcpu=                   cpu
mattr=                  attrs
sample-profile=         sample-profile
-fresolution=           ignored
-pass-through=          ignored
-                       mllvm
jobs=                   ignored
thinlto                 ignored
cache-dir=              ignored
cache-policy=           ignored
LLVMgold                ignored
pass-through=           ignored
thinlto-index-only      split
thinlto-emit-imports-files unsupported
thinlto-prefix-replace  unsupported
thinlto-object-suffix-replace unsupported
emit-asm                unsupported
emit-llvm               unsupported
obj-path                unsupported
save-temps              unsupported
dwo_dir=                dwo-dir
cs-profile              unsupported
opt-remarks-filename=   remarks-file
opt-remarks-format=     remarks-format
opt-remarks-passes=     remarks-passes
opt-remarks             unsupported
lto-partitions          unsupported
stats-file              unsupported
time-trace              unsupported
legacy-pass-manager     unsupported
new-pass-manager        unsupported
debug-pass-manager      unsupported
disable-verify          unsupported
"""


@dataclass(frozen=True)
class Option:
    """One row of the option table: an option's spellings, how it takes a value, what it does."""

    names: tuple[str, ...]  # spellings without dashes, canonical first
    kind: str
    dashes: str  # "-", "--" or "*"
    reads: bool = False
    writes: bool = False
    stored: bool = False  # `writes=stored`: the link memo stores the file it writes
    varies: str | None = None  # with this value the output is new on every link
    role: str | None = None
    refused: Reason | None = None  # the link runs unchanged
    probe: str | None = None  # the toolchain.LLD_PROBES feature an ld.lld must take for this option

    @property
    def name(self) -> str:
        return self.names[0]

    def accepts(self, dashes: str) -> bool:
        return self.dashes == "*" or self.dashes == dashes


# A row's words past its kind and dashes that are not spellings: its marks, and key=value attributes.
_MARKS = frozenset(["reads", "writes", "writes=stored", "split", "unsupported"])
_ATTRIBUTES = frozenset(["role", "varies", "probe"])


def _rows(text: str) -> list[Option]:
    rows = []
    for line in text.strip().splitlines():
        kind, dashes, *rest = line.split()
        names = []
        attributes: dict[str, str] = {}
        for w in rest:
            if w in _MARKS:
                continue
            key, eq, value = w.partition("=")
            if eq and key in _ATTRIBUTES:
                attributes.setdefault(key, value)  # the first of a key counts
            else:
                names.append(w)
        refused = Reason.ALREADY_SPLIT if "split" in rest else Reason.UNSUPPORTED_OPTION if "unsupported" in rest else None
        rows.append(Option(tuple(names), kind, dashes, "reads" in rest, "writes" in rest or "writes=stored" in rest,
                           "writes=stored" in rest, attributes.get("varies"), attributes.get("role"), refused,
                           attributes.get("probe")))
    return rows


OPTIONS: tuple[Option, ...] = tuple(_rows(TABLE))
# Spelling -> its rows (one spelling may be both `separate` and `joined`: -rpath-link).
BY_NAME: dict[str, list[Option]] = {}
for _option in OPTIONS:
    for _name in _option.names:
        BY_NAME.setdefault(_name, []).append(_option)
LETTERS = {o.name: o for o in OPTIONS if o.kind == "letter"}
PREFIXES = sorted((o for o in OPTIONS if o.kind == "prefix"), key=lambda o: -len(o.name))
PLUGIN_OPT_MEANINGS: tuple[tuple[str, str], ...] = tuple(
    sorted(((p, m) for p, m in (line.split() for line in PLUGIN_OPTS.strip().splitlines())), key=lambda pm: -len(pm[0])))


@dataclass(frozen=True)
class Match:
    """One option as it appears on a command line."""

    option: Option | None  # None: not in the table (taken as a flag)
    name: str
    value: str | None  # the joined value, if any
    takes_next: bool  # the value is the next token


def match(token: str) -> Match:
    """Read one option token as lld does: a known name first, then a letter with its value joined."""
    dashes = "--" if token.startswith("--") else "-"
    body = token[len(dashes) :]
    name, eq, value = body.partition("=")
    for option in BY_NAME.get(body if body in BY_NAME else name, []):
        if not option.accepts(dashes):
            continue
        if body in BY_NAME:  # a flag spelled with '=' (icf=all), or a name without a value
            if option.kind in ("flag", "optional"):
                return Match(option, body, None, False)
            if option.kind in ("value", "separate"):
                return Match(option, body, None, True)
            if option.kind == "joined":  # lld wants `=value`; known, so a refused one is still refused
                return Match(option, body, None, False)
            continue
        if option.kind in ("value", "joined", "optional"):
            return Match(option, name, value, False)
    for option in PREFIXES:
        if body.startswith(option.name) and option.accepts(dashes):
            return Match(option, option.name, body[len(option.name) :], False)
    letter = LETTERS.get(body[:1])
    if letter is not None and dashes == "-":
        # `-o` with the value next; a joined value keeps a sysroot-relative '=': -L=/dir.
        return Match(letter, letter.name, body[1:] or None, not body[1:])
    return Match(None, name, value if eq else None, False)


def plugin_opt_meaning(value: str) -> str | None:
    """What -plugin-opt=<value> means (None: an LLVMgold option lld does not know)."""
    for prefix, meaning in PLUGIN_OPT_MEANINGS:
        if value.startswith(prefix):
            return meaning
    return None
