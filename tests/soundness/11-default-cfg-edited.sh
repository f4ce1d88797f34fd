# The default config file beside a private driver copy (clang.cfg), with a linker flag,
# edited in place: same inode, same directory (its mtime does not move).
# Today: STALE in both modes (memo: the direct lane; nomemo: the driver-line cache; both trust the driver
# directory's stat identity).
setup() { two_modules; private_toolchain tc; echo '-Wl,-z,norelro' > tc/bin/clang.cfg; }
build() { export LTOWRAP_CLANG=$PWD/tc/bin/clang; cc_c a.c b.c; $CC -O2 -flto=thin -fuse-ld=lld a.o b.o -o prog; }
change() { echo '-Wl,-z,relro' > tc/bin/clang.cfg; }
