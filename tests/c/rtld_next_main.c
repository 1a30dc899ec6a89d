/* Linked against libwrap.so then libreal.so: foo() must be 43. */
#include <stdio.h>
int foo(void);
int main(void) {
    printf("foo=%d\n", foo());
    return 0;
}
