# A C++ link (clang++) and the clang++.cfg beside a private driver copy, edited in place.
# Today: STALE in both modes (memo: the direct lane; nomemo: the driver-line cache).
setup() {
  printf '#include <cstdio>\nint work(int);\nint main(int c,char**){std::printf("%%d\\n",work(c));}\n' > a.cc
  printf 'int work(int x){int s=0;for(int i=0;i<1000;i++)s+=(i*x)^(s>>3);return s;}\n' > b.cc
  private_toolchain tc; echo '-Wl,-z,norelro' > tc/bin/clang++.cfg
}
build() {
  export LTOWRAP_CLANG=$PWD/tc/bin/clang
  $CXX $CFLAGS -c a.cc; $CXX $CFLAGS -c b.cc; $CXX -O2 -flto=thin -fuse-ld=lld a.o b.o -o prog
}
change() { echo '-Wl,-z,relro' > tc/bin/clang++.cfg; }
