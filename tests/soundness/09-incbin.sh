# stale-cases.sh 9 (memo mode) and 10 (nomemo mode): a file that module asm .incbin's changes.
# The backend assembles the module asm again and reads it (lld's own cache misses it too:
# ClangBuiltLinux #2021); it must exist when the module is compiled too.
# Today: STALE in both modes (memo: the manifest lacks data.txt; nomemo: the backend key lacks it).
LLVM="22 14"
setup() {
  cat > i.c <<'X'
#include <stdio.h>
extern const char blob[]; extern const char blob_end[];
__asm__(".section .rodata\n.global blob\nblob:\n.incbin \"data.txt\"\n.global blob_end\nblob_end:\n.byte 0\n.text\n");
int main(void){ printf("%.*s", (int)(blob_end-blob), blob); return 0; }
X
  two_modules; echo "version one" > data.txt
}
build() { cc_c i.c b.c; $CC -O2 -flto=thin -fuse-ld=lld i.o b.o -o prog; }
change() { echo "version two" > data.txt; }
