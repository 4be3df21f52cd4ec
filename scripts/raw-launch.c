/* The CUDA driver without Quasi, for scripts/gpu-bench (built there with the machine's cc;
 * libcuda.so.1 is opened at run time, so nothing CUDA is linked):
 *
 *   raw-launch launch     the round trip of an empty kernel, median µs of 2000 after 200
 *                         warm-ups: cuLaunchKernel + cuStreamSynchronize ("plain"), and with
 *                         the start and end events Quasi's `launch` records ("events");
 *   raw-launch recover    a kernel that stores to address 16 (CUDA_ERROR_ILLEGAL_ADDRESS), then
 *                         every way of going on in the same process that Quasi could take:
 *                         the primary context reset and retained again, and a new context.
 */
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *EMPTY_PTX =
    ".version 7.8\n.target sm_90\n.address_size 64\n"
    ".visible .entry empty(.param .u32 n) { ret; }\n";
static const char *BAD_PTX =
    ".version 7.8\n.target sm_90\n.address_size 64\n"
    ".visible .entry bad() { .reg .b64 %rd<2>; .reg .f32 %f<2>;\n"
    "  mov.u64 %rd1, 16; mov.f32 %f1, 0f3F800000; st.global.f32 [%rd1], %f1; ret; }\n";

static void *driver;
#define CALL(name, ...) ((CUresult(*)())symbol(#name))(__VA_ARGS__)

static void *symbol(const char *name) {
    void *found = dlsym(driver, name);
    if (!found) {
        fprintf(stderr, "libcuda.so.1 has no %s\n", name);
        exit(2);
    }
    return found;
}

static const char *say(CUresult status) {
    const char *name = "?";
    CALL(cuGetErrorName, status, &name);
    return name;
}

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int ascending(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static CUfunction load(const char *ptx, const char *name) {
    CUmodule module;
    CUfunction function;
    CUresult status = CALL(cuModuleLoadData, &module, ptx);
    if (status == CUDA_SUCCESS) status = CALL(cuModuleGetFunction, &function, module, name);
    if (status != CUDA_SUCCESS) {
        fprintf(stderr, "loading %s: %s\n", name, say(status));
        exit(1);
    }
    return function;
}

static void launches(void) {
    enum { WARMUP = 200, COUNT = 2000 };
    static double plain[COUNT], events[COUNT];
    CUfunction empty = load(EMPTY_PTX, "empty");
    CUevent start, end;
    CALL(cuEventCreate, &start, 0);
    CALL(cuEventCreate, &end, 0);
    int n = 0;
    void *parameters[] = {&n};
    for (int i = 0; i < WARMUP + COUNT; i++) {
        double t = now_us();
        CALL(cuLaunchKernel, empty, 1, 1, 1, 32, 1, 1, 0, NULL, parameters, NULL);
        CALL(cuStreamSynchronize, NULL);
        if (i >= WARMUP) plain[i - WARMUP] = now_us() - t;
    }
    for (int i = 0; i < WARMUP + COUNT; i++) {
        float ms;
        double t = now_us();
        CALL(cuEventRecord, start, NULL);
        CALL(cuLaunchKernel, empty, 1, 1, 1, 32, 1, 1, 0, NULL, parameters, NULL);
        CALL(cuEventRecord, end, NULL);
        CALL(cuEventSynchronize, end);
        CALL(cuEventElapsedTime, &ms, start, end);
        if (i >= WARMUP) events[i - WARMUP] = now_us() - t;
    }
    qsort(plain, COUNT, sizeof plain[0], ascending);
    qsort(events, COUNT, sizeof events[0], ascending);
    printf("raw launch plain %.2f us\nraw launch events %.2f us\n", plain[COUNT / 2], events[COUNT / 2]);
}

/* Whether the context current now can allocate, copy and run a kernel. */
static const char *usable(void) {
    CUdeviceptr memory;
    CUresult status = CALL(cuMemAlloc_v2, &memory, 1024);
    if (status != CUDA_SUCCESS) return say(status);
    CUmodule module;
    status = CALL(cuModuleLoadData, &module, EMPTY_PTX);
    if (status != CUDA_SUCCESS) return say(status);
    CUfunction empty;
    CALL(cuModuleGetFunction, &empty, module, "empty");
    int n = 0;
    void *parameters[] = {&n};
    status = CALL(cuLaunchKernel, empty, 1, 1, 1, 32, 1, 1, 0, NULL, parameters, NULL);
    if (status == CUDA_SUCCESS) status = CALL(cuCtxSynchronize);
    return status == CUDA_SUCCESS ? "usable" : say(status);
}

static void recover(CUdevice device) {
    CUfunction bad = load(BAD_PTX, "bad");
    CUresult status = CALL(cuLaunchKernel, bad, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
    printf("bad kernel: launch %s, ", say(status));
    printf("synchronize %s\n", say(CALL(cuCtxSynchronize)));
    printf("release primary: %s\n", say(CALL(cuDevicePrimaryCtxRelease_v2, device)));
    printf("reset primary: %s\n", say(CALL(cuDevicePrimaryCtxReset_v2, device)));
    CUcontext context = NULL;
    status = CALL(cuDevicePrimaryCtxRetain, &context, device);
    printf("retain primary again: %s\n", say(status));
    if (status == CUDA_SUCCESS) {
        printf("set current: %s\n", say(CALL(cuCtxSetCurrent, context)));
        printf("the new primary context: %s\n", usable());
    }
    CUcontext fresh = NULL;
    status = CALL(cuCtxCreate_v2, &fresh, 0, device);
    printf("a new context (cuCtxCreate): %s\n", say(status));
    if (status == CUDA_SUCCESS) printf("the new context: %s\n", usable());
}

int main(int argc, char **argv) {
    driver = dlopen("libcuda.so.1", RTLD_NOW);
    if (!driver) {
        fprintf(stderr, "no CUDA driver: %s\n", dlerror());
        return 2;
    }
    CUdevice device;
    CUcontext context;
    CUresult status = CALL(cuInit, 0);
    if (status == CUDA_SUCCESS) status = CALL(cuDeviceGet, &device, 0);
    if (status == CUDA_SUCCESS) status = CALL(cuDevicePrimaryCtxRetain, &context, device);
    if (status == CUDA_SUCCESS) status = CALL(cuCtxSetCurrent, context);
    if (status != CUDA_SUCCESS) {
        fprintf(stderr, "no CUDA device: %s\n", say(status));
        return 2;
    }
    if (argc > 1 && strcmp(argv[1], "recover") == 0)
        recover(device);
    else
        launches();
    return 0;
}
