// GGUF v3 read/write.
//
// Reader: gguf_open() maps a file read-only (MAP_PRIVATE) and parses it; tensor
// data is never copied (gguf_get_tensor_data points into the mapping).
// gguf_parse_buffer() parses a caller-owned buffer (tests, fuzzing).
// Every file is treated as hostile: each count and length is bounded by the
// bytes that remain before anything is allocated, every size is overflow-checked,
// and a bad file yields NULL and a message naming the problem — never an abort.
//
// Accepted versions: 3, and 2 (identical layout: 64-bit counts, little-endian).
// Version 1 (32-bit counts) and big-endian files are rejected.
// Keys and tensor names must be valid UTF-8 without NUL bytes; string *values*
// are accepted as arbitrary bytes (old vocabularies hold raw byte tokens).
//
// All accessors tolerate bad indices and wrong types: they return NULL, -1,
// 0 or false instead of crashing.
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ggml.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GGUF_MAGIC "GGUF"
// PowerInfer writes its model and .gpuidx files with this magic in place of
// "GGUF"; the rest of the layout is unchanged, so the reader accepts both.
#define GGUF_POWERINFER_MAGIC "PWRI"
#define GGUF_VERSION 3
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_KEY_GENERAL_ALIGNMENT "general.alignment"
#define GGUF_MAX_ARRAY_DEPTH 8   // an array nested in an array counts 2
#define GGUF_MAX_DIMS 4

// Metadata value types (on-disk ids).
enum gguf_type {
    GGUF_TYPE_UINT8 = 0,
    GGUF_TYPE_INT8 = 1,
    GGUF_TYPE_UINT16 = 2,
    GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4,
    GGUF_TYPE_INT32 = 5,
    GGUF_TYPE_FLOAT32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_UINT64 = 10,
    GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
    GGUF_TYPE_COUNT,
    GGUF_TYPE_INVALID = -1,
};

const char *gguf_type_name(enum gguf_type type);  // "u32", "string", ...; "invalid" otherwise
size_t gguf_type_size(enum gguf_type type);        // bytes of a fixed-size type; 0 for string/array

// ---------------------------------------------------------------- reader

struct gguf_context;
struct gguf_value;  // one metadata value (scalar, string or array), owned by its context

// NULL on error, with a message in err (if err != NULL and errlen > 0).
struct gguf_context *gguf_open(const char *path, char *err, size_t errlen);
// Parse size bytes at data; the buffer must outlive the context (no copy).
struct gguf_context *gguf_parse_buffer(const void *data, size_t size, char *err, size_t errlen);
void gguf_free(struct gguf_context *ctx);

uint32_t gguf_get_version(const struct gguf_context *ctx);
bool gguf_is_powerinfer(const struct gguf_context *ctx);  // the file's magic was "PWRI"
size_t gguf_get_alignment(const struct gguf_context *ctx);
size_t gguf_get_data_offset(const struct gguf_context *ctx);  // file offset of the data section
size_t gguf_get_file_size(const struct gguf_context *ctx);
const void *gguf_get_file_data(const struct gguf_context *ctx);  // whole mapping / buffer

// Key/value pairs, in file order.
int64_t gguf_get_n_kv(const struct gguf_context *ctx);
int64_t gguf_find_key(const struct gguf_context *ctx, const char *key);  // -1 if absent
const char *gguf_get_key(const struct gguf_context *ctx, int64_t i);     // NULL if out of range
enum gguf_type gguf_get_kv_type(const struct gguf_context *ctx, int64_t i);
const struct gguf_value *gguf_get_val(const struct gguf_context *ctx, int64_t i);

// Values. Scalar getters return false (and leave *out alone) on a NULL value
// or a type mismatch; no implicit conversions.
enum gguf_type gguf_val_type(const struct gguf_value *v);
bool gguf_val_get_u8(const struct gguf_value *v, uint8_t *out);
bool gguf_val_get_i8(const struct gguf_value *v, int8_t *out);
bool gguf_val_get_u16(const struct gguf_value *v, uint16_t *out);
bool gguf_val_get_i16(const struct gguf_value *v, int16_t *out);
bool gguf_val_get_u32(const struct gguf_value *v, uint32_t *out);
bool gguf_val_get_i32(const struct gguf_value *v, int32_t *out);
bool gguf_val_get_f32(const struct gguf_value *v, float *out);
bool gguf_val_get_bool(const struct gguf_value *v, bool *out);
bool gguf_val_get_u64(const struct gguf_value *v, uint64_t *out);
bool gguf_val_get_i64(const struct gguf_value *v, int64_t *out);
bool gguf_val_get_f64(const struct gguf_value *v, double *out);
// NUL-terminated copy of a string value (may hold NULs inside: use *len). NULL if not a string.
const char *gguf_val_get_str(const struct gguf_value *v, size_t *len);

// Arrays: element type and length (-1 / GGUF_TYPE_INVALID if v is not an array).
enum gguf_type gguf_arr_type(const struct gguf_value *v);
int64_t gguf_arr_len(const struct gguf_value *v);
// Raw little-endian elements of a fixed-size-element array (possibly unaligned;
// bools are one byte each). NULL for string/array elements or a non-array.
const void *gguf_arr_data(const struct gguf_value *v);
// Copy element j of a fixed-size-element array into out (gguf_type_size bytes).
bool gguf_arr_get_elem(const struct gguf_value *v, int64_t j, void *out);
const char *gguf_arr_get_str(const struct gguf_value *v, int64_t j, size_t *len);
const struct gguf_value *gguf_arr_get_arr(const struct gguf_value *v, int64_t j);

