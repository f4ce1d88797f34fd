# -T main.ld found through -L (lld tries the name as given first); a main.ld appears in the
# working directory, and lld now reads that one.
# Today: passes (a regression test: the memo hashes ./main.ld, the name as given, as missing).
# Not counted among the cases that failed before their fix.
setup() {
  printf 'int hook(int x){return x*3;}\nint main(void){return 0;}\n' > m.c
  mkdir scripts; echo 'hook_alias = hook;' > scripts/main.ld
}
build() { cc_c m.c; $CC -O2 -flto=thin -fuse-ld=lld m.o -Lscripts -Wl,-T,main.ld -o prog; }
change() { echo '/* none */' > main.ld; }
