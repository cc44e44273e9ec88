/*
 * The paired-keys store: one text file in the user's config directory
 * (docs/ring.md "Zero-setup ring"), a line per paired device:
 *
 *   # lares paired devices (lares pair, lares unpair)
 *   worker phone rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7
 *   head laptop  ...
 *
 * role (worker: a device this head uses; head: a head this worker serves),
 * name, Z85 public key. Written whole to a new file (0600) renamed over the
 * old one, so a crash leaves the old store or the new one.
 */
#include "discovery/discovery.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#define PAIRED_MAX_BYTES (256 * 1024)

static const char *role_name(disc_role r) {
    return r == DISC_ROLE_WORKER ? "worker" : "head";
}

const disc_paired_entry *disc_paired_find(const disc_paired *p, disc_role role,
                                          const uint8_t key[DISC_KEY_BYTES]) {
    for (int i = 0; i < p->n; i++) {
        if (p->e[i].role == role && memcmp(p->e[i].key, key, DISC_KEY_BYTES) == 0) {
            return &p->e[i];
        }
    }
    return NULL;
}

lares_status disc_paired_add(disc_paired *p, disc_role role, const char *name,
                             const uint8_t key[DISC_KEY_BYTES], lares_error *err) {
    if (!disc_name_valid(name)) {
        return lares_fail(err, LARES_EINVAL,
                          "'%.64s' is not a device name: 1 to %d characters of [A-Za-z0-9._-]",
                          name, DISC_NAME_MAX);
    }
    int at = -1;
    for (int i = 0; i < p->n && at < 0; i++) {
        if (p->e[i].role == role && (memcmp(p->e[i].key, key, DISC_KEY_BYTES) == 0 ||
                                     strcmp(p->e[i].name, name) == 0)) {
            at = i;
        }
    }
    if (at < 0) {
        if (p->n == DISC_MAX_DEVICES) {
            return lares_fail(err, LARES_ERANGE, "at most %d paired devices (lares unpair one)",
                              DISC_MAX_DEVICES);
        }
        at = p->n++;
    }
    p->e[at].role = role;
    snprintf(p->e[at].name, sizeof p->e[at].name, "%s", name);
    memcpy(p->e[at].key, key, DISC_KEY_BYTES);
    return LARES_OK;
}

bool disc_matches(const char *name, const uint8_t key[DISC_KEY_BYTES], const char *what) {
    const size_t wl = strlen(what);
    char fp[DISC_FINGERPRINT_LEN + 1];
    disc_fingerprint(key, fp);
    return strcmp(name, what) == 0 ||
           (wl >= 4 && wl <= DISC_FINGERPRINT_LEN && strncmp(fp, what, wl) == 0);
}

int disc_paired_remove(disc_paired *p, const char *what) {
    int removed = 0, o = 0;
    for (int i = 0; i < p->n; i++) {
        if (disc_matches(p->e[i].name, p->e[i].key, what)) {
            removed++;
        } else {
            p->e[o++] = p->e[i];
        }
    }
    p->n = o;
    return removed;
}

lares_status disc_paired_load(const char *path, disc_paired *out, lares_error *err) {
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        if (errno == ENOENT) {
            return LARES_OK;
        }
        return lares_fail(err, LARES_EIO, "%s: %s", path, strerror(errno));
    }
    char line[512];
    int ln = 0;
    size_t total = 0;
    lares_status st = LARES_OK;
    while (st == LARES_OK && fgets(line, sizeof line, f) != NULL) {
        ln++;
        const size_t n = strlen(line);
        total += n;
        if (total > PAIRED_MAX_BYTES) {
            st = lares_fail(err, LARES_EFORMAT, "%s: larger than %d bytes: not a paired-keys store",
                            path, PAIRED_MAX_BYTES);
            break;
        }
        if (n > 0 && line[n - 1] != '\n' && !feof(f)) {
            st = lares_fail(err, LARES_EFORMAT, "%s:%d: line too long", path, ln);
            break;
        }
        if (line[0] == '#' || line[0] == '\n' || line[0] == '\0') {
            continue;
        }
        char role[16], name[DISC_NAME_MAX + 2], key[DISC_KEY_Z85 + 2], extra[2];
        const int got = sscanf(line, "%15s %64s %41s %1s", role, name, key, extra);
        uint8_t raw[DISC_KEY_BYTES];
        disc_role r = strcmp(role, "worker") == 0 ? DISC_ROLE_WORKER
                      : strcmp(role, "head") == 0 ? DISC_ROLE_HEAD
                                                  : 0;
        if (got != 3 || r == 0 || strlen(key) != DISC_KEY_Z85 ||
            zmq_z85_decode(raw, key) == NULL) {
            st = lares_fail(err, LARES_EFORMAT,
                            "%s:%d: not a paired device ('worker|head NAME KEY' expected); fix "
                            "or remove the line (lares unpair NAME), or the file",
                            path, ln);
            break;
        }
        lares_error aerr = {0};
        if (disc_paired_add(out, r, name, raw, &aerr) != LARES_OK) {
            st = lares_fail(err, LARES_EFORMAT, "%s:%d: %s", path, ln, aerr.msg);
        }
    }
    if (st == LARES_OK && ferror(f)) {
        st = lares_fail(err, LARES_EIO, "%s: read failed", path);
    }
    fclose(f);
    return st;
}

lares_status disc_paired_save(const char *path, const disc_paired *p, lares_error *err) {
    char tmp[4096];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.new", path) >= sizeof tmp) {
        return lares_fail(err, LARES_EINVAL, "path too long: %s", path);
    }
    const int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) {
        return lares_fail(err, LARES_EIO, "%s: cannot create: %s", tmp, strerror(errno));
    }
    FILE *f = fdopen(fd, "w");
    if (f == NULL) {
        close(fd);
        return lares_fail(err, LARES_EIO, "%s: %s", tmp, strerror(errno));
    }
    fprintf(f, "# lares paired devices (lares pair, lares unpair): role name public-key\n");
    for (int i = 0; i < p->n; i++) {
        char z85[DISC_KEY_Z85 + 1];
        if (zmq_z85_encode(z85, p->e[i].key, DISC_KEY_BYTES) == NULL) {
            z85[0] = '\0';
        }
        fprintf(f, "%s %s %s\n", role_name(p->e[i].role), p->e[i].name, z85);
    }
    const bool bad = fflush(f) != 0 || fsync(fd) != 0;
    if (fclose(f) != 0 || bad) {
        unlink(tmp);
        return lares_fail(err, LARES_EIO, "%s: write failed", tmp);
    }
    if (rename(tmp, path) != 0) {
        const int e = errno;
        unlink(tmp);
        return lares_fail(err, LARES_EIO, "%s: %s", path, strerror(e));
    }
    return LARES_OK;
}
