/* The "empty C library" baseline of ci/exec_cost.sh: one function, libc only. */
int vgpu_exec_cost_empty(void) { return 0; }
