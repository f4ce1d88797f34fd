# LIBRARY_PATH=d1:d2 (the driver turns it into -L): -lbaz was found in d2; one appears in d1.
# Today: passes (a regression test: the memo rechecks the -l search, the driver line the -L directories).
setup() {
  two_modules; mkdir d1 d2; echo 'export LIBRARY_PATH=$PWD/d1:$PWD/d2' > build.env
  echo 'int work(int x){return 2;}' > z2.c; lib_so d2/libbaz.so z2.c -Wl,-soname,libbaz-two.so
}
build() { . ./build.env; cc_c a.c; $CC -O2 -flto=thin -fuse-ld=lld a.o -lbaz -o prog; }
change() { echo 'int work(int x){return 1;}' > z1.c; lib_so d1/libbaz.so z1.c -Wl,-soname,libbaz-one.so; }
