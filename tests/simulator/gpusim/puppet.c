/* One process of a hostile world (gpusim/hostile.py): any argv, title and comm, any user, its own PID or mount
 * namespace, descriptors, mappings, threads with their own descriptor tables, GPU memory through the simulated
 * driver, children (restarted when they exit, if asked), and a record of every signal it receives.
 *
 * A puppet is started with its spec open as descriptor 3 (a text file, one directive a line, every string
 * hex-encoded so that any byte but NUL can be in it) and its generated argv; the argv is what /proc shows, the
 * program is always this binary. A string of the spec is written "x" and its bytes in hex.
 * `puppet --spawn DIR INDEX...` starts the given top-level processes of the world in DIR and exits, so that they
 * are reparented to the init of their namespace, as daemons are.
 *
 * Records, in the world directory:
 *   sig.INDEX.GEN   "start", then one "sig SIGNO CODE PID UID" line per signal received (written by the handler
 *                   with write(2) alone), "exit SIGNO" when it leaves because of a signal
 *   ready.log       "ready INDEX GEN START_NS ALLOC_NS" once its setup is done (CLOCK_MONOTONIC, shared by every
 *                   namespace of the machine), "fail INDEX GEN WHAT ERRNO" when a step of the setup failed
 */

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <time.h>
#include <unistd.h>

#define MAX_LIST 64
#define MAX_CHILDREN 2048
#define DRIVER_SOCKET "/run/gpusim/driver.sock"

extern char **environ;

struct spec {
    int index, gen;
    char dir[4096];
    char *title[256];
    int title_count;
    char comm[64];
    int uid, gid;
    char session[16];
    char *cgroups[MAX_LIST]; int cgroup_count;
    int fakedev;
    char *opens[MAX_LIST]; int open_count;
    char *maps[MAX_LIST]; int map_count;
    char *thread_opens[MAX_LIST]; int thread_open_count;
    int alloc_minor[MAX_LIST], alloc_mib[MAX_LIST]; int alloc_count;
    int threads, own_tables, fds;
    char *shm_names[MAX_LIST]; char shm_modes[MAX_LIST][8]; int shm_count;
    int listen_port;
    char term[16]; int term_delay_ms;
    int main_exit, exit_now, noreap;
    int children[MAX_CHILDREN]; int child_count;
    int restart_ms;
};

static struct spec S;
static int sig_fd = -1, ready_fd = -1, self_fd = -1;
/* Descriptors opened before the puppet becomes its user (see prepare): after it, no path is looked up. */
static int child_spec_fd[MAX_CHILDREN], thread_fd[MAX_LIST];
static volatile sig_atomic_t leaving = 0;
static char self_path[4096];

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* A string of the spec: "x" then its bytes in hex (so that the empty string is a word too). */
static char *unhex(const char *text) {
    if (*text == 'x') text++;
    size_t length = strlen(text) / 2;
    char *out = malloc(length + 1);
    for (size_t i = 0; i < length; i++)
        out[i] = (char)(hexval(text[2 * i]) * 16 + hexval(text[2 * i + 1]));
    out[length] = 0;
    return out;
}

/* Async-signal-safe formatting: only write(2) and stack buffers. */
static size_t put_number(char *out, long value) {
    char digits[24]; size_t n = 0, i = 0;
    if (value < 0) { out[i++] = '-'; value = -value; }
    do { digits[n++] = (char)('0' + value % 10); value /= 10; } while (value);
    while (n) out[i++] = digits[--n];
    return i;
}

static void record(const char *word, long a, long b, long c, long d, int count) {
    char line[160]; size_t i = 0;
    long values[4] = {a, b, c, d};
    for (const char *p = word; *p; p++) line[i++] = *p;
    for (int k = 0; k < count; k++) { line[i++] = ' '; i += put_number(line + i, values[k]); }
    line[i++] = '\n';
    if (sig_fd >= 0) (void)!write(sig_fd, line, i);
}

