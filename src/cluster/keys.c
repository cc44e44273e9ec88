/*
 * CURVE key pairs (Curve25519, as ZeroMQ's CURVE mechanism uses them) and the
 * allow-lists of public keys a worker accepts. File formats: docs/protocol.md.
 * Keys travel as Z85 text in files and as 32 raw bytes in frames.
 */
#include "cluster/cluster.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#define KEYFILE_MAX_BYTES 65536

lares_status cluster_key_parse(const char *z85, uint8_t out[CLUSTER_KEY_BYTES], lares_error *err) {
    const size_t n = strlen(z85);
    if (n != CLUSTER_KEY_Z85) {
        return lares_fail(err, LARES_EINVAL,
                          "'%.48s' is not a public key: %zu characters, a Z85 key has %d", z85, n,
                          CLUSTER_KEY_Z85);
    }
    if (zmq_z85_decode(out, z85) == NULL) {
        return lares_fail(err, LARES_EINVAL,
                          "'%s' is not a public key: it has characters outside Z85", z85);
    }
    return LARES_OK;
}

void cluster_key_z85(const uint8_t key[CLUSTER_KEY_BYTES], char out[CLUSTER_KEY_Z85 + 1]) {
    if (zmq_z85_encode(out, key, CLUSTER_KEY_BYTES) == NULL) {
        out[0] = '\0'; /* cannot happen: 32 is a multiple of 4 */
    }
}

lares_status cluster_key_generate(cluster_keypair *out, lares_error *err) {
    memset(out, 0, sizeof *out);
    if (!zmq_has("curve")) {
        return lares_fail(err, LARES_EUNSUPPORTED,
                          "this libzmq was built without CURVE (libsodium); keys cannot be made");
    }
    if (zmq_curve_keypair(out->public_z85, out->secret_z85) != 0) {
        return lares_fail(err, LARES_EIO, "making a CURVE key pair failed: %s",
                          zmq_strerror(zmq_errno()));
    }
    return cluster_key_parse(out->public_z85, out->public_key, err);
}

static lares_status write_all(int fd, const char *path, const char *text, lares_error *err) {
    size_t n = strlen(text), done = 0;
    while (done < n) {
        ssize_t w = write(fd, text + done, n - done);
        if (w < 0 && errno == EINTR) {
            continue;
        }
        if (w <= 0) {
            return lares_fail(err, LARES_EIO, "%s: write failed: %s", path, strerror(errno));
        }
        done += (size_t)w;
    }
    return LARES_OK;
}

lares_status cluster_key_write(const char *path, const cluster_keypair *k, lares_error *err) {
    char pub_path[CLUSTER_MAX_PATH + 8];
    if ((size_t)snprintf(pub_path, sizeof pub_path, "%s.pub", path) >= sizeof pub_path) {
        return lares_fail(err, LARES_EINVAL, "key path too long (%zu bytes)", strlen(path));
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd < 0) {
        return lares_fail(
            err, LARES_EIO, "%s: cannot create the key file: %s%s", path, strerror(errno),
            errno == EEXIST ? " (never overwritten: remove it or pick another name)" : "");
    }
    char text[256];
    snprintf(text, sizeof text,
             "# lares CURVE key pair (lares keygen): keep this file secret\n"
             "public-key = %s\nsecret-key = %s\n",
             k->public_z85, k->secret_z85);
    lares_status st = LARES_OK;
    if (fchmod(fd, 0600) != 0) {
        st = lares_fail(err, LARES_EIO, "%s: chmod 600 failed: %s", path, strerror(errno));
    }
    if (st == LARES_OK) {
        st = write_all(fd, path, text, err);
    }
    if (close(fd) != 0 && st == LARES_OK) {
        st = lares_fail(err, LARES_EIO, "%s: close failed: %s", path, strerror(errno));
    }
    if (st == LARES_OK) {
        int pfd = open(pub_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (pfd < 0) {
            st = lares_fail(err, LARES_EIO, "%s: cannot create: %s", pub_path, strerror(errno));
        } else {
            snprintf(text, sizeof text,
                     "# lares CURVE public key (lares keygen)\npublic-key = %s\n", k->public_z85);
            st = write_all(pfd, pub_path, text, err);
            if (close(pfd) != 0 && st == LARES_OK) {
                st = lares_fail(err, LARES_EIO, "%s: close failed: %s", pub_path, strerror(errno));
            }
        }
    }
    if (st != LARES_OK) {
        unlink(path);
    }
    return st;
}

/* Reads a small text file into buf (NUL-terminated). */
static lares_status read_small(const char *path, char *buf, size_t cap, struct stat *sb,
                               lares_error *err) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        return lares_fail(err, errno == ENOENT ? LARES_ENOTFOUND : LARES_EIO, "%s: %s", path,
                          strerror(errno));
    }
    if (fstat(fd, sb) != 0 || !S_ISREG(sb->st_mode)) {
        close(fd);
        return lares_fail(err, LARES_EINVAL, "%s: not a regular file", path);
    }
    size_t len = 0;
    for (;;) {
        ssize_t r = lares_read(fd, buf + len, cap - 1 - len);
        if (r < 0 && errno == EINTR) {
            continue;
        }
        if (r < 0) {
            close(fd);
            return lares_fail(err, LARES_EIO, "%s: read failed: %s", path, strerror(errno));
        }
        if (r == 0) {
            break;
        }
        len += (size_t)r;
        if (len == cap - 1) {
            close(fd);
            return lares_fail(err, LARES_EFORMAT, "%s: larger than %zu bytes: not a key file", path,
                              cap - 1);
        }
    }
    close(fd);
    buf[len] = '\0';
    return LARES_OK;
}

