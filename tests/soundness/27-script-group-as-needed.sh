# A libc.so-style script: GROUP(libx.so.1 AS_NEEDED(liby.so.1)); liby changes to call back
# into the program (so the thin-link must keep and export hook()).
# Today: STALE in both modes (the thin-link key hashes the script, not the files it names: the memo
# misses, and the thin-link cache then serves the old shards).
setup() {
  printf '#include <stdio.h>\nint hook(int x){return x*3+7;}\nint call_x(int);\nint call_y(int);\nint main(void){printf("%%d\\n",call_x(5)+call_y(1));return 0;}\n' > m.c
  echo 'GROUP(libx.so.1 AS_NEEDED(liby.so.1))' > libxy.so
  echo 'int call_x(int x){return x+1;}' > x.c; lib_so libx.so.1 x.c
  echo 'int call_y(int x){return x+2;}' > y.c; lib_so liby.so.1 y.c
}
build() { cc_c m.c; $CC -O2 -flto=thin -fuse-ld=lld m.o -L. -lxy -Wl,--allow-shlib-undefined -o prog; }
change() { printf 'int hook(int);\nint call_y(int x){return hook(x)+2;}\n' > y.c; lib_so liby.so.1 y.c -Wl,--allow-shlib-undefined; }