// Tensors, in file order. Offsets are relative to the data section.
int64_t gguf_get_n_tensors(const struct gguf_context *ctx);
int64_t gguf_find_tensor(const struct gguf_context *ctx, const char *name);  // -1 if absent
const char *gguf_get_tensor_name(const struct gguf_context *ctx, int64_t i);
int gguf_get_tensor_type(const struct gguf_context *ctx, int64_t i);   // ggml_type, -1 if bad i
int gguf_get_tensor_n_dims(const struct gguf_context *ctx, int64_t i); // -1 if bad i
// ne[0..3] (unused dims are 1); false if bad i.
bool gguf_get_tensor_ne(const struct gguf_context *ctx, int64_t i, int64_t ne[GGUF_MAX_DIMS]);
uint64_t gguf_get_tensor_offset(const struct gguf_context *ctx, int64_t i);
size_t gguf_get_tensor_size(const struct gguf_context *ctx, int64_t i);
const void *gguf_get_tensor_data(const struct gguf_context *ctx, int64_t i);

// ---------------------------------------------------------------- writer
//
// Builds metadata and a tensor list, then writes path atomically: to
// "path.tmp.XXXXXX" (mode 0666 less the umask), fsync, rename. On failure the
// temp file is removed.
// Functions return 0 on success and -1 on error; gguf_writer_error() says why.
// Keys keep their first insertion order; setting an existing key replaces its
// value in place. A UINT32 "general.alignment" key sets the data alignment.

struct gguf_writer;
struct gguf_wval;  // a value under construction (owned by the caller until handed over)

struct gguf_writer *gguf_writer_new(void);
void gguf_writer_free(struct gguf_writer *w);
const char *gguf_writer_error(const struct gguf_writer *w);

// Value builders. NULL on a bad type. gguf_wval_free frees an unused one.
struct gguf_wval *gguf_wval_scalar(enum gguf_type type, const void *data);  // data: one element
struct gguf_wval *gguf_wval_str(const char *s, size_t len);
struct gguf_wval *gguf_wval_arr(enum gguf_type elem_type);
// Append n fixed-size elements (elem type must match) / a string / a sub-array
// (ownership of child passes to arr, also on failure).
int gguf_wval_arr_push_data(struct gguf_wval *arr, const void *data, size_t n);
int gguf_wval_arr_push_str(struct gguf_wval *arr, const char *s, size_t len);
int gguf_wval_arr_push_arr(struct gguf_wval *arr, struct gguf_wval *child);
void gguf_wval_free(struct gguf_wval *v);

// Takes ownership of v (also on failure).
int gguf_writer_set_val(struct gguf_writer *w, const char *key, struct gguf_wval *v);
int gguf_writer_set_u8(struct gguf_writer *w, const char *key, uint8_t v);
int gguf_writer_set_i8(struct gguf_writer *w, const char *key, int8_t v);
int gguf_writer_set_u16(struct gguf_writer *w, const char *key, uint16_t v);
int gguf_writer_set_i16(struct gguf_writer *w, const char *key, int16_t v);
int gguf_writer_set_u32(struct gguf_writer *w, const char *key, uint32_t v);
int gguf_writer_set_i32(struct gguf_writer *w, const char *key, int32_t v);
int gguf_writer_set_f32(struct gguf_writer *w, const char *key, float v);
int gguf_writer_set_bool(struct gguf_writer *w, const char *key, bool v);
int gguf_writer_set_u64(struct gguf_writer *w, const char *key, uint64_t v);
int gguf_writer_set_i64(struct gguf_writer *w, const char *key, int64_t v);
int gguf_writer_set_f64(struct gguf_writer *w, const char *key, double v);
int gguf_writer_set_str(struct gguf_writer *w, const char *key, const char *s);
int gguf_writer_set_arr_data(struct gguf_writer *w, const char *key, enum gguf_type elem_type,
                             const void *data, size_t n);
int gguf_writer_set_arr_str(struct gguf_writer *w, const char *key, const char *const *strs, size_t n);

// The data is borrowed until gguf_writer_write returns; nbytes must equal the
// size the type and shape imply.
int gguf_writer_add_tensor(struct gguf_writer *w, const char *name, enum ggml_type type, int n_dims,
                           const int64_t *ne, const void *data, size_t nbytes);
// Refuses (-1, a message in err) a path that exists and is not a regular
// file: a directory, symbolic link, FIFO, socket or device is never replaced.
int gguf_writer_write(struct gguf_writer *w, const char *path);

// 0 if path may be written by gguf_writer_write (absent or a regular file),
// else -1 with a message naming what it is.
int gguf_check_output_path(const char *path, char *err, size_t errlen);
// Removes the temporary file of a write in progress, if any, and waits for a
// write creating or renaming its file to finish that step. It takes a lock, so
// call it from a thread that sigwait()s for SIGINT/SIGTERM (as pinfer-quantize
// does), never from a signal handler.
void gguf_writer_remove_partial(void);

#ifdef __cplusplus
}
#endif
