# C++ with whole-program devirtualization and CFI (split LTO units), where only a codegen
# flag of one module changes (-mrelax-all dropped): the bitcode is the same, so the thin-link
# hits and the changed module's backend does not. The thin-link's object of regular-LTO code
# (vtables, jump tables) must then come from the entry, byte for byte: an entry without it
# made the warm final link fail, and the link fall back to in-process ThinLTO.
CFLAGS="-O2 -flto=thin -fvisibility=hidden -fwhole-program-vtables -fsanitize=cfi"
LLVM="22 14"
setup() {
  shapes_cxx
  echo '-mrelax-all' > b.flags
}
build() {
  $CXX $CFLAGS -c a.cc; $CXX $CFLAGS $(cat b.flags) -c b.cc; $CXX $CFLAGS -c m.cc
  $CXX $CFLAGS -fuse-ld=lld a.o b.o m.o -o prog
  ./prog
}
change() { : > b.flags; }
