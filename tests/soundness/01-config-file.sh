# stale-cases.sh 1: the contents of a --config file (a linker flag in it).
# Today: STALE in both modes (memo: the direct lane; nomemo: the driver-line cache; neither keys the file's contents).
setup() { two_modules; echo '-Wl,-z,norelro' > l.cfg; }
build() { cc_c a.c b.c; $CC --config=./l.cfg -O2 -flto=thin -fuse-ld=lld a.o b.o -o prog; }
change() { echo '-Wl,-z,relro' > l.cfg; }
