/* The compile, replayed: what bench/cluster.py --engine buildbarn has bb_runner execute where an
 * action names clang (see cluster.py's docstring for how it takes clang's place).
 *
 * Built by cluster.py for one replay directory and speed (REPLAY_DIR and SPEED are defined on
 * the compiler's command line): bb_runner hands a program the Command's environment only, so
 * nothing can reach it but its argv. Like tests/reapi_worker.py --replay, it reads the module
 * off the one argument `m/<rank>-<digest>.o` (ltowrap/remote/action.py's layout), waits the
 * compile time the local run recorded for that digest (REPLAY_DIR/times.txt, "<digest>
 * <seconds>" a line) divided by SPEED, and writes that run's object (REPLAY_DIR/<digest>.o) to
 * the argument after -o. A digest it does not know fails the action (exit 1), as a compile
 * error would. Each replay appends "<digest>" to REPLAY_DIR/replayed.log, one write.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifndef REPLAY_DIR
#error "build with -DREPLAY_DIR='\"/path\"' -DSPEED=1.0"
#endif

/* The digest of an argument m/<digits>-<hex>.o, or NULL. */
static const char *module_digest(const char *arg, size_t *len) {
    if (strncmp(arg, "m/", 2) != 0) return NULL;
    const char *p = arg + 2;
    if (*p < '0' || *p > '9') return NULL;
    while (*p >= '0' && *p <= '9') p++;
    if (*p++ != '-') return NULL;
    const char *start = p;
    while ((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')) p++;
    if (p == start || strcmp(p, ".o") != 0) return NULL;
    *len = (size_t)(p - start);
    return start;
}

static double recorded_seconds(const char *digest, size_t len) {
    FILE *f = fopen(REPLAY_DIR "/times.txt", "r");
    if (f == NULL) return -1.0;
    char name[256];
    double seconds;
    while (fscanf(f, "%255s %lf", name, &seconds) == 2) {
        if (strlen(name) == len && strncmp(name, digest, len) == 0) {
            fclose(f);
            return seconds;
        }
    }
    fclose(f);
    return -1.0;
}

static int copy_file(const char *from, const char *to) {
    int in = open(from, O_RDONLY);
    if (in < 0) return -1;
    int out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out < 0) {
        close(in);
        return -1;
    }
    char buf[1 << 16];
    ssize_t n;
    while ((n = read(in, buf, sizeof buf)) > 0) {
        for (ssize_t done = 0; done < n;) {
            ssize_t w = write(out, buf + done, (size_t)(n - done));
            if (w < 0) {
                close(in);
                close(out);
                return -1;
            }
            done += w;
        }
    }
    close(in);
    return close(out) == 0 && n == 0 ? 0 : -1;
}

int main(int argc, char **argv) {
    const char *digest = NULL, *output = NULL;
    size_t len = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-o") == 0 && i + 1 < argc) {
            output = argv[++i];
        } else if (digest == NULL) {
            digest = module_digest(argv[i], &len);
        }
    }
    if (digest == NULL || output == NULL) {
        fprintf(stderr, "bb_replay: no m/<rank>-<digest>.o or no -o in the arguments\n");
        return 1;
    }
    double seconds = recorded_seconds(digest, len);
    if (seconds < 0) {
        fprintf(stderr, "bb_replay: no recorded backend for module %.*s\n", (int)len, digest);
        return 1;
    }
    seconds /= SPEED;
    struct timespec wait = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
    while (nanosleep(&wait, &wait) != 0 && errno == EINTR) {
    }
    char object[4096];
    snprintf(object, sizeof object, REPLAY_DIR "/%.*s.o", (int)len, digest);
    if (copy_file(object, output) != 0) {
        fprintf(stderr, "bb_replay: cannot copy %s to %s: %s\n", object, output, strerror(errno));
        return 1;
    }
    int log = open(REPLAY_DIR "/replayed.log", O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (log >= 0) {
        char line[300];
        int n = snprintf(line, sizeof line, "%.*s\n", (int)len, digest);
        if (write(log, line, (size_t)n) < 0) {
            /* the count is a check, not the result: the object is written */
        }
        close(log);
    }
    return 0;
}