static long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

static void ready_line(const char *word, long a, long b) {
    char line[200];
    int n = snprintf(line, sizeof line, "%s %d %d %ld %ld\n", word, S.index, S.gen, a, b);
    if (ready_fd >= 0) (void)!write(ready_fd, line, (size_t)n);
}

static void fail(const char *what) {
    char line[300];
    int n = snprintf(line, sizeof line, "fail %d %d %s %d\n", S.index, S.gen, what, errno);
    if (ready_fd >= 0) (void)!write(ready_fd, line, (size_t)n);
}

static int is_termination(int signo) {
    return signo == SIGTERM || signo == SIGINT || signo == SIGQUIT || signo == SIGHUP || signo == SIGUSR1 ||
           signo == SIGUSR2;
}

static void on_signal(int signo, siginfo_t *info, void *context) {
    (void)context;
    record("sig", signo, info->si_code, info->si_pid, info->si_uid, 4);
    if (!is_termination(signo) || leaving) return;
    if (strcmp(S.term, "ignore") == 0) return;
    if (strcmp(S.term, "hang") == 0) { for (;;) pause(); }
    leaving = 1;
    if (S.term_delay_ms > 0) {
        struct timespec delay = {S.term_delay_ms / 1000, (S.term_delay_ms % 1000) * 1000000L};
        nanosleep(&delay, NULL);
    }
    record("exit", signo, 0, 0, 0, 1);
    _exit(0);
}

static void read_spec(int fd) {
    FILE *in = fdopen(fd, "r");
    char *line = NULL; size_t size = 0;
    strcpy(S.term, "exit");
    strcpy(S.session, "same");
    S.uid = S.gid = -1;
    while (in && getline(&line, &size, in) > 0) {
        line[strcspn(line, "\n")] = 0;
        char *key = strtok(line, " "), *value = strtok(NULL, " ");
        if (!key) continue;
        if (!strcmp(key, "index")) S.index = atoi(value);
        else if (!strcmp(key, "gen")) S.gen = atoi(value);
        else if (!strcmp(key, "dir")) snprintf(S.dir, sizeof S.dir, "%s", unhex(value));
        else if (!strcmp(key, "title")) {
            for (char *word = value; word && S.title_count < 255; word = strtok(NULL, " "))
                S.title[S.title_count++] = unhex(word);
        }
        else if (!strcmp(key, "comm")) snprintf(S.comm, sizeof S.comm, "%s", unhex(value));
        else if (!strcmp(key, "user")) { S.uid = atoi(value); S.gid = atoi(strtok(NULL, " ")); }
        else if (!strcmp(key, "session")) snprintf(S.session, sizeof S.session, "%s", value);
        else if (!strcmp(key, "cgroup") && S.cgroup_count < MAX_LIST) S.cgroups[S.cgroup_count++] = unhex(value);
        else if (!strcmp(key, "fakedev")) S.fakedev = 1;
        else if (!strcmp(key, "open") && S.open_count < MAX_LIST) S.opens[S.open_count++] = unhex(value);
        else if (!strcmp(key, "map") && S.map_count < MAX_LIST) S.maps[S.map_count++] = unhex(value);
        else if (!strcmp(key, "thread_open") && S.thread_open_count < MAX_LIST)
            S.thread_opens[S.thread_open_count++] = unhex(value);
        else if (!strcmp(key, "alloc") && S.alloc_count < MAX_LIST) {
            S.alloc_minor[S.alloc_count] = atoi(value);
            S.alloc_mib[S.alloc_count++] = atoi(strtok(NULL, " "));
        }
        else if (!strcmp(key, "threads")) S.threads = atoi(value);
        else if (!strcmp(key, "own_tables")) S.own_tables = atoi(value);
        else if (!strcmp(key, "fds")) S.fds = atoi(value);
        else if (!strcmp(key, "shm") && S.shm_count < MAX_LIST) {
            S.shm_names[S.shm_count] = unhex(value);
            snprintf(S.shm_modes[S.shm_count++], 8, "%s", strtok(NULL, " "));
        }
        else if (!strcmp(key, "listen")) S.listen_port = atoi(value);
        else if (!strcmp(key, "term")) {
            snprintf(S.term, sizeof S.term, "%s", value);
            char *delay = strtok(NULL, " ");
            S.term_delay_ms = delay ? atoi(delay) : 0;
        }
        else if (!strcmp(key, "main_exit")) S.main_exit = 1;
        else if (!strcmp(key, "exit_now")) S.exit_now = 1;
        else if (!strcmp(key, "noreap")) S.noreap = 1;
        else if (!strcmp(key, "child") && S.child_count < MAX_CHILDREN) S.children[S.child_count++] = atoi(value);
        else if (!strcmp(key, "restart")) S.restart_ms = atoi(value);
    }
    if (in) fclose(in);
    free(line);
}

