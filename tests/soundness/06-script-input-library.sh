# stale-cases.sh 6: the library a linker script names (INPUT(libbar.so.1)) changes: it now
# calls back into the program, so the thin-link must keep and export hook().
# Today: STALE in both modes (the thin-link key hashes the script, not the files it names).
setup() {
  printf '#include <stdio.h>\nint hook(int x){return x*3+7;}\nint call_hook(int);\nint main(void){printf("%%d\\n",call_hook(5));return 0;}\n' > m.c
  echo 'INPUT(libbar.so.1)' > libbar.so
  echo 'int call_hook(int x){return x+1;}' > bar.c; lib_so libbar.so.1 bar.c
}
build() { cc_c m.c; $CC -O2 -flto=thin -fuse-ld=lld m.o -L. -lbar -Wl,-rpath,$PWD -Wl,--allow-shlib-undefined -o prog; }
change() { printf 'int hook(int);\nint call_hook(int x){return hook(x)+1;}\n' > bar.c; lib_so libbar.so.1 bar.c -Wl,--allow-shlib-undefined; }
