"""Which recorded compile options a module's backend compile is given again: one table.

A ThinLTO compile's command line is recorded (optrecords.py). The module's backend compile,
`clang -c -x ir M -fthinlto-index=M.thinlto.bc`, gets back the part of it that still means
something once the source is bitcode. Each row of TABLE decides a family of options, says
why, and names the evidence tests/test_backendopts.py checks against the real clang:

- keep `codegen`: clang 22, and 14 where it knows the option, accepts the example on a
  backend command line without calling it unused.
- drop `rejected`: the backend command line with the example fails (clang exits non-zero).
- drop `unused`: clang says the example is unused ("argument unused during compilation").
- drop `same`: a module compiled with the example (and the flags after `;`) gives a
  byte-identical backend object with and without it: what it does is in the bitcode.
- drop `link`: clang turns the example, given to a ThinLTO link, into a link option: the
  link decides, for in-process ThinLTO and for ltowrap (backend.forced_options, or lldopts
  runs the link unchanged).
- drop `no-object`: with the example the backend writes no object (bitcode, or 0 bytes).

A row is `action | options | evidence | example[; compile flags the example needs] | why`; a
line that starts with a space continues the row above.
An option ending in `*` is a prefix, any other matches the whole argument (as
driverargs.walk yields it: `-D` for `-DX`); the longest match decides. An option that takes
the next argument (driverargs.TAKES_ARG) keeps or loses it with itself. `{file}` in an
example stands for a file the test creates.

Read at link time, by optrecords.load (a compile only writes records): standard library only.
"""

from __future__ import annotations

from .driverargs import TAKES_ARG, walk