/* Overwrite the argument area with the title, as setproctitle does; comm gets its first 15 characters. */
static void set_title(char **argv) {
    char *start = argv[0], *end = argv[0];
    for (char **arg = argv; *arg; arg++) end = *arg + strlen(*arg) + 1;
    size_t room = (size_t)(end - start), used = 0;
    for (int i = 0; i < S.title_count; i++) {
        size_t length = strlen(S.title[i]) + 1;
        if (used + length > room) break;
        memcpy(start + used, S.title[i], length);
        used += length;
    }
    memset(start + used, 0, room - used);
    prctl(PR_SET_NAME, S.title[0], 0, 0, 0);
}

static int spawn(int index, int gen, int spec_fd);

static void *idle_thread(void *arg) {
    (void)arg;
    for (;;) pause();
    return NULL;
}

struct table_thread { int keep; pthread_mutex_t *lock; pthread_cond_t *done; int *left; };

static void *own_table_thread(void *arg) {
    struct table_thread *job = arg;
    /* The new table is a copy of the shared one: it keeps 0-2, its records and its own device descriptor (if any). */
    if (syscall(SYS_unshare, CLONE_FILES) != 0) fail("unshare-files");
    int keep[] = {sig_fd, ready_fd, job->keep}, from = 3;
    for (int round = 0; round < 3; round++) {  /* close every gap between the kept ones, lowest first */
        int next = -1;
        for (int k = 0; k < 3; k++) if (keep[k] >= from && (next < 0 || keep[k] < next)) next = keep[k];
        if (next < 0) break;
        if (next > from) syscall(SYS_close_range, from, next - 1, 0);
        from = next + 1;
    }
    syscall(SYS_close_range, from, ~0U, 0);
    pthread_mutex_lock(job->lock);
    if (--*job->left == 0) pthread_cond_signal(job->done);
    pthread_mutex_unlock(job->lock);
    for (;;) pause();
    return NULL;
}

static void start_threads(void) {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    pthread_t thread;
    for (int i = 0; i < S.threads; i++)
        if (pthread_create(&thread, &attr, idle_thread, NULL) != 0) { errno = EAGAIN; fail("thread"); break; }
    int total = S.own_tables + S.thread_open_count;
    if (total == 0) return;
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static pthread_cond_t done = PTHREAD_COND_INITIALIZER;
    static int left;
    struct table_thread *jobs = calloc((size_t)total, sizeof *jobs);
    left = total;
    for (int i = 0; i < total; i++) {
        jobs[i] = (struct table_thread){i < S.thread_open_count ? thread_fd[i] : -1, &lock, &done, &left};
        if (pthread_create(&thread, &attr, own_table_thread, &jobs[i]) != 0) {
            errno = EAGAIN; fail("thread"); pthread_mutex_lock(&lock); left -= total - i; pthread_mutex_unlock(&lock);
            break;
        }
    }
    pthread_mutex_lock(&lock);
    while (left > 0) pthread_cond_wait(&done, &lock);
    pthread_mutex_unlock(&lock);
    for (int i = 0; i < S.thread_open_count; i++) if (thread_fd[i] >= 0) close(thread_fd[i]);
}

