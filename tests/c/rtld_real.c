/* libreal.so: the "real" implementation. */
int foo(void) { return 42; }
