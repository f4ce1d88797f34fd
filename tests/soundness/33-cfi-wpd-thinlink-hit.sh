# C++ with whole-program devirtualization and CFI (split LTO units), where only a codegen
# flag of one module changes (-mrelax-all dropped): the bitcode is the same, so the thin-link
# hits and the changed module's backend does not. The thin-link's object of regular-LTO code
# (vtables, jump tables) must then come from the entry, byte for byte: an entry without it
# made the warm final link fail, and the link fall back to in-process ThinLTO.
CFLAGS="-O2 -flto=thin -fvisibility=hidden -fwhole-program-vtables -fsanitize=cfi"
LLVM="22 14"
setup() {
  cat > s.h <<'H'
struct Shape { virtual ~Shape(); virtual int sides() const = 0; virtual int id() const; };
struct Square : Shape { int sides() const override; };
struct Circle : Shape { int sides() const override; int id() const override; };
Shape *make(int k);
H
  printf '#include "s.h"\nShape::~Shape() {}\nint Shape::id() const { return 1; }\nint Square::sides() const { return 4; }\n' > a.cc
  printf '#include "s.h"\nint Circle::sides() const { return 0; }\nint Circle::id() const { return 2; }\nShape *make(int k) { if (k) return new Square; return new Circle; }\n' > b.cc
  printf '#include "s.h"\n#include <cstdio>\nint main(int c, char **) { Shape *s = make(c); std::printf("%%d %%d\\n", s->sides(), s->id()); delete s; }\n' > m.cc
  echo '-mrelax-all' > b.flags
}
build() {
  $CXX $CFLAGS -c a.cc; $CXX $CFLAGS $(cat b.flags) -c b.cc; $CXX $CFLAGS -c m.cc
  $CXX $CFLAGS -fuse-ld=lld a.o b.o m.o -o prog
  ./prog
}
change() { : > b.flags; }
