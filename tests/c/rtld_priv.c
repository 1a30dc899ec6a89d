/* libpriv.so: private dependency of libplugin.so. */
int priv_fn(void) { return 7; }
