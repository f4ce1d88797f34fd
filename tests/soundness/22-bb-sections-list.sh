# A recorded compile option that makes the backend read a file: -fbasic-block-sections=list=FILE
# (the bitcode does not change; clang -x ir reads the list when it compiles the module).
# Today: STALE in both modes (memo: the manifest has the record, not the file it names; nomemo: the backend key).
setup() {
  printf '#include <stdio.h>\n__attribute__((noinline)) int f(int x){ if (x>3) { printf("big %%d\\n", x); return x*7; } return x-1; }\n' > f.c
  printf '#include <stdio.h>\nint f(int);\nint main(int c,char**v){printf("%%d\\n",f(c));return 0;}\n' > a.c
  printf '!f\n' > bb.txt
}
build() { cc_c a.c; $CC $CFLAGS -fbasic-block-sections=list=bb.txt -c f.c; $CC -O2 -flto=thin -fuse-ld=lld a.o f.o -o prog; }
change() { printf '!f\n!!0 2\n' > bb.txt; }
