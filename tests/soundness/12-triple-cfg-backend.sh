# <triple>-clang.cfg beside a private driver copy, edited in place to add an option only the
# backend compiles feel (-mrelax-all: the machine code, not the bitcode, not the link line).
# Today: STALE in both modes (memo: the memo's compiler identity; nomemo: the backend key).
setup() {
  two_modules; private_toolchain tc
  echo "# nothing yet" > "tc/bin/$(tc/bin/clang -print-target-triple)-clang.cfg"
}
build() { export LTOWRAP_CLANG=$PWD/tc/bin/clang; cc_c a.c b.c; $CC -O2 -flto=thin -fuse-ld=lld a.o b.o -o prog; }
change() { echo "-mrelax-all" > "tc/bin/$(tc/bin/clang -print-target-triple)-clang.cfg"; }
