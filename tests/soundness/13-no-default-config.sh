# CLANG_NO_DEFAULT_CONFIG=1 turns off a clang.cfg (here -mrelax-all, which only the backend
# compiles feel) beside a private driver copy.
# Today: STALE in both modes (memo: the memo's key has no environment; nomemo: nor has the backend key).
setup() { two_modules; private_toolchain tc; echo -mrelax-all > tc/bin/clang.cfg; : > build.env; }
build() {
  . ./build.env; export LTOWRAP_CLANG=$PWD/tc/bin/clang
  cc_c a.c b.c; $CC -O2 -flto=thin -fuse-ld=lld a.o b.o -o prog
}
change() { echo 'export CLANG_NO_DEFAULT_CONFIG=1' > build.env; }
