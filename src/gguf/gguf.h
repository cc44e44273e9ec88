/*
 * gguf: reading and writing GGUF v2/v3 files.
 *
 * Owns: the file descriptor and the read-only mapping of an opened file, the
 * parsed metadata (values stay in the mapping; keys and tensor names are
 * copied into one owned arena), and the tensor directory. Every count, length,
 * offset and size read from the file is checked against the bytes that remain
 * before it is used; a malformed file gets LARES_EFORMAT with a message that
 * names the path, the object and the byte offset.
 *
 * Knows nothing about models or quantization maths; it knows only the block
 * geometry (elements and bytes per block) of each tensor type, a file-format
 * fact needed to size tensor data.
 *
 * Lifetimes: a gguf_file outlives everything that points into it (tensor
 * data, string views). gguf_close unmaps; nothing else ever does.
 *
 * Shapes follow GGUF order: ne[0] is the fastest-varying dimension (the length
 * of a row), ne[1] the number of rows, and so on.
 */
#ifndef LARES_GGUF_H
#define LARES_GGUF_H

#include "core/core.h"

#define GGUF_MAGIC             0x46554747u /* "GGUF" little-endian */
#define GGUF_MAX_DIMS          4
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_KEY_BYTES     65535 /* the spec's limit on key length */
#define GGUF_MAX_NAME_BYTES    255   /* tensor names; real files use < 64 */

/* Metadata value types (file format numbers). */
typedef enum gguf_vtype {
    GGUF_VT_U8 = 0,
    GGUF_VT_I8 = 1,
    GGUF_VT_U16 = 2,
    GGUF_VT_I16 = 3,
    GGUF_VT_U32 = 4,
    GGUF_VT_I32 = 5,
    GGUF_VT_F32 = 6,
    GGUF_VT_BOOL = 7,
    GGUF_VT_STRING = 8,
    GGUF_VT_ARRAY = 9,
    GGUF_VT_U64 = 10,
    GGUF_VT_I64 = 11,
    GGUF_VT_F64 = 12,
    GGUF_VT_COUNT
} gguf_vtype;

const char *gguf_vtype_name(uint32_t vt); /* "u32", ..., "?" when unknown */

/* Tensor types: numbers are GGML's (file format); gaps are retired types. */
enum {
    GGUF_TYPE_F32 = 0,
    GGUF_TYPE_F16 = 1,
    GGUF_TYPE_Q4_0 = 2,
    GGUF_TYPE_Q4_1 = 3,
    /* 4, 5: Q4_2, Q4_3, retired */
    GGUF_TYPE_Q5_0 = 6,
    GGUF_TYPE_Q5_1 = 7,
    GGUF_TYPE_Q8_0 = 8,
    GGUF_TYPE_Q8_1 = 9,
    GGUF_TYPE_Q2_K = 10,
    GGUF_TYPE_Q3_K = 11,
    GGUF_TYPE_Q4_K = 12,
    GGUF_TYPE_Q5_K = 13,
    GGUF_TYPE_Q6_K = 14,
    GGUF_TYPE_Q8_K = 15,
    GGUF_TYPE_IQ2_XXS = 16,
    GGUF_TYPE_IQ2_XS = 17,
    GGUF_TYPE_IQ3_XXS = 18,
    GGUF_TYPE_IQ1_S = 19,
    GGUF_TYPE_IQ4_NL = 20,
    GGUF_TYPE_IQ3_S = 21,
    GGUF_TYPE_IQ2_S = 22,
    GGUF_TYPE_IQ4_XS = 23,
    GGUF_TYPE_I8 = 24,
    GGUF_TYPE_I16 = 25,
    GGUF_TYPE_I32 = 26,
    GGUF_TYPE_I64 = 27,
    GGUF_TYPE_F64 = 28,
    GGUF_TYPE_IQ1_M = 29,
    GGUF_TYPE_BF16 = 30,
    /* 31..33: Q4_0_4_4, Q4_0_4_8, Q4_0_8_8, retired from files */
    GGUF_TYPE_TQ1_0 = 34,
    GGUF_TYPE_TQ2_0 = 35,
    /* 36..38: IQ4_NL_4_4, IQ4_NL_4_8, IQ4_NL_8_8, retired from files */
    GGUF_TYPE_MXFP4 = 39,
    GGUF_TYPE_NVFP4 = 40,
    GGUF_TYPE_Q1_0 = 41,
    GGUF_TYPE_COUNT
};

typedef struct gguf_type_info {
    const char *name;   /* "q4_0" */
    uint32_t blck_elems; /* elements per block */
    uint32_t blck_bytes; /* bytes per block */
} gguf_type_info;

