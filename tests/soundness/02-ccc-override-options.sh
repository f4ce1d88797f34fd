# stale-cases.sh 2: CCC_OVERRIDE_OPTIONS, which the driver and the backend clang both read.
# -mrelax-all changes only the backend's machine code (not the bitcode, not the link line).
# Today: STALE in both modes (memo: the memo's key has no environment; nomemo: nor has the backend key).
LLVM="22 14"
setup() { two_modules; : > build.env; }
build() { . ./build.env; cc_c a.c b.c; $CC -O2 -flto=thin -fuse-ld=lld a.o b.o -o prog; }
change() { echo 'export CCC_OVERRIDE_OPTIONS=+-mrelax-all' > build.env; }
