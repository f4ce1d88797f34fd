# A --config file that includes another (@inner.cfg, found beside it); the inner one is edited.
# Today: STALE in both modes (memo: the direct lane; nomemo: the driver-line cache).
setup() { two_modules; echo '@inner.cfg' > l.cfg; echo '-Wl,-z,norelro' > inner.cfg; }
build() { cc_c a.c b.c; $CC --config=./l.cfg -O2 -flto=thin -fuse-ld=lld a.o b.o -o prog; }
change() { echo '-Wl,-z,relro' > inner.cfg; }