/* NULL for a number that is not a tensor type a GGUF file may hold. */
const gguf_type_info *gguf_type_info_of(uint32_t type);
/* Type number from a name ("q4_k" or "Q4_K"); -1 when unknown. */
int gguf_type_from_name(const char *name);
/* Bytes of a row of n elements; false when n is not a block multiple or overflows. */
bool gguf_row_bytes(uint32_t type, int64_t n, uint64_t *out);

/* A string inside the mapping: not NUL-terminated. */
typedef struct gguf_str {
    const char *ptr;
    uint64_t len;
} gguf_str;

/* An array value. Numeric elements are little-endian and possibly unaligned:
 * read them through gguf_arr_* accessors. */
typedef struct gguf_arr {
    uint32_t type;          /* element type (never ARRAY) */
    uint64_t n;
    const uint8_t *data;    /* numeric arrays: the first element in the mapping */
    const gguf_str *strs;   /* string arrays: n views, owned by the file */
} gguf_arr;

typedef struct gguf_tensor {
    const char *name; /* owned by the file, NUL-terminated */
    uint32_t type;
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS]; /* unused dims are 1 */
    uint64_t offset;           /* from the start of the data section */
    uint64_t nbytes;
    const void *data;          /* into the mapping */
} gguf_tensor;

typedef struct gguf_file gguf_file;

typedef struct gguf_open_opts {
    bool populate; /* pre-fault the whole mapping (MAP_POPULATE where available) */
    /* Not NULL: the whole file is read into this buffer (the caller's, at
     * least into_bytes, kept until gguf_close) instead of being mapped */
    void *into;
    uint64_t into_bytes;
} gguf_open_opts;

/* Maps and parses a file. On failure nothing is left open. */
lares_status gguf_open(const char *path, const gguf_open_opts *opts, gguf_file **out,
                       lares_error *err);
/* Parses a caller-owned buffer (fuzzing, tests); `name` is used in messages.
 * The buffer must outlive the gguf_file. */
lares_status gguf_open_memory(const void *buf, size_t len, const char *name, gguf_file **out,
                              lares_error *err);
void gguf_close(gguf_file *f);

const char *gguf_path(const gguf_file *f);
uint32_t gguf_version(const gguf_file *f);
uint64_t gguf_file_bytes(const gguf_file *f);
uint64_t gguf_alignment(const gguf_file *f);
uint64_t gguf_data_offset(const gguf_file *f); /* file offset of the data section */
uint64_t gguf_header_bytes(const gguf_file *f); /* bytes before the data padding */
const uint8_t *gguf_base(const gguf_file *f);  /* start of the mapping (file offset 0) */
/* True when the file was read into the caller's buffer (gguf_open_opts.into):
 * its pages are not the OS cache's, so they must never be given back */
bool gguf_in_memory(const gguf_file *f);
int gguf_fd(const gguf_file *f);               /* -1 for memory files */
/* True once a read of the mapping failed (the file shrank or the disk failed
 * while mapped, guard.c): the pages read since hold zeros, and whatever was
 * computed from them must be thrown away with LARES_EIO (gguf_check). */
bool gguf_damaged(const gguf_file *f);
/* LARES_EIO naming the file when it is damaged, else LARES_OK. */
lares_status gguf_check(const gguf_file *f, lares_error *err);

/* The mapping guard (guard.c): a slot for [base, base + bytes), or -1 when it
 * cannot be guarded; faults counts the failed reads caught in it. */
int gguf_guard_add(const void *base, uint64_t bytes);
void gguf_guard_remove(int slot);
long gguf_guard_faults(int slot);

/* ---- metadata ---- */

uint64_t gguf_n_kv(const gguf_file *f);
const char *gguf_kv_key(const gguf_file *f, uint64_t i);
uint32_t gguf_kv_type(const gguf_file *f, uint64_t i);
int64_t gguf_find_kv(const gguf_file *f, const char *key); /* -1 when absent */
bool gguf_has(const gguf_file *f, const char *key);

/* Typed getters: LARES_ENOTFOUND when the key is absent, LARES_EFORMAT when the
 * value has an incompatible type or does not fit. Integer getters accept any
 * integer type whose value fits; float getters accept f32, f64 and integers. */
lares_status gguf_get_u64(const gguf_file *f, const char *key, uint64_t *out, lares_error *err);
lares_status gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out, lares_error *err);
lares_status gguf_get_i64(const gguf_file *f, const char *key, int64_t *out, lares_error *err);
lares_status gguf_get_f32(const gguf_file *f, const char *key, float *out, lares_error *err);
lares_status gguf_get_bool(const gguf_file *f, const char *key, bool *out, lares_error *err);
lares_status gguf_get_str(const gguf_file *f, const char *key, gguf_str *out, lares_error *err);
lares_status gguf_get_arr(const gguf_file *f, const char *key, gguf_arr *out, lares_error *err);

