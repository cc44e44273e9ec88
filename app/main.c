#include "lares.h"
#include <stdio.h>
int main(void) { puts("lares: under construction"); return 0; }
