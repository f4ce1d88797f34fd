# stale-cases.sh 5: a -l inside a linker script (INPUT(-lbaz)): a library of that name
# appears in an earlier -L directory.
# Today: STALE in memo mode (only the command line's -l searches are rechecked; nomemo relinks, right).
setup() {
  two_modules; mkdir d1 d2
  echo 'int work(int x){return 2;}' > z2.c; lib_so d2/libbaz.so z2.c -Wl,-soname,libbaz-two.so
  echo 'INPUT(-lbaz)' > d2/libfoo.so
}
build() { cc_c a.c; $CC -O2 -flto=thin -fuse-ld=lld a.o -Ld1 -Ld2 -lfoo -o prog; }
change() { echo 'int work(int x){return 1;}' > z1.c; lib_so d1/libbaz.so z1.c -Wl,-soname,libbaz-one.so; }