/* The same by index (for dumping and copying). */
lares_status gguf_kv_u64(const gguf_file *f, uint64_t i, uint64_t *out, lares_error *err);
lares_status gguf_kv_i64(const gguf_file *f, uint64_t i, int64_t *out, lares_error *err);
lares_status gguf_kv_f64(const gguf_file *f, uint64_t i, double *out, lares_error *err);
lares_status gguf_kv_str(const gguf_file *f, uint64_t i, gguf_str *out, lares_error *err);
lares_status gguf_kv_arr(const gguf_file *f, uint64_t i, gguf_arr *out, lares_error *err);
bool gguf_kv_bool(const gguf_file *f, uint64_t i);

/* Element readers; i < a->n is the caller's duty. */
int64_t gguf_arr_i64(const gguf_arr *a, uint64_t i);   /* integer and bool types */
double gguf_arr_f64(const gguf_arr *a, uint64_t i);    /* any numeric type */
gguf_str gguf_arr_str(const gguf_arr *a, uint64_t i);  /* string arrays */
uint32_t gguf_vtype_bytes(uint32_t vt);                /* 0 for string, array, unknown */

/* ---- tensors ---- */

uint64_t gguf_n_tensors(const gguf_file *f);
const gguf_tensor *gguf_tensor_at(const gguf_file *f, uint64_t i);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name); /* NULL when absent */
int64_t gguf_tensor_nelements(const gguf_tensor *t);

/* FNV-1a 64 of the header bytes (metadata + tensor directory): identifies a
 * model file cheaply without reading its weights. */
uint64_t gguf_header_hash(const gguf_file *f);

/* ---- writing ----
 * Build metadata and a tensor directory, then either write everything at once
 * (every tensor given data) or open the file and stream each tensor's data in
 * directory order. The file is written under a temporary name and renamed into
 * place by gguf_writer_finish, so a failed write never leaves a half file. */

typedef struct gguf_writer gguf_writer;

lares_status gguf_writer_create(gguf_writer **out, lares_error *err);
void gguf_writer_free(gguf_writer *w); /* also removes an unfinished temporary file */

lares_status gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v, lares_error *err);
lares_status gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v, lares_error *err);
lares_status gguf_writer_set_u64(gguf_writer *w, const char *key, uint64_t v, lares_error *err);
lares_status gguf_writer_set_f32(gguf_writer *w, const char *key, float v, lares_error *err);
lares_status gguf_writer_set_bool(gguf_writer *w, const char *key, bool v, lares_error *err);
lares_status gguf_writer_set_str(gguf_writer *w, const char *key, const char *v, lares_error *err);
/* Arrays of numbers: `data` holds n elements of `vt` in host order. */
lares_status gguf_writer_set_arr(gguf_writer *w, const char *key, uint32_t vt, const void *data,
                                 uint64_t n, lares_error *err);
/* Arrays of strings given as (pointer, length) views; copied. */
lares_status gguf_writer_set_arr_str(gguf_writer *w, const char *key, const gguf_str *strs,
                                     uint64_t n, lares_error *err);
/* Copies one metadata entry from an opened file (any type). */
lares_status gguf_writer_copy_kv(gguf_writer *w, const gguf_file *src, uint64_t i,
                                 lares_error *err);
lares_status gguf_writer_set_alignment(gguf_writer *w, uint32_t align, lares_error *err);

/* Adds a tensor. `data` (borrowed until the file is written) may be NULL when
 * the data will be streamed with gguf_writer_write_data. */
lares_status gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t type,
                                    uint32_t n_dims, const int64_t *ne, const void *data,
                                    lares_error *err);

/* Writes header, metadata, directory and every tensor's data (all must have
 * been given data), then renames the file into place. */
lares_status gguf_writer_write_file(gguf_writer *w, const char *path, lares_error *err);

/* Streaming: begin writes everything before the data; then write_data for
 * each tensor in the order added (nbytes must equal its size); finish pads,
 * flushes, syncs and renames into place. */
lares_status gguf_writer_begin(gguf_writer *w, const char *path, lares_error *err);
lares_status gguf_writer_write_data(gguf_writer *w, const void *data, uint64_t nbytes,
                                    lares_error *err);
lares_status gguf_writer_finish(gguf_writer *w, lares_error *err);
uint64_t gguf_writer_n_tensors(const gguf_writer *w);
uint64_t gguf_writer_tensor_bytes(const gguf_writer *w, uint64_t i);

#endif /* LARES_GGUF_H */