TABLE = """
keep | -O*                          | codegen   | -O1
     | the backend's optimisation level: a module built -O1 stays -O1 after the link's --lto-O
keep | -g*                          | codegen   | -gdwarf-4
     | the debug info the backend writes (its kind, DWARF version, compression)
drop | -gsplit-dwarf* -gno-split-dwarf | link   | -gsplit-dwarf
     | in-process ThinLTO splits DWARF only where the link says (-plugin-opt=dwo_dir=), and then under
       the names lld gives (backend.split_dwarf_options); else full DWARF in the object
keep | -m*                          | codegen   | -mno-red-zone | target options: CPU, features, code model, ABI
keep | -mllvm                       | codegen   | -mllvm -x86-asm-syntax=intel
     | LLVM's own options, for the backend's passes as for the compile's
keep | -target --target --target=*  | codegen   | --target=x86_64-pc-linux-gnu
     | the module's target (the bitcode has it too; without it clang warns it overrides it)
keep | -f*                          | codegen   | -fno-unroll-loops
     | code generation (sections, PIC, alignment, unrolling, vectorisation, frame pointers, stack protector, ...),
       unless a row below says otherwise
drop | -flto*                       | no-object | -flto=thin
     | the backend compile is the LTO: with -flto it writes bitcode again
drop | -fno-lto                     | same      | -fno-lto; -flto=thin | says only whether the compile writes bitcode
drop | -fthinlto*                   | no-object | -fthinlto-index=elsewhere.thinlto.bc
     | a second index replaces this link's shard (here one that is not there: clang exits 0 and writes 0 bytes)
drop | -fthin-link-bitcode=*        | same      | -fthin-link-bitcode={file}
     | a second, summary-only bitcode file the compile writes for a thin-link
drop | -ffat-lto-objects -fno-fat-lto-objects | same | -fno-fat-lto-objects
     | how the compile packs its bitcode (plan.py reads a FatLTO object's .llvm.lto section)
drop | -funified-lto -fno-unified-lto | unused   | -funified-lto | how the compile writes its bitcode
drop | -fembed-bitcode*             | rejected  | -fembed-bitcode
     | the driver refuses it with the link's -ffunction-sections; embedding bitcode is the compile's business
drop | -fwhole-program-vtables      | rejected  | -fwhole-program-vtables
     | the driver allows it only with -flto; whole-program devirtualization is decided by the thin-link and reaches the
       backend in its shard
drop | -fno-whole-program-vtables   | same      | -fno-whole-program-vtables
     | as above: the shard carries what the thin-link decided
drop | -fvirtual-function-elimination | rejected | -fvirtual-function-elimination; -flto=full
     | the driver allows it only with -flto=full (regular LTO's dead virtual function removal)
drop | -fno-virtual-function-elimination | same | -fno-virtual-function-elimination | as above
drop | -fsplit-lto-unit -fno-split-lto-unit | same | -fsplit-lto-unit
     | how the compile writes its bitcode: a split file holds the ThinLTO and the regular-LTO half already
drop | -fforce-emit-vtables -fno-force-emit-vtables | same | -fforce-emit-vtables
     | which vtables the front end emits: they are in the bitcode
drop | -fstrict-vtable-pointers -fno-strict-vtable-pointers | same | -fstrict-vtable-pointers
     | the front end's invariant.group marks: in the bitcode
drop | -fvisibility* -fno-visibility* | same      | -fvisibility=hidden
     | symbol visibility is the front end's: in the bitcode (and what WPD and CFI rely on)
drop | -fsanitize=cfi*              | rejected  | -fsanitize=cfi; -fvisibility=hidden
     | the driver allows CFI only with -flto; its checks are llvm.type.test calls in the bitcode, which the backend
       lowers from its shard (the jump tables are the thin-link's)
drop | -fsanitize=*                 | same      | -fsanitize=address
     | sanitizer instrumentation runs at the compile: it is in the bitcode (the runtime is the link's)
drop | -fno-sanitize=*              | same      | -fno-sanitize=address; -fsanitize=address,undefined | as above
drop | -fsanitize-trap* -fno-sanitize-trap* | same | -fsanitize-trap=cfi; -fsanitize=cfi -fvisibility=hidden
     | trap or handler call is chosen by the front end: in the bitcode
drop | -fsanitize-recover* -fno-sanitize-recover* | same | -fsanitize-recover=address; -fsanitize=address
     | the front end's choice of handler: in the bitcode
drop | -fsanitize-cfi-cross-dso -fno-sanitize-cfi-cross-dso | same | -fsanitize-cfi-cross-dso; -fsanitize=cfi -fvisibility=hidden
     | cross-DSO CFI's checks and __cfi_check are the compile's and the thin-link's (the runtime is the link's)
drop | -fsanitize-cfi-* -fno-sanitize-cfi-* | unused | -fsanitize-cfi-icall-generalize-pointers
     | front-end CFI variants: the type ids they choose are in the bitcode
drop | -fsanitize-coverage* -fno-sanitize-coverage* | same | -fsanitize-coverage=trace-pc-guard
     | coverage instrumentation runs at the compile: in the bitcode
drop | -fsanitize-ignorelist=* -fsanitize-blacklist=* -fsanitize-system-ignorelist=* -fno-sanitize-ignorelist -fno-sanitize-blacklist | same | -fsanitize-ignorelist={file}; -fsanitize=address
     | what the compile did not instrument: in the bitcode
drop | -fsanitize* -fno-sanitize*   | unused    | -fsanitize-address-use-after-scope
     | the other sanitizer options (address-, memory-, thread-, hwaddress-, kcfi-, ...): the front end's
       instrumentation or the link's runtime
drop | -fexperimental-sanitize-metadata* -fno-experimental-sanitize-metadata* | same | -fexperimental-sanitize-metadata=atomics
     | the metadata is written at the compile: in the bitcode
drop | -fcs-profile-generate*       | link      | -fcs-profile-generate
     | context-sensitive instrumentation runs in the backend only when the link asks (-plugin-opt=cs-profile-generate:
       lldopts runs such links unchanged)
drop | -fprofile-use* -fprofile-instr-use* | link | -fprofile-use={file}
     | profile use runs at the compile (in the bitcode); the backend's context-sensitive use is the link's (-plugin-
       opt=cs-profile-path=)
drop | -fprofile-sample-use=*       | link      | -fprofile-sample-use={file}
     | the link's sample profile (-plugin-opt=sample-profile=) is what in-process ThinLTO uses; backend.forced_options
       passes it
drop | -fprofile-sample-accurate -fno-profile-sample-accurate | same | -fprofile-sample-accurate
     | a function attribute the front end sets: in the bitcode
drop | -fprofile* -fno-profile*     | same      | -fprofile-instr-generate
     | instrumentation and its settings are applied at the compile: in the bitcode
drop | -ftest-coverage -fno-test-coverage --coverage -fcoverage-compilation-dir=* | same | --coverage
     | gcov instrumentation runs at the compile: in the bitcode
drop | -fcoverage* -fno-coverage*   | rejected  | -fcoverage-mapping; -fprofile-instr-generate
     | the driver allows coverage mapping only with -fprofile-instr-generate (dropped too); the mapping is in the
       bitcode
drop | -ftemporal-profile           | rejected  | -ftemporal-profile; -fprofile-generate
     | the driver allows it only with -fprofile-generate (dropped too)
drop | -fpseudo-probe-for-profiling -fno-pseudo-probe-for-profiling | same | -fpseudo-probe-for-profiling
     | the probes are inserted at the compile: in the bitcode
drop | -fsave-optimization-record*  | link      | -fsave-optimization-record
     | the link writes the backend's remarks (-plugin-opt=opt-remarks-filename=)
drop | -fuse-ld=*                   | unused    | -fuse-ld=lld | a linker option
drop | -fexceptions -fno-exceptions -fcxx-exceptions -fno-cxx-exceptions | same | -fno-exceptions
     | the front end's: invokes, landing pads and nounwind are in the bitcode
drop | -frtti -fno-rtti             | same      | -fno-rtti | the front end's: type_info objects are in the bitcode
drop | -fmacro-prefix-map=*         | unused    | -fmacro-prefix-map=/a=/b | the preprocessor's
drop | -fcolor-diagnostics -fno-color-diagnostics -fdiagnostics* -fmessage-length* | same | -fdiagnostics-show-option
     | how clang prints diagnostics
drop | -fmodules* -fno-modules* -fimplicit-modules -fcxx-modules -fpch* | same | -fmodules
     | C++/Clang modules and precompiled headers are the front end's
drop | -finput-charset=* -fexec-charset=* | same | -finput-charset=UTF-8 | source character sets are the front end's
drop | -fsyntax-only -fdriver-only  | no-object | -fsyntax-only | would stop before writing an object
drop | -D -U                        | same      | -DNAME=1 | macros are expanded before the bitcode
drop | -i* -I -cxx-isystem -nostdinc* | unused  | -isystem /usr/include
     | header search: the headers are in the bitcode
drop | -M* -Wp,*                    | unused    | -MD | dependency output of the preprocessor
drop | -W*                          | same      | -Wall | warnings are the front end's (the backend's -W are its own)
drop | -Wl,* -Xlinker -L -l -u -T -z -e | unused | -Wl,-x | linker options
drop | -Wa,* -Xassembler            | same      | -Wa,--noexecstack
     | in-process ThinLTO gives the backend no assembler options either
drop | -Xclang -Xpreprocessor       | same      | -Xclang -fno-lto-unit | front-end (cc1) options
drop | -std=*                       | same      | -std=c++17 | the language standard is the front end's
drop | *                            | same      | -pthread
     | not a codegen option: driver, language, preprocessor and output options (-c, -o, -x, --sysroot, ...)
"""

