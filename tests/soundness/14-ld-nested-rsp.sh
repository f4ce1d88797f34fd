# ltowrap-ld.lld called directly with a response file that names another; the inner one is edited.
# Today: STALE in memo mode (the memo keys the unexpanded @a.rsp; neither file is in its manifest).
OUTPUTS="libx.so"
CFLAGS="-O2 -flto=thin -fPIC"
setup() { two_modules; echo '-shared a.o b.o -o libx.so @b.rsp' > a.rsp; echo '-soname=libone.so' > b.rsp; }
build() { cc_c a.c b.c; ltowrap-ld.lld @a.rsp; }
change() { echo '-soname=libtwo.so' > b.rsp; }
