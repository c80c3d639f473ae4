/* A busybox-style multi-call binary: what it does depends on the name it is run as. */
#include <stdio.h>
#include <string.h>
int main(int argc, char **argv) {
    const char *name = strrchr(argv[0], '/');
    name = name ? name + 1 : argv[0];
    if (strcmp(name, "hello") == 0) { puts("RAN-applet-hello"); return 0; }
    if (strcmp(name, "evil") == 0) { puts("RAN-applet-evil"); return 0; }
    printf("RAN-multicall-%s\n", name);
    return 0;
}
