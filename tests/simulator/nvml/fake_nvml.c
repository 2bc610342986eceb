/*
 * fake_nvml.c: a stand-in libnvidia-ml.so.1 for the gpusim simulator.
 *
 * The real nvidia-ml-py binding (pynvml) loads it with CDLL("libnvidia-ml.so.1")
 * and calls it exactly as it calls the real library. It knows nothing by
 * itself: every answer comes from the simulator's nvidia-smi, run without a
 * shell (fork + exec) with --query-gpu / --query-compute-apps in
 * csv,noheader,nounits format, so the NVML path of the collection sees the
 * same world as the nvidia-smi path, faults included:
 *
 *   nvidia-smi exit 9 (driver not loaded)  -> nvmlInit: NVML_ERROR_DRIVER_NOT_LOADED
 *   nvidia-smi exit 18 (version mismatch)  -> nvmlInit: NVML_ERROR_LIB_RM_VERSION_MISMATCH
 *   nvidia-smi exit 4 (permissions)        -> nvmlInit: NVML_ERROR_NO_PERMISSION
 *   nvidia-smi missing / not executable    -> nvmlInit: NVML_ERROR_LIBRARY_NOT_FOUND
 *   "No devices were found" (exit 6)       -> nvmlInit succeeds, no devices
 *   "Unable to determine the device handle for GPU...": that GPU counts, but its
 *       handle and every query on it fail with NVML_ERROR_GPU_IS_LOST (or the
 *       code in $GPUSIM_NVML_LOST_ERROR, e.g. 999 for NVML_ERROR_UNKNOWN, which
 *       real drivers return as often)
 *   a hung nvidia-smi                      -> the NVML call hangs too
 *   a token instead of a value             -> that query fails: [N/A] and [Not Supported] with
 *       NVML_ERROR_NOT_SUPPORTED, [Insufficient Permissions] with NVML_ERROR_NO_PERMISSION,
 *       [GPU requires reset] with NVML_ERROR_RESET_REQUIRED, [GPU is lost] with
 *       NVML_ERROR_GPU_IS_LOST, anything else with NVML_ERROR_UNKNOWN
 *   a token for a process's PID           -> nvmlDeviceGetComputeRunningProcesses fails with that
 *       token's error ([Insufficient Permissions]: NVML_ERROR_NO_PERMISSION, as for MIG in a container)
 *   a field nvidia-smi rejects ("is not a valid field to query", older drivers):
 *       asked again without it; memory.reserved missing makes nvmlDeviceGetMemoryInfo_v2
 *       answer NVML_ERROR_FUNCTION_NOT_FOUND, any other optional one NVML_ERROR_NOT_SUPPORTED
 *
 * The GPUs are read once per nvmlInit (the first one, while initialised), the
 * processes at the first process query after it; nvmlShutdown forgets both.
 * Memory is in bytes (MiB * 1048576). nvmlDeviceGetMemoryInfo (v1) reports
 * `used` as the driver's reserved memory plus the allocated memory, as real
 * drivers since R510 do; nvmlDeviceGetMemoryInfo_v2 splits them.
 *
 * The nvidia-smi child gets SIGKILL when the thread that started it dies, so a
 * caller killed while NVML hangs (the point of bounding it) leaves nothing behind.
 *
 * Environment: GPUSIM_NVIDIA_SMI (default /usr/local/sbin/nvidia-smi),
 * GPUSIM_NVML_LOST_ERROR (default 15, NVML_ERROR_GPU_IS_LOST).
 *
 * Build: gcc -shared -fPIC -O2 -Wall -Wextra -fvisibility=hidden \
 *            -Wl,-soname,libnvidia-ml.so.1 -o libnvidia-ml.so.1 fake_nvml.c -lpthread
 * (tests/simulator/gpusim/nvml.py does it).
 */

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

/* ---- the NVML ABI (nvml.h), as far as this library implements it ---- */

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NO_PERMISSION = 4,
    NVML_ERROR_ALREADY_INITIALIZED = 5,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_INSUFFICIENT_POWER = 8,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_IRQ_ISSUE = 11,
    NVML_ERROR_LIBRARY_NOT_FOUND = 12,
    NVML_ERROR_FUNCTION_NOT_FOUND = 13,
    NVML_ERROR_CORRUPTED_INFOROM = 14,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_RESET_REQUIRED = 16,
    NVML_ERROR_OPERATING_SYSTEM = 17,
    NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
    NVML_ERROR_IN_USE = 19,
    NVML_ERROR_MEMORY = 20,
    NVML_ERROR_NO_DATA = 21,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_UNKNOWN = 999,
};

#define NVML_VALUE_NOT_AVAILABLE_UINT 0xFFFFFFFFu
#define NVML_VALUE_NOT_AVAILABLE_ULL 0xFFFFFFFFFFFFFFFFull
#define NVML_VALUE_TYPE_UNSIGNED_INT 1
#define NVML_FI_DEV_GET_GPU_RECOVERY_ACTION 230

struct fake_device;
typedef struct fake_device *nvmlDevice_t;