static void alloc_gpu(int minor, int mib) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    snprintf(address.sun_path, sizeof address.sun_path, "%s", DRIVER_SOCKET);
    if (fd < 0 || connect(fd, (struct sockaddr *)&address, sizeof address) != 0) { fail("driver"); return; }
    char request[128], answer[256];
    int n = snprintf(request, sizeof request, "{\"op\": \"alloc\", \"minor\": %d, \"mib\": %d}\n", minor, mib);
    if (write(fd, request, (size_t)n) != n) fail("driver-write");
    else if (read(fd, answer, sizeof answer) <= 0) fail("driver-read");
    close(fd);
}

#define MAX_MINORS 256
static int reached_minor[MAX_MINORS];

/* A device file of this process's /dev it could open: /dev/nvidiaN marks GPU N reached. */
static void reached(const char *path) {
    int minor;
    char rest;
    if (sscanf(path, "/dev/nvidia%d%c", &minor, &rest) == 1 && minor >= 0 && minor < MAX_MINORS)
        reached_minor[minor] = 1;
}

static void fake_dev(void) {
    /* A /dev of its own: a tmpfs whose nvidia0 is an ordinary file, not the node's device. */
    if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
        mount("tmpfs", "/dev", "tmpfs", 0, "mode=755") != 0) { fail("fakedev"); return; }
    const char *names[] = {"/dev/null", "/dev/nvidiactl", "/dev/nvidia0", "/dev/nvidia-uvm"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) close(open(names[i], O_CREAT | O_RDWR, 0666));
}

