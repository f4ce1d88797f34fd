/* The backend clang's fork server: preloaded (LD_PRELOAD) into one clang a link, it stops that
 * clang before main and forks it once a job, each child going on into clang's main with the
 * job's command line and environment. A child is a clang whose shared libraries are loaded,
 * relocated and constructed already: what every backend's start would otherwise redo (most of
 * the cost of starting clang). jobs/forkserver.py starts it and speaks its protocol.
 *
 * Not a Python extension: nothing here uses Python, and it is loaded only by clang. Without
 * LTOWRAP_FORK_SERVER_FD in its environment, the process goes on into its own main untouched.
 *
 * The protocol, on a SOCK_SEQPACKET socket (the descriptor LTOWRAP_FORK_SERVER_FD names):
 *   server -> client, once: "ready"
 *   client -> server, a job: "<argc>\0<arg>\0...<envc>\0<var>\0...", with SCM_RIGHTS
 *       [status pipe's write end, output, descriptors the job keeps]
 *   server -> client: the child's pid (a native int), with SCM_RIGHTS [its pidfd];
 *       a pid of 0 without a descriptor if fork failed
 *   server -> status pipe, once the child ended and was reaped: its wait status (a native int)
 * An end of file on the socket (the client closed it or died) ends the server; children still
 * running go on, as orphaned compiles would.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

typedef int (*main_fn)(int, char **, char **);
typedef int (*start_fn)(main_fn, int, char **, void (*)(void), void (*)(void), void (*)(void), void *);

#define MAX_FDS 16
#define MAX_MESSAGE (1 << 20)

struct kid {
    pid_t pid;
    int status_fd;
    struct kid *next;
};

struct original {
    char *args;  /* the server's own command line: the area /proc/<pid>/cmdline shows */
    size_t size;
};

static ssize_t send_pid(int sock, pid_t pid, int pidfd) {
    struct iovec iov = {&pid, sizeof pid};
    struct msghdr m = {0};
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int))];
    } control;
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    if (pidfd >= 0) {
        memset(&control, 0, sizeof control);
        m.msg_control = control.buf;
        m.msg_controllen = sizeof control.buf;
        struct cmsghdr *c = CMSG_FIRSTHDR(&m);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &pidfd, sizeof pidfd);
    }
    ssize_t n;
    do
        n = sendmsg(sock, &m, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    return n;
}

/* "<count>\0" then that many strings, into `out` (count + 1 entries, NULL last); the rest of
 * the message after them, or NULL if the message is malformed. */
static char *strings(char *p, char *end, char ***out, int *count) {
    char *q = memchr(p, 0, end - p);
    if (q == NULL)
        return NULL;
    long n = strtol(p, NULL, 10);
    if (n < 0 || n > (end - p))
        return NULL;
    *count = (int)n;
    *out = calloc(n + 1, sizeof **out);
    if (*out == NULL)
        return NULL;
    p = q + 1;
    for (long i = 0; i < n; i++) {
        q = memchr(p, 0, end - p);
        if (q == NULL)
            return NULL;
        (*out)[i] = p;
        p = q + 1;
    }
    return p;
}

/* The child's command line where ps and /proc/<pid>/cmdline look: over the server's own
 * (started with room to spare), cut short if it is longer. */
static void show_args(struct original *shown, char **argv) {
    size_t at = 0;
    for (char **a = argv; *a != NULL && at < shown->size; a++) {
        size_t n = strlen(*a) + 1;
        if (n > shown->size - at)
            n = shown->size - at;
        memcpy(shown->args + at, *a, n);
        at += n;
    }
    memset(shown->args + at, 0, shown->size - at);
    if (shown->size)
        shown->args[shown->size - 1] = 0;
}

static void reap(struct kid **kids) {
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        for (struct kid **k = kids; *k != NULL; k = &(*k)->next) {
            if ((*k)->pid == pid) {
                struct kid *done = *k;
                ssize_t n;
                do
                    n = write(done->status_fd, &status, sizeof status);
                while (n < 0 && errno == EINTR);
                close(done->status_fd);
                *k = done->next;
                free(done);
                break;
            }
        }
    }
}

static void close_all(int *fds, int n) {
    for (int i = 0; i < n; i++)
        close(fds[i]);
}

/* Serve jobs until the socket ends. Returns in a child only, with its argv and environment
 * (one vector: argv, NULL, environment, NULL, as __libc_start_main expects them) to go on with. */
