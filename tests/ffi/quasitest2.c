// The second test library of tests/ffi (libquasitest2.so): newest-first shadowing.
int qt_version(void) { return 2; }
