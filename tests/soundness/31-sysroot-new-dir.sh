# --sysroot=S, a copy of what a C link needs, all under S/usr/lib: then S/lib/x86_64-linux-gnu
# appears with its own crti.o. The driver searches S/lib/<multiarch> before S/usr/lib/<multiarch>
# (and only directories that exist, so the link line had no trace of it).
# Today: STALE in both modes (the driver line is rechecked by what it named and their parents; S is neither).
M=x86_64-linux-gnu
G=/usr/lib/gcc/$M/12
NEEDS="llvm-objcopy $G/crtbegin.o /usr/lib/$M/Scrt1.o /lib64/ld-linux-x86-64.so.2"
setup() {
  two_modules
  mkdir -p S/usr/lib/$M S/lib64 S/usr/lib/gcc/$M/12
  local f
  for f in Scrt1.o crti.o crtn.o libc.so.6 libc_nonshared.a libgcc_s.so.1; do cp /usr/lib/$M/$f S/usr/lib/$M/; done
  # libc.so names /lib/$M/libc.so.6; this sysroot has no S/lib (yet)
  echo "GROUP ( /usr/lib/$M/libc.so.6 /usr/lib/$M/libc_nonshared.a AS_NEEDED ( /lib64/ld-linux-x86-64.so.2 ) )" > S/usr/lib/$M/libc.so
  cp /lib64/ld-linux-x86-64.so.2 S/lib64/
  for f in crtbegin.o crtend.o crtbeginS.o crtendS.o libgcc.a libgcc_s.so; do cp $G/$f S/usr/lib/gcc/$M/12/; done
}
build() { cc_c a.c b.c; $CC --sysroot=$PWD/S -O2 -flto=thin -fuse-ld=lld a.o b.o -o prog; }
change() {
  mkdir -p S/lib/$M; echo hi > n.txt
  llvm-objcopy --add-section .mine=n.txt S/usr/lib/$M/crti.o S/lib/$M/crti.o
}