ACTIONS = ("keep", "drop")
EVIDENCE = ("codegen", "rejected", "unused", "same", "link", "no-object")


class Row:
    __slots__ = ("action", "options", "evidence", "example", "compile_with", "why")

    def __init__(self, line: str) -> None:
        action, options, evidence, example, why = (field.strip() for field in line.split("|"))
        example, _, compile_with = example.partition(";")
        self.action, self.options, self.evidence, self.why = action, tuple(options.split()), evidence, why
        self.example, self.compile_with = example.split(), compile_with.split()

    @property
    def keep(self) -> bool:
        return self.action == "keep"

    def __repr__(self) -> str:
        return f"Row({self.action} {' '.join(self.options)})"


def _rows(text: str) -> list[str]:
    rows: list[str] = []
    for line in text.strip().splitlines():
        if line[:1].isspace():  # `     | why` starts the row's last field, `       more` goes on with it
            rows[-1] += " " + line.strip()
        else:
            rows.append(line)
    return rows


ROWS: tuple[Row, ...] = tuple(Row(line) for line in _rows(TABLE))
_EXACT = {o: r for r in ROWS for o in r.options if not o.endswith("*")}
_PREFIXES = sorted(((o[:-1], r) for r in ROWS for o in r.options if o.endswith("*")), key=lambda pr: -len(pr[0]))
# The prefixes an option can start with, by its first two characters (longest first, as in
# _PREFIXES): a compile line has some ninety options, and most are -D, -W, -f or -m ones.
_SHORT = tuple((p, r) for p, r in _PREFIXES if len(p) < 2)
_BY_HEAD = {head: tuple((p, r) for p, r in _PREFIXES if len(p) < 2 or p[:2] == head)
            for head in {p[:2] for p, _ in _PREFIXES if len(p) >= 2}}


def row(opt: str) -> Row:
    """The row that decides the option `opt` (an exact name first, else its longest prefix)."""
    exact = _EXACT.get(opt)
    if exact is not None:
        return exact
    return next(r for prefix, r in _BY_HEAD.get(opt[:2], _SHORT) if opt.startswith(prefix))  # "*" matches all


def codegen_options(args: list[str]) -> list[str]:
    """The part of a compile command that still means something to `clang -c -x ir`."""
    kept: list[str] = []
    for opt, value, is_input in walk(args):
        if is_input or not row(opt).keep:
            continue
        if opt in TAKES_ARG:
            if value is not None:
                kept += [opt, value]
        else:
            kept.append(opt)
    return kept
