# COMPILER_PATH names a directory where the driver looks for crt files first (as -B); one appears.
# Today: STALE in both modes (the driver line is rechecked by the files it named, not the places searched before them).
NEEDS="llvm-objcopy /lib/x86_64-linux-gnu/crti.o"
setup() { two_modules; mkdir crt; echo 'export COMPILER_PATH=$PWD/crt' > build.env; }
build() { . ./build.env; cc_c a.c b.c; $CC -O2 -flto=thin -fuse-ld=lld a.o b.o -o prog; }
change() { echo hi > n.txt; llvm-objcopy --add-section .mine=n.txt /lib/x86_64-linux-gnu/crti.o crt/crti.o; }
