# stale-cases.sh 7: a linker script INCLUDEd by the -T script changes (it no longer keeps hook alive).
# Today: STALE in both modes (the thin-link key hashes the -T script, not what it includes).
setup() {
  printf 'int hook(int x){return x*3;}\nint main(void){return 0;}\n' > m.c
  echo 'INCLUDE extra.ld' > main.ld; echo 'hook_alias = hook;' > extra.ld
}
build() { cc_c m.c; $CC -O2 -flto=thin -fuse-ld=lld m.o -Wl,-T,main.ld -o prog; }
change() { echo '/* none */' > extra.ld; }
