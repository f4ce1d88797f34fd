# A link map (-Wl,-Map=prog.map), which the memo stores beside prog. The map names the objects
# the final link read: ltowrap's backend objects, in the link's temporary directory (random
# name), so no two links agree on it, cache or not (README, Known limits). The program must.
# Before issue 24's fixes: passed (kept as a regression test of a link that writes a second output).
OUTPUTS="prog"
setup() { two_modules; }
build() { cc_c a.c b.c; $CC -O2 -flto=thin -fuse-ld=lld -Wl,-Map=prog.map a.o b.o -o prog; }
change() { sed -i 's/i\*x/i*x+1/' b.c; }
