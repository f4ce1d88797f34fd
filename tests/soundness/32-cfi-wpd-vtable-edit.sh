# C++ with whole-program devirtualization and CFI: every module is a split LTO unit, whose
# regular-LTO half (vtables, type metadata) the thin-link compiles into one object of its
# own. One virtual function's constant changes (virtual constant propagation stores it
# beside the vtable): the regular-LTO half of a.cc changes, and the shards of its callers.
# A thin-link hit must bring that object as the cold run makes it (thinlink.py keeps it in
# the entry); the warm link must not fall back, nor keep the old constant.
CFLAGS="-O2 -flto=thin -fvisibility=hidden -fwhole-program-vtables -fsanitize=cfi"
LLVM="22 14"
setup() {
  shapes_cxx
}
build() {
  for f in a b m; do $CXX $CFLAGS -c $f.cc; done
  $CXX $CFLAGS -fuse-ld=lld a.o b.o m.o -o prog
  ./prog
}
change() { sed -i 's/return 4;/return 5;/' a.cc; }
