/* Sandboxed execution of model-written Python (include/kvprobe/sandbox.h).
 *
 * Process layout:
 *   kvprobe ── fork ── keeper (own process group; unshares net/pid/ipc namespaces)
 *                        └── fork ── python (PID 1 of the new PID namespace; nobody;
 *                                    Landlock: writes only inside its directory; rlimits)
 * When the python process (the namespace's init) exits, the kernel kills everything it
 * started, even processes that left its process group. On timeout kvprobe kills the whole
 * process group. The program cannot reach kvprobe: other user, other PID namespace. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/landlock.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kvprobe/sandbox.h"

#define NOBODY 65534

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int write_file(const char *path, const char *data, size_t len) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return -1;
    size_t off = 0;
    while (off < len) {
        ssize_t w = write(fd, data + off, len - off);
        if (w <= 0) {
            close(fd);
            return -1;
        }
        off += (size_t)w;
    }
    return close(fd);
}

/* Landlock: allow every write-like access only beneath dir. Returns 0 if enforced. */
static int landlock_confine(const char *dir) {
    long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
    if (abi < 1) return -1;
    struct landlock_ruleset_attr attr = {
        .handled_access_fs = LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_REMOVE_DIR |
                             LANDLOCK_ACCESS_FS_REMOVE_FILE | LANDLOCK_ACCESS_FS_MAKE_CHAR |
                             LANDLOCK_ACCESS_FS_MAKE_DIR | LANDLOCK_ACCESS_FS_MAKE_REG |
                             LANDLOCK_ACCESS_FS_MAKE_SOCK | LANDLOCK_ACCESS_FS_MAKE_FIFO |
                             LANDLOCK_ACCESS_FS_MAKE_BLOCK | LANDLOCK_ACCESS_FS_MAKE_SYM,
    };
    int fd = (int)syscall(SYS_landlock_create_ruleset, &attr, sizeof attr, 0);
    if (fd < 0) return -1;
    struct landlock_path_beneath_attr pb = {.allowed_access = attr.handled_access_fs};
    pb.parent_fd = open(dir, O_PATH | O_CLOEXEC);
    int rc = -1;
    if (pb.parent_fd >= 0 && syscall(SYS_landlock_add_rule, fd, LANDLOCK_RULE_PATH_BENEATH, &pb, 0) == 0 &&
        prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 && syscall(SYS_landlock_restrict_self, fd, 0) == 0)
        rc = 0;
    if (pb.parent_fd >= 0) close(pb.parent_fd);
    close(fd);
    return rc;
}

static void set_limit(int res, rlim_t v) {
    struct rlimit rl = {v, v};
    setrlimit(res, &rl);
}

