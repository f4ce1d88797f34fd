# A link map (-Wl,-Map=prog.map), which the memo stores beside prog. The map names the objects
# the final link read: ltowrap's backend objects, in the link's temporary directory (random
# name), so no two empty caches agree, and a restored map names another link's deleted files.
# Today: FAILS in both modes (memo: two cold builds differ; nomemo: warm != cold for the same reason).
OUTPUTS="prog prog.map"
setup() { two_modules; }
build() { cc_c a.c b.c; $CC -O2 -flto=thin -fuse-ld=lld -Wl,-Map=prog.map a.o b.o -o prog; }
change() { sed -i 's/i\*x/i*x+1/' b.c; }