typedef struct {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

typedef struct {
    unsigned int version;
    unsigned long long total;
    unsigned long long reserved;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_v2_t;

#define NVML_STRUCT_VERSION(data, ver) (unsigned int)(sizeof(data) | ((ver) << 24U))
#define nvmlMemory_v2 NVML_STRUCT_VERSION(nvmlMemory_v2_t, 2)

/* nvmlDeviceGetPciInfo_v3 */
typedef struct {
    char busIdLegacy[16];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

/* nvmlDeviceGetPciInfo and nvmlDeviceGetPciInfo_v2 (the layout before NVML 9) */
typedef struct {
    char busId[16];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    unsigned int reserved0;
    unsigned int reserved1;
    unsigned int reserved2;
    unsigned int reserved3;
} nvmlPciInfoLegacy_t;

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
} nvmlProcessInfo_v1_t;

/* _v2 and _v3 of nvmlDeviceGetComputeRunningProcesses share this layout */
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_t;

typedef union {
    double dVal;
    unsigned int uiVal;
    unsigned long ulVal;
    unsigned long long ullVal;
    signed long long sllVal;
    signed int siVal;
    unsigned short usVal;
} nvmlValue_t;

typedef struct {
    unsigned int fieldId;
    unsigned int scopeId;
    long long timestamp;
    long long latencyUsec;
    int valueType;
    nvmlReturn_t nvmlReturn;
    nvmlValue_t value;
} nvmlFieldValue_t;

/* ---- what nvidia-smi is asked ---- */

enum field {
    F_INDEX, F_UUID, F_NAME, F_BUS_ID, F_DRIVER, F_TOTAL, F_USED, F_FREE,
    /* optional from here: a driver that rejects one is asked again without it */
    F_RESERVED, F_PERSISTENCE, F_MIG_CURRENT, F_MIG_PENDING,
    F_ECC_CORRECTED_VOLATILE, F_ECC_UNCORRECTED_VOLATILE, F_ECC_CORRECTED_AGGREGATE, F_ECC_UNCORRECTED_AGGREGATE,
    F_DEVICE_ID, F_SUBSYSTEM_ID, F_REMAPPED_CORRECTABLE, F_REMAPPED_UNCORRECTABLE, F_REMAPPED_PENDING,
    F_REMAPPED_FAILURE, F_RECOVERY_ACTION, F_RETIRED_PENDING,
    F_COUNT
};
#define FIRST_OPTIONAL F_RESERVED

static const char *const FIELD_NAMES[F_COUNT] = {
    "index", "uuid", "name", "pci.bus_id", "driver_version", "memory.total", "memory.used", "memory.free",
    "memory.reserved", "persistence_mode", "mig.mode.current", "mig.mode.pending",
    "ecc.errors.corrected.volatile.total", "ecc.errors.uncorrected.volatile.total",
    "ecc.errors.corrected.aggregate.total", "ecc.errors.uncorrected.aggregate.total",
    "pci.device_id", "pci.sub_device_id", "remapped_rows.correctable", "remapped_rows.uncorrectable",
    "remapped_rows.pending", "remapped_rows.failure", "gpu_recovery_action", "retired_pages.pending",
};

static const char PROCESS_FIELDS[] = "--query-compute-apps=gpu_uuid,pid,used_gpu_memory,process_name";
static const char CSV_FORMAT[] = "--format=csv,noheader,nounits";
static const char DEFAULT_SMI[] = "/usr/local/sbin/nvidia-smi";
static const char LOST_PREFIX[] = "Unable to determine the device handle for ";

#define MAX_GPUS 64
#define MAX_PROCESSES 512
#define VALUE_SIZE 128
#define PROCESS_NAME_SIZE 1024
#define MIB 1048576ULL

struct fake_device {
    nvmlReturn_t failure;            /* not NVML_SUCCESS: the handle cannot be had (a lost GPU) */
    char bus_id[VALUE_SIZE];         /* known for a lost GPU too, from nvidia-smi's message */
    char values[F_COUNT][VALUE_SIZE];
};

struct process {
    char gpu_uuid[VALUE_SIZE];
    unsigned int pid;
    unsigned long long used_bytes;   /* NVML_VALUE_NOT_AVAILABLE_ULL where nvidia-smi printed a token */
    char name[PROCESS_NAME_SIZE];
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int refcount;
static int asked[F_COUNT];
static int device_count;
static struct fake_device devices[MAX_GPUS];
static int processes_read;
static nvmlReturn_t processes_error;
static int process_count;
static struct process processes[MAX_PROCESSES];
static char driver_version[VALUE_SIZE];

static nvmlReturn_t token_error(const char *value);

/* ---- running nvidia-smi ---- */

struct smi_result {
    int exec_errno;                  /* exec failed with this errno */
    int exited;                      /* it exited (not killed) ... */
    int code;                        /* ... with this code */
    char *output;                    /* stdout and stderr together, NUL-terminated */
    size_t length;
};

static const char *smi_path(void) {
    const char *path = getenv("GPUSIM_NVIDIA_SMI");
    return path && *path ? path : DEFAULT_SMI;
}

static void smi_free(struct smi_result *result) {
    free(result->output);
    result->output = NULL;
}

static ssize_t read_retrying(int fd, void *buffer, size_t size) {
    ssize_t got;
    do {
        got = read(fd, buffer, size);
    } while (got < 0 && errno == EINTR);
    return got;
}

/* Run nvidia-smi with these arguments; 0 when it ran (whatever its exit), -1 when it could not be started. */
static int run_smi(char *const extra[], int extra_count, struct smi_result *result) {
    char *argv[8];
    int output_pipe[2], error_pipe[2];
    pid_t parent = getpid(), child;
    int status = 0, index;
    size_t capacity = 4096;

    memset(result, 0, sizeof(*result));
    if (extra_count > 6)
        return -1;
    argv[0] = (char *)smi_path();
    for (index = 0; index < extra_count; index++)
        argv[index + 1] = extra[index];
    argv[extra_count + 1] = NULL;
    result->output = malloc(capacity);
    if (!result->output)
        return -1;
    if (pipe2(output_pipe, O_CLOEXEC) < 0) {
        smi_free(result);
        return -1;
    }
    if (pipe2(error_pipe, O_CLOEXEC) < 0) {
        close(output_pipe[0]);
        close(output_pipe[1]);
        smi_free(result);
        return -1;
    }
    child = fork();
    if (child < 0) {
        close(output_pipe[0]);
        close(output_pipe[1]);
        close(error_pipe[0]);
        close(error_pipe[1]);
        smi_free(result);
        return -1;
    }
    if (child == 0) {
        /* Only async-signal-safe calls from here on. */
        sigset_t all;
        int null, saved;
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        sigemptyset(&all);
        sigprocmask(SIG_SETMASK, &all, NULL);
        signal(SIGPIPE, SIG_DFL);
        null = open("/dev/null", O_RDONLY);
        if (null >= 0 && null != 0) {
            dup2(null, 0);
            close(null);
        }
        dup2(output_pipe[1], 1);
        dup2(output_pipe[1], 2);
        execv(argv[0], argv);
        saved = errno;
        if (write(error_pipe[1], &saved, sizeof(saved)) < 0)
            _exit(126);
        _exit(127);
    }
    close(output_pipe[1]);
    close(error_pipe[1]);
    if (read_retrying(error_pipe[0], &result->exec_errno, sizeof(result->exec_errno)) <= 0)
        result->exec_errno = 0;
    close(error_pipe[0]);
    for (;;) {
        ssize_t got;
        if (result->length + 1 >= capacity) {
            char *bigger = realloc(result->output, capacity * 2);
            if (!bigger)
                break;
            result->output = bigger;
            capacity *= 2;
        }
        got = read_retrying(output_pipe[0], result->output + result->length, capacity - result->length - 1);
        if (got <= 0)
            break;
        result->length += (size_t)got;
    }
    result->output[result->length] = '\0';
    close(output_pipe[0]);
    while (waitpid(child, &status, 0) < 0) {
        if (errno != EINTR) {
            status = -1;
            break;
        }
    }
    if (status != -1 && WIFEXITED(status)) {
        result->exited = 1;
        result->code = WEXITSTATUS(status);
    }
    return 0;
}

/* What a failed nvidia-smi run means for NVML. */
static nvmlReturn_t smi_failure(const struct smi_result *result) {
    if (result->exec_errno)
        return NVML_ERROR_LIBRARY_NOT_FOUND;
    if (!result->exited)
        return NVML_ERROR_UNKNOWN;
    switch (result->code) {
    case 4:
        return NVML_ERROR_NO_PERMISSION;
    case 9:
        return NVML_ERROR_DRIVER_NOT_LOADED;
    case 15:
        return NVML_ERROR_GPU_IS_LOST;
    case 18:
        return NVML_ERROR_LIB_RM_VERSION_MISMATCH;
    default:
        return NVML_ERROR_UNKNOWN;
    }
}

/* ---- reading what nvidia-smi printed ---- */

static void copy_value(char *target, const char *start, size_t length) {
    if (length >= VALUE_SIZE)
        length = VALUE_SIZE - 1;
    memcpy(target, start, length);
    target[length] = '\0';
}

static void trim(char *text) {
    size_t length = strlen(text), start = 0;
    while (length && (text[length - 1] == ' ' || text[length - 1] == '\r' || text[length - 1] == '\t'))
        text[--length] = '\0';
    while (text[start] == ' ' || text[start] == '\t')
        start++;
    if (start)
        memmove(text, text + start, length - start + 1);
}

static nvmlReturn_t lost_error(void) {
    const char *configured = getenv("GPUSIM_NVML_LOST_ERROR");
    char *end;
    long code;
    if (!configured || !*configured)
        return NVML_ERROR_GPU_IS_LOST;
    code = strtol(configured, &end, 10);
    return *end == '\0' && code > 0 && code < INT_MAX ? (nvmlReturn_t)code : NVML_ERROR_GPU_IS_LOST;
}

/* "Unable to determine the device handle for GPU0000:3A:00.0: Unknown Error" */
static void read_lost_line(struct fake_device *device, const char *line) {
    const char *handle = line + strlen(LOST_PREFIX);
    const char *end;
    int digits = 0;
    if (strncasecmp(handle, "GPU", 3) == 0)
        handle += 3;
    while (*handle == ' ')
        handle++;
    end = handle;
    while (*end && *end != ' ' && !(end[0] == ':' && (end[1] == ' ' || end[1] == '\0')))
        end++;
    for (const char *scan = handle; scan < end && *scan != ':'; scan++)
        digits++;
    if (digits == 4 && (size_t)(end - handle) + 4 < VALUE_SIZE) {  /* 0000:3A:00.0 -> 00000000:3A:00.0 */
        memcpy(device->bus_id, "0000", 4);
        copy_value(device->bus_id + 4, handle, (size_t)(end - handle));
    } else {
        copy_value(device->bus_id, handle, (size_t)(end - handle));
    }
    device->failure = strstr(line, "GPU is lost") ? NVML_ERROR_GPU_IS_LOST : lost_error();
}

static void read_row(struct fake_device *device, char *line) {
    char *cursor = line;
    int field;
    device->failure = NVML_SUCCESS;
    for (field = 0; field < F_COUNT; field++) {
        char *comma;
        if (!asked[field])
            continue;
        if (!cursor) {
            device->failure = NVML_ERROR_UNKNOWN;   /* fewer values than fields: not a row */
            return;
        }
        comma = strstr(cursor, ", ");
        if (comma) {
            copy_value(device->values[field], cursor, (size_t)(comma - cursor));
            cursor = comma + 2;
        } else {
            copy_value(device->values[field], cursor, strlen(cursor));
            cursor = NULL;
        }
        trim(device->values[field]);
    }
    if (cursor)
        device->failure = NVML_ERROR_UNKNOWN;       /* more values than fields */
    copy_value(device->bus_id, device->values[F_BUS_ID], strlen(device->values[F_BUS_ID]));
}

static void forget(void) {
    device_count = 0;
    memset(devices, 0, sizeof(devices));
    processes_read = 0;
    processes_error = NVML_SUCCESS;
    process_count = 0;
    driver_version[0] = '\0';
}

static int rejected_field(const char *output) {
    const char *found = strstr(output, "Field \"");
    int field;
    if (!found)
        return -1;
    found += strlen("Field \"");
    for (field = 0; field < F_COUNT; field++) {
        size_t length = strlen(FIELD_NAMES[field]);
        if (asked[field] && strncmp(found, FIELD_NAMES[field], length) == 0 && found[length] == '"')
            return field;
    }
    return -1;
}

static nvmlReturn_t load_devices(void) {
    struct smi_result result;
    char query[1024];
    char format[sizeof(CSV_FORMAT)];
    char *extra[2];
    int attempt, field;

    forget();
    for (field = 0; field < F_COUNT; field++)
        asked[field] = 1;
    memcpy(format, CSV_FORMAT, sizeof(CSV_FORMAT));
    for (attempt = 0; attempt <= F_COUNT; attempt++) {
        char *line, *next;
        size_t used = (size_t)snprintf(query, sizeof(query), "--query-gpu=");
        for (field = 0; field < F_COUNT; field++) {
            if (asked[field])
                used += (size_t)snprintf(query + used, sizeof(query) - used, "%s%s",
                                         used > strlen("--query-gpu=") ? "," : "", FIELD_NAMES[field]);
        }
        extra[0] = query;
        extra[1] = format;
        if (run_smi(extra, 2, &result) < 0)
            return NVML_ERROR_MEMORY;
        if (result.exited && result.code == 2) {
            int rejected = rejected_field(result.output);
            smi_free(&result);
            if (rejected < FIRST_OPTIONAL)
                return NVML_ERROR_UNKNOWN;
            asked[rejected] = 0;
            continue;
        }
        if (result.exited && result.code == 6 && strstr(result.output, "No devices were found")) {
            smi_free(&result);
            return NVML_SUCCESS;
        }
        if (result.exec_errno || !result.exited || (result.code != 0 && result.code != 15)) {
            nvmlReturn_t failure = smi_failure(&result);
            smi_free(&result);
            return failure;
        }
        for (line = result.output; line && *line; line = next) {
            next = strchr(line, '\n');
            if (next)
                *next++ = '\0';
            trim(line);
            if (!*line)
                continue;
            if (device_count == MAX_GPUS)
                break;
            if (strncmp(line, LOST_PREFIX, strlen(LOST_PREFIX)) == 0)
                read_lost_line(&devices[device_count], line);
            else
                read_row(&devices[device_count], line);
            device_count++;
        }
        smi_free(&result);
        return NVML_SUCCESS;
    }
    return NVML_ERROR_UNKNOWN;
}

static nvmlReturn_t load_processes(void) {
    struct smi_result result;
    char fields[sizeof(PROCESS_FIELDS)], format[sizeof(CSV_FORMAT)];
    char *extra[2] = {fields, format};
    char *line, *next;

    if (processes_read)
        return processes_error;
    memcpy(fields, PROCESS_FIELDS, sizeof(PROCESS_FIELDS));
    memcpy(format, CSV_FORMAT, sizeof(CSV_FORMAT));
    if (run_smi(extra, 2, &result) < 0)
        return NVML_ERROR_MEMORY;
    processes_read = 1;
    process_count = 0;
    if (result.exited && result.code == 6 && strstr(result.output, "No devices were found")) {
        smi_free(&result);
        return processes_error = NVML_SUCCESS;
    }
    if (result.exec_errno || !result.exited || (result.code != 0 && result.code != 15)) {
        processes_error = smi_failure(&result);
        smi_free(&result);
        return processes_error;
    }
    processes_error = NVML_SUCCESS;
    for (line = result.output; line && *line; line = next) {
        struct process *entry = &processes[process_count];
        char *parts[4], *cursor = line, *end;
        int part;
        unsigned long long number;
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        trim(line);
        if (!*line || strncmp(line, LOST_PREFIX, strlen(LOST_PREFIX)) == 0)
            continue;
        for (part = 0; part < 3 && cursor; part++) {   /* the name goes last: it may contain ", " */
            char *comma = strstr(cursor, ", ");
            parts[part] = cursor;
            cursor = comma ? comma + 2 : NULL;
            if (comma)
                *comma = '\0';
        }
        if (part < 3 || !cursor || process_count == MAX_PROCESSES) {
            processes_error = NVML_ERROR_UNKNOWN;
            break;
        }
        parts[3] = cursor;
        for (part = 0; part < 4; part++)
            trim(parts[part]);
        if (parts[1][0] == '[') {                    /* a token for the PID: the driver withholds the list */
            processes_error = token_error(parts[1]);
            break;
        }
        errno = 0;
        number = strtoull(parts[1], &end, 10);
        if (errno || *end || end == parts[1] || number > UINT_MAX) {
            processes_error = NVML_ERROR_UNKNOWN;
            break;
        }
        entry->pid = (unsigned int)number;
        errno = 0;
        number = strtoull(parts[2], &end, 10);
        entry->used_bytes = errno || *end || end == parts[2] ? NVML_VALUE_NOT_AVAILABLE_ULL : number * MIB;
        copy_value(entry->gpu_uuid, parts[0], strlen(parts[0]));
        snprintf(entry->name, sizeof(entry->name), "%s", parts[3]);
        process_count++;
    }
    if (processes_error != NVML_SUCCESS)
        process_count = 0;
    smi_free(&result);
    return processes_error;
}

/* ---- values of one GPU ---- */

static nvmlReturn_t token_error(const char *value) {
    if (!strcmp(value, "[N/A]") || !strcmp(value, "N/A") || !strcmp(value, "[Not Supported]")
        || !strcmp(value, "Not Supported") || !*value)
        return NVML_ERROR_NOT_SUPPORTED;
    if (!strcmp(value, "[Insufficient Permissions]"))
        return NVML_ERROR_NO_PERMISSION;
    if (!strcmp(value, "[GPU requires reset]"))
        return NVML_ERROR_RESET_REQUIRED;
    if (!strcmp(value, "[GPU is lost]"))
        return NVML_ERROR_GPU_IS_LOST;
    if (value[0] == '[')
        return NVML_ERROR_UNKNOWN;
    return NVML_SUCCESS;
}

static nvmlReturn_t text_of(const struct fake_device *device, enum field field, const char **value) {
    nvmlReturn_t failure;
    if (!asked[field])
        return NVML_ERROR_NOT_SUPPORTED;
    failure = token_error(device->values[field]);
    if (failure != NVML_SUCCESS)
        return failure;
    *value = device->values[field];
    return NVML_SUCCESS;
}

static nvmlReturn_t number_of(const struct fake_device *device, enum field field, unsigned long long *number) {
    const char *value;
    char *end;
    nvmlReturn_t failure = text_of(device, field, &value);
    if (failure != NVML_SUCCESS)
        return failure;
    errno = 0;
    *number = strtoull(value, &end, 0);
    return errno || *end || end == value ? NVML_ERROR_UNKNOWN : NVML_SUCCESS;
}

/* Enabled/Disabled, Yes/No */
static nvmlReturn_t flag_of(const struct fake_device *device, enum field field, unsigned int *flag) {
    const char *value;
    nvmlReturn_t failure = text_of(device, field, &value);
    if (failure != NVML_SUCCESS)
        return failure;
    if (!strcmp(value, "Enabled") || !strcmp(value, "Yes")) {
        *flag = 1;
        return NVML_SUCCESS;
    }
    if (!strcmp(value, "Disabled") || !strcmp(value, "No")) {
        *flag = 0;
        return NVML_SUCCESS;
    }
    return NVML_ERROR_UNKNOWN;
}

static nvmlReturn_t copy_text(const char *value, char *buffer, unsigned int length) {
    size_t needed = strlen(value) + 1;
    if (!buffer)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (needed > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(buffer, value, needed);
    return NVML_SUCCESS;
}

/* The device behind a handle, under the lock. */
static nvmlReturn_t device_of(nvmlDevice_t handle, struct fake_device **device) {
    uintptr_t address = (uintptr_t)handle, first = (uintptr_t)&devices[0];
    if (!refcount)
        return NVML_ERROR_UNINITIALIZED;
    if (address < first || address >= (uintptr_t)&devices[device_count]
        || (address - first) % sizeof(struct fake_device) != 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (handle->failure != NVML_SUCCESS)
        return handle->failure;
    *device = handle;
    return NVML_SUCCESS;
}

#define WITH_DEVICE(handle, device)                          \
    struct fake_device *device = NULL;                       \
    nvmlReturn_t status;                                     \
    pthread_mutex_lock(&lock);                               \
    status = device_of((handle), &device);                   \
    if (status != NVML_SUCCESS) {                            \
        pthread_mutex_unlock(&lock);                         \
        return status;                                       \
    }

#define DONE(value)                                          \
    do {                                                     \
        status = (value);                                    \
        pthread_mutex_unlock(&lock);                         \
        return status;                                       \
    } while (0)

/* ---- the exported API ---- */

EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    nvmlReturn_t status = NVML_SUCCESS;
    (void)flags;
    pthread_mutex_lock(&lock);
    if (refcount == 0)
        status = load_devices();
    if (status == NVML_SUCCESS)
        refcount++;
    else
        forget();
    pthread_mutex_unlock(&lock);
    return status;
}

EXPORT nvmlReturn_t nvmlInit_v2(void) {
    return nvmlInitWithFlags(0);
}

EXPORT nvmlReturn_t nvmlInit(void) {
    return nvmlInitWithFlags(0);
}

EXPORT nvmlReturn_t nvmlShutdown(void) {
    nvmlReturn_t status = NVML_SUCCESS;
    pthread_mutex_lock(&lock);
    if (refcount == 0)
        status = NVML_ERROR_UNINITIALIZED;
    else if (--refcount == 0)
        forget();
    pthread_mutex_unlock(&lock);
    return status;
}

EXPORT const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER: return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_IRQ_ISSUE: return "Interrupt Request Issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM: return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED: return "GPU requires restart";
    case NVML_ERROR_OPERATING_SYSTEM: return "The operating system has blocked the request.";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "RM has detected an NVML/RM version mismatch.";
    case NVML_ERROR_IN_USE: return "In use by another client";
    case NVML_ERROR_MEMORY: return "Insufficient Memory";
    case NVML_ERROR_NO_DATA: return "No data";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    default: return "Unknown Error";
    }
}

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    nvmlReturn_t status = NVML_SUCCESS;
    int index;
    pthread_mutex_lock(&lock);
    if (!refcount)
        DONE(NVML_ERROR_UNINITIALIZED);
    for (index = 0; index < device_count && !driver_version[0]; index++) {
        const char *value;
        if (devices[index].failure == NVML_SUCCESS && text_of(&devices[index], F_DRIVER, &value) == NVML_SUCCESS)
            copy_value(driver_version, value, strlen(value));
    }
    if (!driver_version[0]) {   /* no GPU answered: the version the tool itself reports */
        struct smi_result result;
        char option[] = "--version";
        char *extra[1] = {option};
        const char *found;
        if (run_smi(extra, 1, &result) < 0)
            DONE(NVML_ERROR_MEMORY);
        found = strstr(result.output, "DRIVER version");
        if (result.exited && result.code == 0 && found && strchr(found, ':')) {
            const char *start = strchr(found, ':') + 1;
            copy_value(driver_version, start, strcspn(start, "\n"));
            trim(driver_version);
        } else {
            status = result.exited && result.code == 0 ? NVML_ERROR_UNKNOWN : smi_failure(&result);
        }
        smi_free(&result);
        if (status != NVML_SUCCESS)
            DONE(status);
    }
    DONE(copy_text(driver_version, version, length));
}

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    nvmlReturn_t status;
    pthread_mutex_lock(&lock);
    if (!refcount)
        DONE(NVML_ERROR_UNINITIALIZED);
    if (!count)
        DONE(NVML_ERROR_INVALID_ARGUMENT);
    *count = (unsigned int)device_count;
    DONE(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) {
    return nvmlDeviceGetCount_v2(count);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    nvmlReturn_t status;
    pthread_mutex_lock(&lock);
    if (!refcount)
        DONE(NVML_ERROR_UNINITIALIZED);
    if (!device || index >= (unsigned int)device_count)
        DONE(NVML_ERROR_INVALID_ARGUMENT);
    if (devices[index].failure != NVML_SUCCESS)
        DONE(devices[index].failure);
    *device = &devices[index];
    DONE(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device) {
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
    nvmlReturn_t status;
    int index;
    pthread_mutex_lock(&lock);
    if (!refcount)
        DONE(NVML_ERROR_UNINITIALIZED);
    if (!uuid || !device)
        DONE(NVML_ERROR_INVALID_ARGUMENT);
    for (index = 0; index < device_count; index++) {
        if (devices[index].failure == NVML_SUCCESS && !strcmp(devices[index].values[F_UUID], uuid)) {
            *device = &devices[index];
            DONE(NVML_SUCCESS);
        }
    }
    DONE(NVML_ERROR_NOT_FOUND);
}

static int same_bus(const char *known, const char *wanted) {
    size_t known_length = strlen(known), wanted_length = strlen(wanted);
    if (!known_length || !wanted_length)
        return 0;
    if (wanted_length < known_length)   /* 0000:3A:00.0 or 3A:00.0 for 00000000:3A:00.0 */
        return strcasecmp(known + known_length - wanted_length, wanted) == 0;
    return strcasecmp(known, wanted) == 0;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *bus_id, nvmlDevice_t *device) {
    nvmlReturn_t status;
    int index;
    pthread_mutex_lock(&lock);
    if (!refcount)
        DONE(NVML_ERROR_UNINITIALIZED);
    if (!bus_id || !device)
        DONE(NVML_ERROR_INVALID_ARGUMENT);
    for (index = 0; index < device_count; index++) {
        if (same_bus(devices[index].bus_id, bus_id)) {
            if (devices[index].failure != NVML_SUCCESS)
                DONE(devices[index].failure);
            *device = &devices[index];
            DONE(NVML_SUCCESS);
        }
    }
    DONE(NVML_ERROR_NOT_FOUND);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *bus_id, nvmlDevice_t *device) {
    return nvmlDeviceGetHandleByPciBusId_v2(bus_id, device);
}

EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t handle, unsigned int *index) {
    WITH_DEVICE(handle, device)
    if (!index)
        DONE(NVML_ERROR_INVALID_ARGUMENT);
    *index = (unsigned int)(device - devices);
    DONE(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t handle, char *name, unsigned int length) {
    const char *value;
    WITH_DEVICE(handle, device)
    status = text_of(device, F_NAME, &value);
    DONE(status == NVML_SUCCESS ? copy_text(value, name, length) : status);
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t handle, char *uuid, unsigned int length) {
    const char *value;
    WITH_DEVICE(handle, device)
    status = text_of(device, F_UUID, &value);
    DONE(status == NVML_SUCCESS ? copy_text(value, uuid, length) : status);
}

/* 00000000:18:00.0 -> domain, bus, device; the ids from pci.device_id and pci.sub_device_id. */
static nvmlReturn_t pci_numbers(const struct fake_device *device, unsigned int numbers[5]) {
    const char *value;
    unsigned long long id;
    unsigned int function;
    nvmlReturn_t status = text_of(device, F_BUS_ID, &value);
    if (status != NVML_SUCCESS)
        return status;
    if (sscanf(value, "%x:%x:%x.%x", &numbers[0], &numbers[1], &numbers[2], &function) != 4)
        return NVML_ERROR_UNKNOWN;
    numbers[3] = number_of(device, F_DEVICE_ID, &id) == NVML_SUCCESS ? (unsigned int)id : 0;
    numbers[4] = number_of(device, F_SUBSYSTEM_ID, &id) == NVML_SUCCESS ? (unsigned int)id : 0;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t handle, nvmlPciInfo_t *pci) {
    unsigned int numbers[5];
    WITH_DEVICE(handle, device)
    if (!pci)
        DONE(NVML_ERROR_INVALID_ARGUMENT);
    status = pci_numbers(device, numbers);
    if (status != NVML_SUCCESS)
        DONE(status);
    memset(pci, 0, sizeof(*pci));
    pci->domain = numbers[0];
    pci->bus = numbers[1];
    pci->device = numbers[2];
    pci->pciDeviceId = numbers[3];
    pci->pciSubSystemId = numbers[4];
    snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%04X:%02X:%02X.0", numbers[0] & 0xFFFF, numbers[1], numbers[2]);
    snprintf(pci->busId, sizeof(pci->busId), "%08X:%02X:%02X.0", numbers[0], numbers[1], numbers[2]);
    DONE(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t handle, nvmlPciInfoLegacy_t *pci) {
    unsigned int numbers[5];
    WITH_DEVICE(handle, device)
    if (!pci)
        DONE(NVML_ERROR_INVALID_ARGUMENT);
    status = pci_numbers(device, numbers);
    if (status != NVML_SUCCESS)
        DONE(status);
    memset(pci, 0, sizeof(*pci));
    pci->domain = numbers[0];
    pci->bus = numbers[1];
    pci->device = numbers[2];
    pci->pciDeviceId = numbers[3];
    pci->pciSubSystemId = numbers[4];
    snprintf(pci->busId, sizeof(pci->busId), "%04X:%02X:%02X.0", numbers[0] & 0xFFFF, numbers[1], numbers[2]);
    DONE(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t handle, nvmlPciInfoLegacy_t *pci) {
    return nvmlDeviceGetPciInfo_v2(handle, pci);
}

/* total, reserved, used, free in MiB; reserved stays unknown (-1) on a driver without memory.reserved. */
static nvmlReturn_t memory_of(const struct fake_device *device, unsigned long long mib[4], int *reserved_known) {
    nvmlReturn_t status;
    if ((status = number_of(device, F_TOTAL, &mib[0])) != NVML_SUCCESS
        || (status = number_of(device, F_USED, &mib[2])) != NVML_SUCCESS
        || (status = number_of(device, F_FREE, &mib[3])) != NVML_SUCCESS)
        return status;
    *reserved_known = asked[F_RESERVED];
    mib[1] = 0;
    if (asked[F_RESERVED] && (status = number_of(device, F_RESERVED, &mib[1])) != NVML_SUCCESS)
        return status;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t handle, nvmlMemory_t *memory) {
    unsigned long long mib[4];
    int reserved_known;
    WITH_DEVICE(handle, device)
    if (!memory)
        DONE(NVML_ERROR_INVALID_ARGUMENT);
    status = memory_of(device, mib, &reserved_known);
    if (status != NVML_SUCCESS)
        DONE(status);
    memory->total = mib[0] * MIB;
    memory->used = (mib[1] + mib[2]) * MIB;   /* v1: reserved + allocated, as drivers since R510 report it */
    memory->free = mib[3] * MIB;
    DONE(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t handle, nvmlMemory_v2_t *memory) {
    unsigned long long mib[4];
    int reserved_known;
    WITH_DEVICE(handle, device)
    if (!memory)
        DONE(NVML_ERROR_INVALID_ARGUMENT);
    if (memory->version != nvmlMemory_v2)
        DONE(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    if (!asked[F_RESERVED])
        DONE(NVML_ERROR_FUNCTION_NOT_FOUND);      /* a driver before memory.reserved: no _v2 either */
    status = memory_of(device, mib, &reserved_known);
    if (status != NVML_SUCCESS)
        DONE(status);
    memory->total = mib[0] * MIB;
    memory->reserved = mib[1] * MIB;
    memory->used = mib[2] * MIB;
    memory->free = mib[3] * MIB;
    DONE(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t handle, int *mode) {
    unsigned int flag;
    WITH_DEVICE(handle, device)
    if (!mode)
        DONE(NVML_ERROR_INVALID_ARGUMENT);
    status = flag_of(device, F_PERSISTENCE, &flag);
    if (status == NVML_SUCCESS)
        *mode = (int)flag;
    DONE(status);
}

EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t handle, unsigned int *current, unsigned int *pending) {
    unsigned int now, next;
    WITH_DEVICE(handle, device)
    if (!current || !pending)
        DONE(NVML_ERROR_INVALID_ARGUMENT);
    status = flag_of(device, F_MIG_CURRENT, &now);
    if (status != NVML_SUCCESS)
        DONE(status);
    if (flag_of(device, F_MIG_PENDING, &next) != NVML_SUCCESS)
        next = now;
    *current = now;
    *pending = next;
    DONE(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t handle, int error_type, int counter_type,
                                                unsigned long long *count) {
    static const enum field FIELDS[2][2] = {
        {F_ECC_CORRECTED_VOLATILE, F_ECC_CORRECTED_AGGREGATE},        /* NVML_MEMORY_ERROR_TYPE_CORRECTED */
        {F_ECC_UNCORRECTED_VOLATILE, F_ECC_UNCORRECTED_AGGREGATE},    /* NVML_MEMORY_ERROR_TYPE_UNCORRECTED */
    };
    WITH_DEVICE(handle, device)
    if (!count || error_type < 0 || error_type > 1 || counter_type < 0 || counter_type > 1)
        DONE(NVML_ERROR_INVALID_ARGUMENT);
    DONE(number_of(device, FIELDS[error_type][counter_type], count));
}

EXPORT nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t handle, unsigned int *correctable, unsigned int *uncorrectable,
                                              unsigned int *pending, unsigned int *failure) {
    unsigned long long rows[2];
    unsigned int flags[2];
    WITH_DEVICE(handle, device)
    if (!correctable || !uncorrectable || !pending || !failure)
        DONE(NVML_ERROR_INVALID_ARGUMENT);
    if ((status = number_of(device, F_REMAPPED_CORRECTABLE, &rows[0])) != NVML_SUCCESS
        || (status = number_of(device, F_REMAPPED_UNCORRECTABLE, &rows[1])) != NVML_SUCCESS
        || (status = flag_of(device, F_REMAPPED_PENDING, &flags[0])) != NVML_SUCCESS
        || (status = flag_of(device, F_REMAPPED_FAILURE, &flags[1])) != NVML_SUCCESS)
        DONE(status);
    *correctable = (unsigned int)rows[0];
    *uncorrectable = (unsigned int)rows[1];
    *pending = flags[0];
    *failure = flags[1];
    DONE(NVML_SUCCESS);
}

/* nvidia-smi's retired_pages.pending (Yes/No) -> nvmlEnableState_t */
EXPORT nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t handle, unsigned int *pending) {
    WITH_DEVICE(handle, device)
    if (!pending)
        DONE(NVML_ERROR_INVALID_ARGUMENT);
    DONE(flag_of(device, F_RETIRED_PENDING, pending));
}

/* nvidia-smi's gpu_recovery_action text -> nvmlDeviceGpuRecoveryAction_t */
static nvmlReturn_t recovery_action(const struct fake_device *device, unsigned int *action) {
    static const char *const NAMES[] = {"None", "Reset", "Reboot", "Drain P2P", "Drain and Reset"};
    const char *value;
    unsigned int index;
    nvmlReturn_t status = text_of(device, F_RECOVERY_ACTION, &value);
    if (status != NVML_SUCCESS)
        return status;
    for (index = 0; index < sizeof(NAMES) / sizeof(NAMES[0]); index++) {
        if (!strcmp(value, NAMES[index])) {
            *action = index;
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_UNKNOWN;
}

EXPORT nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t handle, int count, nvmlFieldValue_t *values) {
    struct timeval now;
    int index;
    WITH_DEVICE(handle, device)
    if (!values || count < 0)
        DONE(NVML_ERROR_INVALID_ARGUMENT);
    gettimeofday(&now, NULL);
    for (index = 0; index < count; index++) {
        nvmlFieldValue_t *entry = &values[index];
        entry->timestamp = (long long)now.tv_sec * 1000000LL + now.tv_usec;
        entry->latencyUsec = 0;
        entry->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
        memset(&entry->value, 0, sizeof(entry->value));
        if (entry->fieldId == NVML_FI_DEV_GET_GPU_RECOVERY_ACTION)
            entry->nvmlReturn = recovery_action(device, &entry->value.uiVal);
        else
            entry->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
    }
    DONE(NVML_SUCCESS);
}

/* version 1: nvmlProcessInfo_v1_t; 2 and 3: nvmlProcessInfo_t */
static nvmlReturn_t running_processes(nvmlDevice_t handle, unsigned int *count, void *infos, int version) {
    const char *uuid;
    unsigned int found = 0;
    int index;
    WITH_DEVICE(handle, device)
    if (!count)
        DONE(NVML_ERROR_INVALID_ARGUMENT);
    if ((status = text_of(device, F_UUID, &uuid)) != NVML_SUCCESS || (status = load_processes()) != NVML_SUCCESS)
        DONE(status);
    for (index = 0; index < process_count; index++)
        found += strcmp(processes[index].gpu_uuid, uuid) == 0;
    if (found == 0) {
        *count = 0;
        DONE(NVML_SUCCESS);
    }
    if (!infos || *count < found) {
        *count = found;
        DONE(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    found = 0;
    for (index = 0; index < process_count; index++) {
        const struct process *entry = &processes[index];
        if (strcmp(entry->gpu_uuid, uuid) != 0)
            continue;
        if (version == 1) {
            nvmlProcessInfo_v1_t *info = (nvmlProcessInfo_v1_t *)infos + found;
            info->pid = entry->pid;
            info->usedGpuMemory = entry->used_bytes;
        } else {
            nvmlProcessInfo_t *info = (nvmlProcessInfo_t *)infos + found;
            info->pid = entry->pid;
            info->usedGpuMemory = entry->used_bytes;
            info->gpuInstanceId = NVML_VALUE_NOT_AVAILABLE_UINT;
            info->computeInstanceId = NVML_VALUE_NOT_AVAILABLE_UINT;
        }
        found++;
    }
    *count = found;
    DONE(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t handle, unsigned int *count, nvmlProcessInfo_t *infos) {
    return running_processes(handle, count, infos, 3);
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t handle, unsigned int *count, nvmlProcessInfo_t *infos) {
    return running_processes(handle, count, infos, 2);
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t handle, unsigned int *count, nvmlProcessInfo_v1_t *infos) {
    return running_processes(handle, count, infos, 1);
}

EXPORT nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char *name, unsigned int length) {
    nvmlReturn_t status;
    int index;
    pthread_mutex_lock(&lock);
    if (!refcount)
        DONE(NVML_ERROR_UNINITIALIZED);
    if ((status = load_processes()) != NVML_SUCCESS)
        DONE(status);
    for (index = 0; index < process_count; index++) {
        if (processes[index].pid == pid)
            DONE(copy_text(processes[index].name, name, length));
    }
    DONE(NVML_ERROR_NOT_FOUND);
}
