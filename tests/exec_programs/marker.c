/* Prints RAN-<MARK>: a unit test sees whose bytes ran. MARK is "denied" or "benign" (the
   same length, so the two builds have the same size and can be swapped in place). */
#include <stdio.h>
#ifndef MARK
#define MARK "benign"
#endif
int main(void) { puts("RAN-" MARK); return 0; }
