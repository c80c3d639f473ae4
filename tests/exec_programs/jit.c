/* Code built in memory: machine code written into anonymous memory, made executable with
   mprotect and called. Prints RAN-jit 42, or the errno of the refused mprotect. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
int main(void) {
#if defined(__x86_64__)
    static const unsigned char code[] = {0xb8, 0x2a, 0, 0, 0, 0xc3};      /* mov eax,42; ret */
#elif defined(__aarch64__)
    static const unsigned int code[] = {0x52800540, 0xd65f03c0};          /* mov w0,#42; ret */
#endif
    unsigned char *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                            -1, 0);
    if (p == MAP_FAILED) { printf("mmap errno %d\n", errno); return 1; }
    memcpy(p, code, sizeof code);
    if (mprotect(p, 4096, PROT_READ | PROT_EXEC) != 0) {
        printf("mprotect errno %d\n", errno);
        return 1;
    }
    __builtin___clear_cache((char *)p, (char *)p + sizeof code);
    int (*f)(void) = (int (*)(void))p;
    printf("RAN-jit %d\n", f());
    return 0;
}