/* "name = value" on one line: value into out; false when the line is not that key */
static bool key_line(const char *line, const char *name, char *out, size_t cap) {
    const size_t n = strlen(name);
    if (strncmp(line, name, n) != 0) {
        return false;
    }
    const char *p = line + n;
    while (*p == ' ' || *p == '\t') {
        p++;
    }
    if (*p != '=') {
        return false;
    }
    p++;
    while (*p == ' ' || *p == '\t') {
        p++;
    }
    snprintf(out, cap, "%s", p);
    return true;
}

/* Splits text into trimmed lines; calls fn for each non-empty, non-comment one. */
typedef lares_status (*line_fn)(const char *line, size_t lineno, void *ctx, lares_error *err);

static lares_status each_line(char *text, line_fn fn, void *ctx, lares_error *err) {
    size_t lineno = 0;
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line != NULL;
         line = strtok_r(NULL, "\n", &save)) {
        lineno++;
        while (*line == ' ' || *line == '\t') {
            line++;
        }
        size_t len = strlen(line);
        while (len > 0 &&
               (line[len - 1] == ' ' || line[len - 1] == '\t' || line[len - 1] == '\r')) {
            line[--len] = '\0';
        }
        if (len == 0 || line[0] == '#') { /* '#' is a Z85 character: only a leading one comments */
            continue;
        }
        lares_status st = fn(line, lineno, ctx, err);
        if (st != LARES_OK) {
            return st;
        }
    }
    return LARES_OK;
}

typedef struct pair_ctx {
    const char *path;
    cluster_keypair *k;
    bool has_public, has_secret;
} pair_ctx;

static lares_status pair_line(const char *line, size_t lineno, void *vctx, lares_error *err) {
    pair_ctx *c = vctx;
    char val[128];
    if (key_line(line, "public-key", val, sizeof val)) {
        if (strlen(val) != CLUSTER_KEY_Z85) {
            return lares_fail(err, LARES_EFORMAT,
                              "%s:%zu: the public key has %zu characters, not %d", c->path, lineno,
                              strlen(val), CLUSTER_KEY_Z85);
        }
        memcpy(c->k->public_z85, val, CLUSTER_KEY_Z85 + 1);
        c->has_public = true;
    } else if (key_line(line, "secret-key", val, sizeof val)) {
        if (strlen(val) != CLUSTER_KEY_Z85) {
            return lares_fail(err, LARES_EFORMAT,
                              "%s:%zu: the secret key has %zu characters, not %d", c->path, lineno,
                              strlen(val), CLUSTER_KEY_Z85);
        }
        memcpy(c->k->secret_z85, val, CLUSTER_KEY_Z85 + 1);
        c->has_secret = true;
    } else {
        return lares_fail(err, LARES_EFORMAT,
                          "%s:%zu: expected 'public-key = ...' or 'secret-key = ...'", c->path,
                          lineno);
    }
    return LARES_OK;
}

