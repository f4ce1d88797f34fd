# Sourced by tests/test_soundness.py before each case script: the defaults and small helpers.
# A case overrides what it needs; see docs/layout.md, "The differential harness".
#
# The runner gives every step: CC / CXX (ltowrap-clang / ltowrap-clang++), LLVM_BIN (the real
# toolchain's bin directory, first on PATH), LTOWRAP_CACHE_DIR and LTOWRAP_LOG; the current
# directory is the case's tree, at the same path for every build (cold builds included).
# Each step is its own `bash -eu` process: an environment change the build must see
# lives in a file of the tree that `build` sources (the tree is what is copied).

OUTPUTS="prog"      # files the warm and the cold build must agree on, byte for byte
MODES="memo nomemo" # memo: LTOWRAP_MEMO on (the direct lane and the memo); nomemo: LTOWRAP_MEMO=0
LLVM="22"           # LLVM versions (/usr/lib/llvm-N) the case runs under
NEEDS=""            # commands, or /absolute/paths, the case needs beyond the toolchain (missing: skip; under CI=true, fail)
CFLAGS="-O2 -flto=thin"

# Compile each C source to ThinLTO bitcode through ltowrap (its option record in the same cache).
cc_c() { local f; for f; do $CC $CFLAGS -c "$f"; done; }

# The two-module program of ../shared/tools/stale-cases.sh: main in a.c calls work() in b.c.
two_modules() {
  printf '#include <stdio.h>\nint work(int);\nint main(int c,char**v){printf("%%d\\n",work(c));return 0;}\n' > a.c
  printf 'int work(int x){int s=0;for(int i=0;i<1000;i++)s+=(i*x)^(s>>3);return s;}\n' > b.c
}

# A C++ program with virtual calls across modules (WPD and CFI work on them): s.h, a.cc, b.cc
# (Square's and Circle's methods, make()) and m.cc (main, through a Shape*).
shapes_cxx() {
  cat > s.h <<'H'
struct Shape { virtual ~Shape(); virtual int sides() const = 0; virtual int id() const; };
struct Square : Shape { int sides() const override; };
struct Circle : Shape { int sides() const override; int id() const override; };
Shape *make(int k);
H
  printf '#include "s.h"\nShape::~Shape() {}\nint Shape::id() const { return 1; }\nint Square::sides() const { return 4; }\n' > a.cc
  printf '#include "s.h"\nint Circle::sides() const { return 0; }\nint Circle::id() const { return 2; }\nShape *make(int k) { if (k) return new Square; return new Circle; }\n' > b.cc
  printf '#include "s.h"\n#include <cstdio>\nint main(int c, char **) { Shape *s = make(c); std::printf("%%d %%d\\n", s->sides(), s->id()); delete s; }\n' > m.cc
}

# A native shared library (no LTO, not through ltowrap): lib_so OUT SOURCE [extra flags].
lib_so() { local out=$1 src=$2; shift 2; clang -shared -fPIC -fuse-ld=lld "$@" "$src" -o "$out"; }

# A private copy of the toolchain's driver in DIR/bin (its own config files go beside it),
# with the LLVM libraries and lld reached through symlinks.
private_toolchain() {
  mkdir -p "$1/bin"
  cp "$LLVM_BIN/clang" "$1/bin/clang"
  ln -s clang "$1/bin/clang++"
  ln -s "$LLVM_BIN/../lib" "$1/lib"
  ln -s "$LLVM_BIN/lld" "$1/bin/ld.lld"
}
