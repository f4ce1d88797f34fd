# -T main.ld found through -L, edited (it no longer keeps hook alive).
# Today: STALE in both modes (the thin-link key hashes ./main.ld, the name as given, which is not there).
setup() {
  printf 'int hook(int x){return x*3;}\nint main(void){return 0;}\n' > m.c
  mkdir scripts; echo 'hook_alias = hook;' > scripts/main.ld
}
build() { cc_c m.c; $CC -O2 -flto=thin -fuse-ld=lld m.o -Lscripts -Wl,-T,main.ld -o prog; }
change() { echo '/* none */' > scripts/main.ld; }