static char **serve(int sock, struct original *shown, sigset_t *before, int *argc_out) {
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, before);
    int sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sfd < 0)
        _exit(121);
    char *message = malloc(MAX_MESSAGE + 1);
    if (message == NULL)
        _exit(121);
    struct kid *kids = NULL;
    if (send(sock, "ready", 5, MSG_NOSIGNAL) != 5)
        _exit(0);
    for (;;) {
        struct pollfd p[2] = {{sock, POLLIN, 0}, {sfd, POLLIN, 0}};
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            _exit(121);
        }
        if (p[1].revents) {
            struct signalfd_siginfo info;
            while (read(sfd, &info, sizeof info) > 0)
                ;
            reap(&kids);
        }
        if (!p[0].revents)
            continue;
        union {
            struct cmsghdr align;
            char buf[CMSG_SPACE(sizeof(int) * MAX_FDS)];
        } control;
        struct iovec iov = {message, MAX_MESSAGE};
        struct msghdr m = {0};
        m.msg_iov = &iov;
        m.msg_iovlen = 1;
        m.msg_control = control.buf;
        m.msg_controllen = sizeof control.buf;
        ssize_t n = recvmsg(sock, &m, MSG_CMSG_CLOEXEC);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            _exit(0);
        int fds[MAX_FDS], nfds = 0;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c != NULL; c = CMSG_NXTHDR(&m, c)) {
            if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
                int more = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
                if (more > MAX_FDS - nfds)
                    more = MAX_FDS - nfds;
                memcpy(fds + nfds, CMSG_DATA(c), more * sizeof(int));
                nfds += more;
            }
        }
        message[n] = 0;
        char **args = NULL, **env = NULL;
        int argc = 0, envc = 0;
        char *rest = (m.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || nfds < 2 ? NULL
                     : strings(message, message + n, &args, &argc);
        if (rest != NULL)
            rest = strings(rest, message + n, &env, &envc);
        char **vector = rest != NULL && argc > 0 ? calloc(argc + envc + 2, sizeof *vector) : NULL;
        pid_t pid = vector != NULL ? fork() : -1;
        if (pid == 0) {
            close(sock);
            close(sfd);
            close(fds[0]);
            for (struct kid *k = kids; k != NULL; k = k->next)  /* the other jobs' status pipes */
                close(k->status_fd);
            if (dup2(fds[1], 1) < 0 || dup2(fds[1], 2) < 0)
                _exit(127);
            close(fds[1]);
            for (int i = 2; i < nfds; i++)  /* kept by the job (its slot's lock), as across an exec */
                fcntl(fds[i], F_SETFD, 0);
            memcpy(vector, args, argc * sizeof *vector);
            memcpy(vector + argc + 1, env, envc * sizeof *vector);
            free(args);
            free(env);
            show_args(shown, vector);
            /* A shared libc's __libc_start_main takes the environment the dynamic loader set,
             * and passes it to main: this one. */
            environ = vector + argc + 1;
            sigprocmask(SIG_SETMASK, before, NULL);
            *argc_out = argc;
            return vector;
        }
        free(args);
        free(env);
        free(vector);
        struct kid *kid = pid > 0 ? malloc(sizeof *kid) : NULL;
        if (pid > 0 && kid == NULL) {
            kill(pid, SIGKILL);
            pid = -1;  /* reaped with the others; its status goes nowhere */
        }
        int pidfd = pid > 0 ? (int)syscall(SYS_pidfd_open, pid, 0) : -1;
        if (kid != NULL) {
            kid->pid = pid;
            kid->status_fd = fds[0];
            kid->next = kids;
            kids = kid;
            close_all(fds + 1, nfds - 1);
        } else {
            close_all(fds, nfds);
        }
        send_pid(sock, pid > 0 ? pid : 0, pidfd);
        if (pidfd >= 0)
            close(pidfd);
    }
}

int __libc_start_main(main_fn main, int argc, char **argv, void (*init)(void), void (*fini)(void),
                      void (*rtld_fini)(void), void *stack_end) {
    start_fn next = (start_fn)dlsym(RTLD_NEXT, "__libc_start_main");
    if (next == NULL)
        _exit(127);
    const char *fd = getenv("LTOWRAP_FORK_SERVER_FD");
    if (fd == NULL || argc < 1)
        return next(main, argc, argv, init, fini, rtld_fini, stack_end);
    struct original shown = {argv[0], (size_t)(argv[argc - 1] + strlen(argv[argc - 1]) + 1 - argv[0])};
    sigset_t before;
    int job_argc = 0;
    char **vector = serve(atoi(fd), &shown, &before, &job_argc);
    return next(main, job_argc, vector, init, fini, rtld_fini, stack_end);
}
