# A link map (-Wl,-Map=prog.map) and a dependency file (-Wl,--dependency-file=prog.d), which the
# memo stores beside prog. Both name the link's inputs as in-process lld does (a.o, b.o; the map's
# LTO objects prog.lto.a.o, prog.lto.b.o), never ltowrap's temporary objects, so a warm and a
# cold link agree on them byte for byte (issue 38).
# Before issue 38's fixes: failed (the map named the temporary directory, a random name; a link
# with a depfile was not memoised). Before issue 24's fixes: passed with OUTPUTS=prog.
OUTPUTS="prog prog.map prog.d"
setup() { two_modules; }
build() { cc_c a.c b.c; $CC -O2 -flto=thin -fuse-ld=lld -Wl,-Map=prog.map -Wl,--dependency-file=prog.d a.o b.o -o prog; }
change() { sed -i 's/i\*x/i*x+1/' b.c; }
