# stale-cases.sh 3: a clang.cfg appearing beside the backend clang (a private toolchain copy
# chosen with LTOWRAP_CLANG); -mrelax-all changes only what the backend compiles emit.
# Today: STALE in both modes (memo: the compiler identity has no config file; nomemo: the backend key neither).
setup() { two_modules; private_toolchain tc; }
build() { export LTOWRAP_CLANG=$PWD/tc/bin/clang; cc_c a.c b.c; $CC -O2 -flto=thin -fuse-ld=lld a.o b.o -o prog; }
change() { echo -mrelax-all > tc/bin/clang.cfg; }
