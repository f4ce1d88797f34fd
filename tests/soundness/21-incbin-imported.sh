# .incbin in a function's inline asm in module b, a function small enough that the thin-link
# imports it into module a, whose backend then assembles it (and reads data.txt) too.
# Today: STALE in both modes (memo: the manifest lacks data.txt; nomemo: no backend key has it).
setup() {
  cat > a.c <<'X'
#include <stdio.h>
const char *blob(void);
int main(void){ puts(blob()); return 0; }
X
  cat > b.c <<'X'
const char *blob(void) {
  const char *p;
  __asm__(".pushsection .rodata.blob,\"a\"\n0: .incbin \"data.txt\"\n.byte 0\n.popsection\nlea 0b(%%rip), %0" : "=r"(p));
  return p;
}
X
  echo "version one" > data.txt
}
build() { cc_c a.c b.c; $CC -O2 -flto=thin -fuse-ld=lld a.o b.o -o prog; }
change() { echo "version two" > data.txt; }
