# INPUT(libbar.so.1) in a script found through -L: lld looks beside the script first, then in
# the working directory. It was in the working directory; one appears beside the script, and
# it calls back into the program (so the thin-link must keep and export hook()).
# Today: STALE in both modes (memo: the manifest only hashes the file that was read; nomemo: the thin-link key).
setup() {
  printf '#include <stdio.h>\nint hook(int x){return x*3+7;}\nint call_hook(int);\nint main(void){printf("%%d\\n",call_hook(5));return 0;}\n' > m.c
  mkdir d; echo 'INPUT(libbar.so.1)' > d/libbar.so
  echo 'int call_hook(int x){return x+1;}' > bar.c; lib_so libbar.so.1 bar.c -Wl,-soname,libbar-cwd.so.1
}
build() { cc_c m.c; $CC -O2 -flto=thin -fuse-ld=lld m.o -Ld -lbar -Wl,--allow-shlib-undefined -o prog; }
change() {
  printf 'int hook(int);\nint call_hook(int x){return hook(x)+1;}\n' > bar2.c
  lib_so d/libbar.so.1 bar2.c -Wl,--allow-shlib-undefined -Wl,-soname,libbar-beside.so.1
}
