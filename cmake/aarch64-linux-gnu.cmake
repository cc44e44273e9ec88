# Cross-compiling for 64-bit Arm Linux with Debian's gcc-aarch64-linux-gnu; tests run under
# qemu-user (qemu-aarch64 -L /usr/aarch64-linux-gnu). Used by tests/cross/run_aarch64.sh with
# -DLARES_MINIMAL_DEPS=ON, since jansson and pcre2 for the target are usually not installed.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(LARES_CROSS_PREFIX aarch64-linux-gnu- CACHE STRING "cross tool prefix")
set(LARES_CROSS_SYSROOT /usr/aarch64-linux-gnu CACHE PATH "target libraries for qemu-user")
set(CMAKE_C_COMPILER ${LARES_CROSS_PREFIX}gcc)

set(CMAKE_FIND_ROOT_PATH ${LARES_CROSS_SYSROOT})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# ctest in the cross build runs target programs through qemu
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L ${LARES_CROSS_SYSROOT})