static void setup(char **argv) {
    for (int i = 0; i < S.cgroup_count; i++) {
        int fd = open(S.cgroups[i], O_WRONLY | O_CLOEXEC);
        if (fd < 0 || write(fd, "0", 1) != 1) fail("cgroup");
        if (fd >= 0) close(fd);
    }
    if (!strcmp(S.session, "setsid")) setsid();
    else if (!strcmp(S.session, "pgrp")) setpgid(0, 0);
    if (S.fakedev) fake_dev();
    if (S.title_count) set_title(argv);
    if (S.comm[0]) prctl(PR_SET_NAME, S.comm, 0, 0, 0);
    for (int i = 0; i < S.open_count; i++) {
        if (open(S.opens[i], O_RDWR) < 0 && open(S.opens[i], O_RDONLY) < 0) fail("open");
        else reached(S.opens[i]);
    }
    for (int i = 0; i < S.map_count; i++) {
        int fd = open(S.maps[i], O_RDWR);
        void *address = fd < 0 ? MAP_FAILED : mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (address == MAP_FAILED) fail("map");
        else reached(S.maps[i]);
        if (fd >= 0) close(fd);
    }
    for (int i = 0; i < S.shm_count; i++) {
        int fd = open(S.shm_names[i], O_RDWR | O_CREAT, 0600);
        if (fd < 0) { fail("shm"); continue; }
        if (S.uid >= 0 && fchown(fd, (uid_t)S.uid, (gid_t)S.gid) != 0) fail("shm-owner");
        if (ftruncate(fd, 4096) != 0) fail("shm-size");
        if (!strcmp(S.shm_modes[i], "map") &&
            mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) == MAP_FAILED) fail("shm-map");
        if (strcmp(S.shm_modes[i], "open") != 0) close(fd);
    }
    if (S.listen_port) {
        int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
        struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons((uint16_t)S.listen_port)};
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, (struct sockaddr *)&address, sizeof address) != 0 || listen(fd, 16) != 0) fail("listen");
    }
    if (S.fds) {
        /* As a user may: the soft limit raised up to the hard one (root may raise both). Room is kept for the
         * puppet's own records (ready.log, children's specs). */
        struct rlimit limit;
        getrlimit(RLIMIT_NOFILE, &limit);
        rlim_t wanted = (rlim_t)S.fds + 64;
        if (wanted > limit.rlim_max && getuid() == 0) limit.rlim_max = wanted;
        limit.rlim_cur = wanted < limit.rlim_max ? wanted : limit.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &limit) != 0) { fail("rlimit"); getrlimit(RLIMIT_NOFILE, &limit); }
        int null = open("/dev/null", O_RDONLY), count = (int)limit.rlim_cur - 64;
        for (int i = 1; i < S.fds && i < count; i++) if (dup(null) < 0) { fail("fds"); break; }
    }
    for (int i = 0; i < S.thread_open_count; i++) {
        if ((thread_fd[i] = open(S.thread_opens[i], O_RDWR)) < 0) fail("thread-open");
        else reached(S.thread_opens[i]);
    }
    /* Memory only on a GPU whose device file it could open or map, as a CUDA context needs one. */
    for (int i = 0; i < S.alloc_count; i++)
        if (S.alloc_minor[i] >= 0 && S.alloc_minor[i] < MAX_MINORS && reached_minor[S.alloc_minor[i]])
            alloc_gpu(S.alloc_minor[i], S.alloc_mib[i]);
        else { errno = ENODEV; fail("alloc-unreached"); }
    struct rlimit files;
    getrlimit(RLIMIT_NOFILE, &files);
    if (files.rlim_cur < (rlim_t)S.child_count + (rlim_t)S.fds + 128) {  /* one spec descriptor per child */
        files.rlim_cur = files.rlim_max < (rlim_t)S.child_count + (rlim_t)S.fds + 128 ? files.rlim_max
                         : (rlim_t)S.child_count + (rlim_t)S.fds + 128;
        setrlimit(RLIMIT_NOFILE, &files);
    }
    for (int i = 0; i < S.child_count; i++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/spec.%d", S.dir, S.children[i]);
        if ((child_spec_fd[i] = open(path, O_RDONLY | O_CLOEXEC)) < 0) fail("spec");
    }
    if (S.uid >= 0 && getuid() != (uid_t)S.uid) {
        if (setgroups(0, NULL) != 0 || setgid((gid_t)S.gid) != 0 || setuid((uid_t)S.uid) != 0) fail("user");
    }
}

struct child_slot { pid_t pid; int index, gen; long died_ns; };

