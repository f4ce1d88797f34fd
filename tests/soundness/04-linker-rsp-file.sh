# stale-cases.sh 4: a linker response file passed through the driver (-Wl,@opts.rsp).
# Today: STALE in memo mode (the direct lane does not see through -Wl,@file).
setup() { two_modules; echo '-z norelro' > opts.rsp; }
build() { cc_c a.c b.c; $CC -O2 -flto=thin -fuse-ld=lld -Wl,@opts.rsp a.o b.o -o prog; }
change() { echo '-z relro' > opts.rsp; }