/* The python process: limits, identity, confinement, exec. Never returns. */
static void run_python(const char *dir, const kvp_sandbox_opts *o, int isolated) {
    if (chdir(dir) != 0) _exit(125);
    int out = open("out.txt", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int in = open("/dev/null", O_RDONLY);
    if (out < 0 || in < 0) _exit(125);
    dup2(in, 0);
    dup2(out, 1);
    dup2(out, 2);
    set_limit(RLIMIT_CPU, (rlim_t)o->timeout_s + 1);
    set_limit(RLIMIT_AS, (rlim_t)o->mem_bytes);
    set_limit(RLIMIT_FSIZE, (rlim_t)o->max_file_bytes);
    set_limit(RLIMIT_NOFILE, 64);
    set_limit(RLIMIT_CORE, 0);
    if (geteuid() == 0) { /* nobody: cannot signal or write anything of ours */
        if (setgroups(0, NULL) != 0 || setgid(NOBODY) != 0 || setuid(NOBODY) != 0) _exit(125);
    }
    set_limit(RLIMIT_NPROC, (rlim_t)o->max_procs); /* per user: effective once we are nobody */
    /* Die with the keeper even if the program leaves its process group (set after the
     * identity change, which clears it). */
    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    if (isolated && landlock_confine(dir) != 0) _exit(125);
    char *const argv[] = {(char *)o->python, "-I", "-B", "prog.py", NULL};
    char home[600];
    snprintf(home, sizeof home, "HOME=%s", dir);
    char *const envp[] = {"PATH=/usr/local/bin:/usr/bin:/bin", home, "PYTHONDONTWRITEBYTECODE=1",
                          "PYTHONHASHSEED=0", "LANG=C.UTF-8", NULL};
    execvpe(o->python, argv, envp);
    _exit(127);
}

/* The keeper: new namespaces, then the python process as their PID 1. Never returns. */
static void keeper(const char *dir, const kvp_sandbox_opts *o) {
    int isolated = unshare(CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWIPC) == 0;
    if (!isolated && geteuid() != 0) /* unprivileged: a user namespace makes the others possible */
        isolated = unshare(CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWIPC) == 0;
    pid_t py = fork();
    if (py < 0) _exit(125);
    if (py == 0) run_python(dir, o, isolated);
    int st;
    while (waitpid(py, &st, 0) < 0 && errno == EINTR) {
    }
    /* Report isolation through the exit code's high range: 0..99 python, +100 if isolated. */
    if (WIFEXITED(st)) _exit(WEXITSTATUS(st) == 0 ? (isolated ? 100 : 0) : (isolated ? 101 : 1));
    _exit(isolated ? 102 : 2);
}

static void remove_tree(const char *dir) {
    /* The program may have made files and directories; nftw-free recursive delete via rm. */
    pid_t p = fork();
    if (p == 0) {
        execlp("rm", "rm", "-rf", "--", dir, (char *)NULL);
        _exit(127);
    }
    if (p > 0) waitpid(p, NULL, 0);
}

int kvp_sandbox_python(const char *code, const kvp_sandbox_opts *opts, kvp_sandbox_result *res, kvp_error *err) {
    kvp_sandbox_opts o = {10.0, 1L << 30, 32, 16L << 20, "python3"};
    if (opts) {
        if (opts->timeout_s > 0) o.timeout_s = opts->timeout_s;
        if (opts->mem_bytes > 0) o.mem_bytes = opts->mem_bytes;
        if (opts->max_procs > 0) o.max_procs = opts->max_procs;
        if (opts->max_file_bytes > 0) o.max_file_bytes = opts->max_file_bytes;
        if (opts->python) o.python = opts->python;
    }
    memset(res, 0, sizeof *res);
    char dir[] = "/tmp/kvprobe-sandbox-XXXXXX", path[sizeof dir + 16];
    if (!mkdtemp(dir)) return kvp_fail(err, KVP_E_IO, "sandbox: cannot create a temporary directory: %s", strerror(errno));
    snprintf(path, sizeof path, "%s/prog.py", dir);
    if (write_file(path, code, strlen(code)) != 0 || (geteuid() == 0 && (chown(dir, NOBODY, NOBODY) != 0 ||
                                                                         chown(path, NOBODY, NOBODY) != 0))) {
        remove_tree(dir);
        return kvp_fail(err, KVP_E_IO, "sandbox: cannot prepare %s", dir);
    }
    double t0 = now_s();
    fflush(NULL);
    pid_t k = fork();
    if (k < 0) {
        remove_tree(dir);
        return kvp_fail(err, KVP_E_IO, "sandbox: fork failed: %s", strerror(errno));
    }
    if (k == 0) {
        setpgid(0, 0);
        keeper(dir, &o);
    }
    setpgid(k, k); /* also from the parent, so killpg works even before the child runs */
    int st = 0, done = 0;
    while (!done) {
        pid_t w = waitpid(k, &st, WNOHANG);
        if (w == k) done = 1;
        else if (w < 0 && errno != EINTR) break;
        else if (now_s() - t0 > o.timeout_s) {
            res->timed_out = 1;
            killpg(k, SIGKILL);
            waitpid(k, &st, 0);
            done = 1;
        } else {
            struct timespec ts = {0, 2000000};
            nanosleep(&ts, NULL);
        }
    }
    killpg(k, SIGKILL); /* anything left in the group */
    res->seconds = now_s() - t0;
    if (WIFEXITED(st)) {
        int c = WEXITSTATUS(st);
        res->isolated = c >= 100;
        res->exit_code = c >= 100 ? c - 100 : c;
        res->passed = !res->timed_out && res->exit_code == 0;
    } else {
        res->exit_code = -1;
        res->signal = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
    }
    snprintf(path, sizeof path, "%s/out.txt", dir);
    FILE *f = fopen(path, "rb");
    if (f) {
        fseek(f, 0, SEEK_END);
        long n = ftell(f);
        long start = n > (long)sizeof res->output - 1 ? n - (long)sizeof res->output + 1 : 0;
        fseek(f, start, SEEK_SET);
        size_t r = fread(res->output, 1, sizeof res->output - 1, f);
        res->output[r] = 0;
        fclose(f);
    }
    remove_tree(dir);
    return 0;
}
