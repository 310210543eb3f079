/* The code sandbox survives hostile programs and scores them 0: infinite loop, fork bomb,
 * memory bomb, writing outside its directory, opening a socket, killing its parent; and it
 * passes an honest program. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "kvprobe/kvprobe.h"
#include "kvprobe/sandbox.h"

static kvp_sandbox_result run(const char *code, double timeout) {
    kvp_sandbox_opts o = {.timeout_s = timeout};
    kvp_sandbox_result r;
    kvp_error err = {0};
    if (kvp_sandbox_python(code, &o, &r, &err)) {
        NOTE("sandbox: %s", err.msg);
        memset(&r, 0, sizeof r);
        r.exit_code = -2;
    }
    return r;
}

int main(void) {
    TEST("sandbox: a correct program passes, in isolation") {
        kvp_sandbox_result r = run("def add(a, b):\n    return a + b\nassert add(2, 3) == 5\nprint('fine')\n", 10);
        CHECK(r.passed && !r.timed_out, "exit %d: %s", r.exit_code, r.output);
        CHECK(strstr(r.output, "fine") != NULL, "output '%s'", r.output);
        CHECK(r.isolated || geteuid() != 0, "as root the sandbox must isolate");
        NOTE("isolated=%d, %.2f s", r.isolated, r.seconds);
    }
    TEST("sandbox: a failing assert scores 0") {
        kvp_sandbox_result r = run("assert 1 + 1 == 3\n", 10);
        CHECK(!r.passed && !r.timed_out, "exit %d", r.exit_code);
        CHECK(strstr(r.output, "AssertionError") != NULL, "output '%s'", r.output);
    }
    TEST("sandbox: an infinite loop is killed at the timeout") {
        kvp_sandbox_result r = run("while True:\n    pass\n", 1.5);
        CHECK(!r.passed && r.timed_out, "timed_out %d", r.timed_out);
        CHECK(r.seconds < 5, "took %.1f s", r.seconds);
    }
    TEST("sandbox: a sleeping program that leaves its process group is killed too") {
        kvp_sandbox_result r = run("import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\ntime.sleep(60)\n", 1.5);
        CHECK(!r.passed && r.timed_out && r.seconds < 5, "timed_out %d after %.1f s", r.timed_out, r.seconds);
    }
    TEST("sandbox: a fork bomb is contained") {
        kvp_sandbox_result r = run("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n", 2);
        CHECK(!r.passed, "fork bomb passed");
        /* the machine is still usable: we can fork */
        pid_t p = fork();
        if (p == 0) _exit(0);
        CHECK(p > 0, "cannot fork after the bomb");
        if (p > 0) waitpid(p, NULL, 0);
    }
    TEST("sandbox: a memory bomb fails with MemoryError, not the OOM killer") {
        kvp_sandbox_result r = run("x = bytearray(8 * 1024 ** 3)\nprint(len(x))\n", 10);
        CHECK(!r.passed && !r.timed_out, "passed=%d timed_out=%d", r.passed, r.timed_out);
        CHECK(strstr(r.output, "MemoryError") != NULL, "output '%s'", r.output);
    }
    TEST("sandbox: writing outside its directory fails") {
        char code[512];
        snprintf(code, sizeof code,
                 "import os\nfor p in ['/tmp/kvprobe-escape-%d', os.path.expanduser('~') + '/../escape', '/root/escape', '../escape']:\n"
                 "    open(p, 'w').write('x')\n",
                 (int)getpid());
        kvp_sandbox_result r = run(code, 10);
        char path[64];
        snprintf(path, sizeof path, "/tmp/kvprobe-escape-%d", (int)getpid());
        CHECK(!r.passed, "program wrote outside its directory");
        CHECK(!file_exists(path), "%s exists", path);
        CHECK(strstr(r.output, "Permission") != NULL || strstr(r.output, "denied") != NULL, "output '%s'", r.output);
        unlink(path);
    }
    TEST("sandbox: no network, not even loopback to the host") {
        int srv = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t al = sizeof a;
        int ok = srv >= 0 && bind(srv, (struct sockaddr *)&a, sizeof a) == 0 && listen(srv, 4) == 0 &&
                 getsockname(srv, (struct sockaddr *)&a, &al) == 0;
        CHECK(ok, "test server");
        char code[256];
        snprintf(code, sizeof code, "import socket\ns = socket.create_connection(('127.0.0.1', %d), timeout=2)\nprint('connected')\n",
                 ntohs(a.sin_port));
        kvp_sandbox_result r = run(code, 10);
        CHECK(!r.passed && !strstr(r.output, "connected"), "connected to the host: %s", r.output);
        if (srv >= 0) close(srv);
    }
    TEST("sandbox: a wrong solution that kills its parent still scores 0, kvprobe unharmed") {
        /* The kills must change nothing: the program goes on to its (failing) test. */
        kvp_sandbox_result r = run("import os, signal\n"
                                   "for pid in (os.getppid(), 1, -1):\n"
                                   "    try:\n        os.kill(pid, signal.SIGKILL)\n"
                                   "    except (ProcessLookupError, PermissionError) as e:\n        print('kill', pid, type(e).__name__)\n"
                                   "print('parent survived')\nassert 2 + 2 == 5\n", 10);
        CHECK(!r.passed && !r.timed_out, "passed=%d timed_out=%d", r.passed, r.timed_out);
        CHECK(strstr(r.output, "parent survived") && strstr(r.output, "AssertionError"), "output '%s'", r.output);
        /* we are still here to check: */
        CHECK(kill(getpid(), 0) == 0, "kvprobe gone");
    }
    return harness_finish();
}
