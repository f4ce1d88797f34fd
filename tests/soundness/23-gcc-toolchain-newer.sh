# --gcc-toolchain=X: a newer gcc version appears under another spelling of the triple
# (X/lib/gcc/x86_64-pc-linux-gnu/13 beside X/lib/gcc/x86_64-linux-gnu/12), and the driver
# takes its crt files and libgcc instead.
# Today: STALE in both modes (the driver line is rechecked by the directories it named, not X/lib/gcc).
G=/usr/lib/gcc/x86_64-linux-gnu/12
NEEDS="llvm-objcopy $G/crtbeginS.o"
setup() {
  two_modules; mkdir -p gcc/lib/gcc/x86_64-linux-gnu/12
  cp $G/crt*.o $G/libgcc* gcc/lib/gcc/x86_64-linux-gnu/12/  # what a C link takes from gcc
}
build() { cc_c a.c b.c; $CC --gcc-toolchain=$PWD/gcc -O2 -flto=thin -fuse-ld=lld a.o b.o -o prog; }
change() {
  mkdir -p gcc/lib/gcc/x86_64-pc-linux-gnu && cp -r gcc/lib/gcc/x86_64-linux-gnu/12 gcc/lib/gcc/x86_64-pc-linux-gnu/13
  echo hi > n.txt; llvm-objcopy --add-section .mine=n.txt $G/crtbeginS.o gcc/lib/gcc/x86_64-pc-linux-gnu/13/crtbeginS.o
}