int main(int argc, char **argv) {
    if (readlink("/proc/self/exe", self_path, sizeof self_path - 1) < 0) strcpy(self_path, argv[0]);
    self_fd = open(self_path, O_PATH | O_CLOEXEC);
    if (argc >= 3 && !strcmp(argv[1], "--spawn")) {
        snprintf(S.dir, sizeof S.dir, "%s", argv[2]);
        for (int i = 3; i < argc; i++) {
            char path[4200];
            snprintf(path, sizeof path, "%s/spec.%s", S.dir, argv[i]);
            if (spawn(atoi(argv[i]), 0, open(path, O_RDONLY | O_CLOEXEC)) < 0) return 1;
        }
        return 0;
    }
    read_spec(3);
    close(3);
    char ready_path[4200];
    snprintf(ready_path, sizeof ready_path, "%s/ready.log", S.dir);
    ready_fd = open(ready_path, O_WRONLY | O_APPEND | O_CLOEXEC);
    const char *tag = getenv("HOSTILE_PUPPET");
    if (tag && strchr(tag, '.')) S.gen = atoi(strchr(tag, '.') + 1);
    char path[4200];
    snprintf(path, sizeof path, "%s/sig.%d.%d", S.dir, S.index, S.gen);
    sig_fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
    record("start", 0, 0, 0, 0, 0);
    /* Nested delivery (SA_NODEFER, nothing masked): a signal that arrives while a handler waits is recorded too. */
    struct sigaction action = {.sa_sigaction = on_signal, .sa_flags = SA_SIGINFO | SA_RESTART | SA_NODEFER};
    sigemptyset(&action.sa_mask);
    for (int signo = 1; signo < NSIG; signo++) {
        if (signo == SIGKILL || signo == SIGSTOP || (signo >= 32 && signo < SIGRTMIN)) continue;
        sigaction(signo, &action, NULL);
    }
    long started = now_ns();
    setup(argv);
    long allocated = S.alloc_count ? now_ns() : 0;
    start_threads();
    struct child_slot *slots = calloc(MAX_CHILDREN, sizeof *slots);
    for (int i = 0; i < S.child_count; i++)
        slots[i] = (struct child_slot){spawn(S.children[i], 0, child_spec_fd[i]), S.children[i], 0, 0};
    ready_line("ready", started, allocated);
    if (S.exit_now) _exit(0);  /* its children stay, reparented to the init of their namespace */
    if (S.main_exit) pthread_exit(NULL);
    for (;;) {
        poll(NULL, 0, 50);
        if (S.noreap) continue;
        int status;
        pid_t pid;
        while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
            for (int i = 0; i < S.child_count; i++)
                if (slots[i].pid == pid) { slots[i].pid = 0; slots[i].died_ns = now_ns(); }
        if (!S.restart_ms) continue;
        for (int i = 0; i < S.child_count; i++)
            if (slots[i].pid == 0 && now_ns() - slots[i].died_ns >= S.restart_ms * 1000000L) {
                slots[i].gen++;
                slots[i].pid = spawn(slots[i].index, slots[i].gen, child_spec_fd[i]);
            }
    }
}

/* Start process INDEX of the world (generation GEN) from its spec, open as SPEC_FD: the spec becomes descriptor 3, the
 * argv the generated one; a process marked pidns is PID 1 of a new PID namespace (clone with CLONE_NEWPID, as
 * unshare --pid --fork does). The program is this binary, by its descriptor: nothing is looked up by path here. */
static int spawn(int index, int gen, int spec_fd) {
    if (spec_fd < 0) { fail("spec"); return -1; }
    static char text[1 << 20];
    ssize_t size = pread(spec_fd, text, sizeof text - 1, 0);
    if (size < 0) { fail("spec-read"); return -1; }
    text[size] = 0;
    char **args = calloc(4096, sizeof *args); int count = 0, pidns = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (!strncmp(line, "arg ", 4) && count < 4095) args[count++] = unhex(line + 4);
        else if (!strcmp(line, "pidns")) pidns = 1;
    }
    if (count == 0) args[count++] = strdup("");
    char *env[] = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", NULL, NULL};
    char tag[64];
    snprintf(tag, sizeof tag, "HOSTILE_PUPPET=%d.%d", index, gen);
    env[1] = tag;
    long flags = SIGCHLD | (pidns ? CLONE_NEWPID : 0);
    pid_t pid = (pid_t)syscall(SYS_clone, flags, 0, 0, 0, 0);
    if (pid < 0) { fail("clone"); return -1; }
    if (pid > 0) { for (int i = 0; i < count; i++) free(args[i]); free(args); return pid; }
    /* The child: its spec on descriptor 3 (its generation in HOSTILE_PUPPET), nothing else inherited but 0-2. */
    int self = fcntl(self_fd, F_DUPFD_CLOEXEC, 5);
    int null = open("/dev/null", O_RDWR);
    dup2(null, 0); dup2(null, 1); dup2(null, 2);
    if (spec_fd == 3) fcntl(3, F_SETFD, 0);
    else dup2(spec_fd, 3);
    lseek(3, 0, SEEK_SET);
    syscall(SYS_close_range, 4, self - 1, 0);
    syscall(SYS_close_range, self + 1, ~0U, 0);
    syscall(SYS_execveat, self, "", args, env, AT_EMPTY_PATH);
    _exit(127);
}
