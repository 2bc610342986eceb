/*
 * fake_libcuda.c: the few CUDA driver API calls tests/hardware/gpu_check.py makes, for a gpusim host.
 *
 * It holds GPU memory the way the simulator's engines do (gpusim.engines.hold_gpu): a context opens
 * /dev/nvidiactl, /dev/nvidia-uvm and /dev/nvidiaN and maps /dev/nvidiactl and /dev/nvidiaN (as libcuda
 * does: rw-s lines of /proc/PID/maps), and cuMemAlloc asks the host's simulated driver
 * (/run/gpusim/driver.sock, one JSON line) to allocate; the driver frees it when the process exits.
 * CUDA device N is the N-th /dev/nvidiaM the process sees, by minor, as CUDA enumerates them.
 *
 * Build: gcc -shared -fPIC -O2 -Wall -Wextra -fvisibility=hidden -Wl,-soname,libcuda.so.1 \
 *            -o libcuda.so.1 fake_libcuda.c   (tests/hardware/test_gpu_check_sim.py does it)
 */

#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))
#define MAX_DEVICES 64

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef unsigned long long CUdeviceptr;

enum { CUDA_SUCCESS = 0, CUDA_ERROR_INVALID_VALUE = 1, CUDA_ERROR_OUT_OF_MEMORY = 2, CUDA_ERROR_NOT_INITIALIZED = 3,
       CUDA_ERROR_NO_DEVICE = 100, CUDA_ERROR_INVALID_DEVICE = 101, CUDA_ERROR_INVALID_CONTEXT = 201,
       CUDA_ERROR_UNKNOWN = 999 };

static const char DRIVER_SOCKET[] = "/run/gpusim/driver.sock";
static int initialised;
static int minors[MAX_DEVICES];
static int device_count;
static int current = -1;                     /* the CUDA device of the current context */
static int contexts[MAX_DEVICES];            /* one context (the primary one) per device */
static unsigned long long next_address = 0x7f0000000000ULL;

static int by_number(const void *left, const void *right) {
    return *(const int *)left - *(const int *)right;
}

EXPORT CUresult cuInit(unsigned int flags) {
    DIR *dev = opendir("/dev");
    struct dirent *entry;
    char *end;
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!dev)
        return CUDA_ERROR_NO_DEVICE;
    device_count = 0;
    while ((entry = readdir(dev)) && device_count < MAX_DEVICES) {
        long minor;
        if (strncmp(entry->d_name, "nvidia", 6) || !entry->d_name[6])
            continue;
        minor = strtol(entry->d_name + 6, &end, 10);
        if (!*end)
            minors[device_count++] = (int)minor;
    }
    closedir(dev);
    qsort(minors, device_count, sizeof(int), by_number);
    initialised = 1;
    return device_count ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
}

EXPORT CUresult cuDeviceGetCount(int *count) {
    if (!initialised)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    *count = device_count;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGet(CUdevice *device, int ordinal) {
    if (!initialised)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!device || ordinal < 0 || ordinal >= device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

/* A shared mapping of a device file: it keeps the file open even once its descriptor is closed. */
static CUresult map_device(int fd) {
    return mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) == MAP_FAILED ? CUDA_ERROR_UNKNOWN
                                                                                    : CUDA_SUCCESS;
}

/* A context keeps the device files open for the life of the process, as libcuda does. */
static CUresult open_context(CUdevice device, CUcontext *context) {
    char path[64];
    const char *shared[] = {"/dev/nvidiactl", "/dev/nvidia-uvm"};
    unsigned int index;
    if (!initialised)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!context || device < 0 || device >= device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    if (!contexts[device]) {
        int control = -1, gpu;
        for (index = 0; index < 2; index++) {
            int fd = open(shared[index], O_RDWR | O_CLOEXEC);
            if (fd < 0)
                return CUDA_ERROR_UNKNOWN;
            if (index == 0)
                control = fd;
        }
        snprintf(path, sizeof(path), "/dev/nvidia%d", minors[device]);
        gpu = open(path, O_RDWR | O_CLOEXEC);
        if (gpu < 0 || map_device(control) != CUDA_SUCCESS || map_device(gpu) != CUDA_SUCCESS)
            return CUDA_ERROR_UNKNOWN;
        contexts[device] = 1;
    }
    *context = (CUcontext)&contexts[device];
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *context, CUdevice device) {
    return open_context(device, context);
}

EXPORT CUresult cuCtxCreate_v2(CUcontext *context, unsigned int flags, CUdevice device) {
    CUresult status = open_context(device, context);
    (void)flags;
    if (status == CUDA_SUCCESS)
        current = device;
    return status;
}

EXPORT CUresult cuCtxSetCurrent(CUcontext context) {
    int device = (int)((int *)context - contexts);
    if (!context || device < 0 || device >= device_count || !contexts[device])
        return CUDA_ERROR_INVALID_CONTEXT;
    current = device;
    return CUDA_SUCCESS;
}

static CUresult driver_alloc(int minor, unsigned long long mib) {
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    char request[128], answer[256];
    ssize_t got, total = 0;
    int conn = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (conn < 0)
        return CUDA_ERROR_UNKNOWN;
    snprintf(address.sun_path, sizeof(address.sun_path), "%s", DRIVER_SOCKET);
    snprintf(request, sizeof(request), "{\"op\": \"alloc\", \"minor\": %d, \"mib\": %llu}\n", minor, mib);
    if (connect(conn, (struct sockaddr *)&address, sizeof(address)) < 0
        || write(conn, request, strlen(request)) != (ssize_t)strlen(request)) {
        close(conn);
        return CUDA_ERROR_UNKNOWN;
    }
    while (total < (ssize_t)sizeof(answer) - 1 && (got = read(conn, answer + total, sizeof(answer) - 1 - total)) > 0) {
        total += got;
        if (answer[total - 1] == '\n')
            break;
    }
    close(conn);
    answer[total] = '\0';
    return strstr(answer, "\"ok\": true") ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *pointer, size_t bytes) {
    CUresult status;
    if (current < 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!pointer || !bytes)
        return CUDA_ERROR_INVALID_VALUE;
    status = driver_alloc(minors[current], (bytes + (1 << 20) - 1) >> 20);
    if (status != CUDA_SUCCESS)
        return status;
    *pointer = next_address;
    next_address += bytes;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuGetErrorString(CUresult error, const char **text) {
    if (!text)
        return CUDA_ERROR_INVALID_VALUE;
    *text = error == CUDA_SUCCESS ? "no error" : error == CUDA_ERROR_OUT_OF_MEMORY ? "out of memory"
          : error == CUDA_ERROR_NO_DEVICE ? "no CUDA-capable device is detected" : "unknown error";
    return CUDA_SUCCESS;
}