lares_status cluster_key_read(const char *path, cluster_keypair *out, lares_error *err) {
    char text[4096];
    struct stat sb;
    memset(out, 0, sizeof *out);
    lares_status st = read_small(path, text, sizeof text, &sb, err);
    if (st != LARES_OK) {
        return st;
    }
    if ((sb.st_mode & 077) != 0) {
        return lares_fail(err, LARES_EAUTH,
                          "%s: mode %03o lets others read this secret key (chmod 600 %s)", path,
                          (unsigned)(sb.st_mode & 0777), path);
    }
    pair_ctx c = {.path = path, .k = out};
    st = each_line(text, pair_line, &c, err);
    if (st != LARES_OK) {
        return st;
    }
    if (!c.has_public || !c.has_secret) {
        return lares_fail(err, LARES_EFORMAT,
                          "%s: a key pair file needs public-key and "
                          "secret-key lines (lares keygen writes one)",
                          path);
    }
    uint8_t secret[CLUSTER_KEY_BYTES];
    if (zmq_z85_decode(secret, out->secret_z85) == NULL) {
        return lares_fail(err, LARES_EFORMAT, "%s: the secret key has characters outside Z85",
                          path);
    }
    memset(secret, 0, sizeof secret);
    st = cluster_key_parse(out->public_z85, out->public_key, err);
    if (st != LARES_OK) {
        lares_error_prefix(err, "%s: ", path);
        return st;
    }
    char derived[CLUSTER_KEY_Z85 + 1];
    if (zmq_curve_public(derived, out->secret_z85) != 0 || strcmp(derived, out->public_z85) != 0) {
        return lares_fail(err, LARES_EFORMAT,
                          "%s: the public key is not the one that belongs to the secret key", path);
    }
    return LARES_OK;
}

typedef struct allow_ctx {
    const char *path;
    cluster_allow *a;
    size_t seen; /* keys read from the file */
} allow_ctx;

static lares_status add_key(cluster_allow *a, const uint8_t key[CLUSTER_KEY_BYTES],
                            lares_error *err) {
    if (cluster_allow_has(a, key)) {
        return LARES_OK;
    }
    if (a->n >= CLUSTER_MAX_ALLOW) {
        return lares_fail(err, LARES_ERANGE, "more than %d allowed keys", CLUSTER_MAX_ALLOW);
    }
    memcpy(a->keys[a->n++], key, CLUSTER_KEY_BYTES);
    return LARES_OK;
}

static lares_status allow_line(const char *line, size_t lineno, void *vctx, lares_error *err) {
    allow_ctx *c = vctx;
    char val[128];
    if (key_line(line, "secret-key", val, sizeof val)) {
        return lares_fail(err, LARES_EINVAL,
                          "%s: this is a key pair file holding a secret key; give its public "
                          "half (%s.pub) instead",
                          c->path, c->path);
    }
    if (!key_line(line, "public-key", val, sizeof val)) {
        snprintf(val, sizeof val, "%s", line);
    }
    uint8_t key[CLUSTER_KEY_BYTES];
    lares_status st = cluster_key_parse(val, key, err);
    if (st != LARES_OK) {
        lares_error_prefix(err, "%s:%zu: ", c->path, lineno);
        return st;
    }
    c->seen++;
    return add_key(c->a, key, err);
}

lares_status cluster_allow_add(cluster_allow *a, const char *key_or_file, lares_error *err) {
    struct stat sb;
    if (stat(key_or_file, &sb) == 0) {
        char *text = lares_alloc(KEYFILE_MAX_BYTES);
        if (text == NULL) {
            return lares_fail(err, LARES_ENOMEM, "out of memory");
        }
        lares_status st = read_small(key_or_file, text, KEYFILE_MAX_BYTES, &sb, err);
        allow_ctx c = {.path = key_or_file, .a = a};
        if (st == LARES_OK) {
            st = each_line(text, allow_line, &c, err);
        }
        lares_free(text);
        if (st == LARES_OK && c.seen == 0) {
            st = lares_fail(err, LARES_EFORMAT, "%s: no public key in the file", key_or_file);
        }
        return st;
    }
    uint8_t key[CLUSTER_KEY_BYTES];
    if (strlen(key_or_file) != CLUSTER_KEY_Z85) {
        return lares_fail(err, LARES_EINVAL,
                          "'%.60s' is neither a readable file of public keys nor a public key (40 "
                          "Z85 characters)",
                          key_or_file);
    }
    lares_status st = cluster_key_parse(key_or_file, key, err);
    if (st != LARES_OK) {
        return st;
    }
    return add_key(a, key, err);
}

bool cluster_allow_has(const cluster_allow *a, const uint8_t key[CLUSTER_KEY_BYTES]) {
    for (size_t i = 0; i < a->n; i++) {
        if (memcmp(a->keys[i], key, CLUSTER_KEY_BYTES) == 0) {
            return true;
        }
    }
    return false;
}
