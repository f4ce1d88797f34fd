# A linker script given as an input adds SEARCH_DIRs and asks for -lbaz: a libbaz appears
# in the first of them. lld searches a script's -l when it reads it, in the -L directories
# and then the SEARCH_DIRs, so only the script says where to look.
# Today: STALE in memo mode (only the command line's -l searches are rechecked).
setup() {
  two_modules; mkdir d1 d2
  echo 'int work(int x){return 2;}' > z2.c; lib_so d2/libbaz.so z2.c -Wl,-soname,libbaz-two.so
  echo 'SEARCH_DIR(d1) SEARCH_DIR(d2) INPUT(-lbaz)' > deps.ld
}
build() { cc_c a.c; $CC -O2 -flto=thin -fuse-ld=lld a.o deps.ld -o prog; }
change() { echo 'int work(int x){return 1;}' > z1.c; lib_so d1/libbaz.so z1.c -Wl,-soname,libbaz-one.so; }
