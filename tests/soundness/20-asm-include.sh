# Module asm that .include's a file (the backend assembles it again and reads it); the file changes.
# Today: STALE in both modes (memo: the manifest lacks x.s; nomemo: the backend key lacks it).
setup() {
  cat > i.c <<'X'
#include <stdio.h>
extern const char blob[];
__asm__(".include \"x.s\"");
int main(void){ puts(blob); return 0; }
X
  two_modules; printf '.section .rodata\n.globl blob\nblob: .asciz "one"\n.text\n' > x.s
}
build() { cc_c i.c b.c; $CC -O2 -flto=thin -fuse-ld=lld i.o b.o -o prog; }
change() { printf '.section .rodata\n.globl blob\nblob: .asciz "two"\n.text\n' > x.s; }
