/* Guards against damaged and hostile inputs (issue 16): range-checked
 * trainer state, linear-time JSON arrays, bounded data loading, output
 * checks and the lock, valid JSON numbers, sampling at tiny temperatures. */
#include <check.h>
#include <errno.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/error.h"
#include "core/parse.h"
#include "core/utf8.h"
#include "models/util/cli.h"
#include "models/util/config_json.h"
#include "models/data/data.h"
#include "models/train/outfile.h"
#include "models/data/pairs.h"
#include "models/charlm/charlm.h"
#include "models/charlm/sampling.h"
#include "models/train/train_common.h"
#include "models/train/checkpoint.h"
#include "models/train/finetune.h"
#include "models/train/state.h"
#include "models/text/vocab.h"
#include "nn/safetensors.h"
#include "testutil.h"

START_TEST(test_state_fields)
{
    int64_t epoch = -1, steps = -1;
    double lr = 0;
    uint64_t seed = 0;
    const char *data = NULL;
    const cg_json_field f[] = {
        {"epoch", CG_JF_I64, &epoch, 0, 1e9, false}, {"steps", CG_JF_I64, &steps, 1, 1e9, true},
        {"lr", CG_JF_F64, &lr, 0, 10, false},        {"seed", CG_JF_U64STR, &seed, 0, 0, false},
        {"data", CG_JF_STR, &data, 0, 0, false},
    };
    cJSON *o = cJSON_Parse("{\"epoch\": 3, \"lr\": 0.5, \"seed\": \"18446744073709551615\", "
                           "\"data\": \"x.txt\"}");
    ck_assert(cg_json_read_fields(o, "state", f, 5));
    ck_assert_int_eq(epoch, 3);
    ck_assert_int_eq(steps, -1); /* optional, absent: unchanged */
    ck_assert(lr == 0.5);
    ck_assert(seed == UINT64_MAX);
    ck_assert_str_eq(data, "x.txt");
    cJSON_Delete(o);
    /* a double kept exactly as a decimal string (models/train/trainer.h) */
    o = cJSON_Parse("{\"epoch\": 3, \"lr\": \"0.10000000000000001\", \"seed\": \"1\", "
                    "\"data\": \"x\"}");
    ck_assert(cg_json_read_fields(o, "state", f, 5));
    ck_assert(lr == 0.1);
    cJSON_Delete(o);
    const char *bad[][2] = {
        {"{\"epoch\": 1e15, \"lr\": 1, \"seed\": \"1\", \"data\": \"x\"}",
         "\"epoch\" is 1000000000000000"},
        {"{\"epoch\": 1.5, \"lr\": 1, \"seed\": \"1\", \"data\": \"x\"}", "integer"},
        {"{\"epoch\": -1, \"lr\": 1, \"seed\": \"1\", \"data\": \"x\"}", "outside"},
        {"{\"lr\": 1, \"seed\": \"1\", \"data\": \"x\"}", "\"epoch\" is missing"},
        {"{\"epoch\": 1, \"lr\": 11, \"seed\": \"1\", \"data\": \"x\"}", "\"lr\""},
        {"{\"epoch\": 1, \"lr\": \"0.5x\", \"seed\": \"1\", \"data\": \"x\"}", "\"lr\""},
        {"{\"epoch\": 1, \"lr\": \"nan\", \"seed\": \"1\", \"data\": \"x\"}", "\"lr\""},
        {"{\"epoch\": 1, \"lr\": 1, \"seed\": \"-1\", \"data\": \"x\"}", "\"seed\""},
        {"{\"epoch\": 1, \"lr\": 1, \"seed\": \"99999999999999999999\", \"data\": \"x\"}",
         "64-bit"},
        {"{\"epoch\": 1, \"lr\": 1, \"seed\": 5, \"data\": \"x\"}", "\"seed\""},
        {"{\"epoch\": 1, \"lr\": 1, \"seed\": \"1\", \"data\": 3}", "\"data\" must be a string"},
        {"[1]", "not a JSON object"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cJSON *b = cJSON_Parse(bad[i][0]);
        cg_clear_error();
        ck_assert_msg(!cg_json_read_fields(b, "state", f, 5), "accepted %s", bad[i][0]);
        ck_assert_msg(strstr(cg_last_error(), bad[i][1]), "%s: %s", bad[i][0], cg_last_error());
        cJSON_Delete(b);
    }
    double r[4];
    int n;
    o = cJSON_Parse("{\"recent\": [1, 2.5, 3], \"bad\": [1, null], \"many\": [1,2,3,4,5]}");
    ck_assert(cg_json_f64_array(o, "state", "recent", r, 4, &n));
    ck_assert_int_eq(n, 3);
    ck_assert(r[1] == 2.5);
    ck_assert(cg_json_f64_array(o, "state", "absent", r, 4, &n) && n == 0);
    ck_assert(!cg_json_f64_array(o, "state", "bad", r, 4, &n));
    ck_assert(!cg_json_f64_array(o, "state", "many", r, 4, &n));
    cJSON_Delete(o);
}
END_TEST

START_TEST(test_position_check)
{
    /* 9 batches per epoch */
    ck_assert(cg_train_position_check(0, 9, 9, 0, "x")); /* nothing drawn yet */
    ck_assert(cg_train_position_check(1, 3, 9, 3, "x"));
    ck_assert(cg_train_position_check(1, 9, 9, 9, "x"));
    ck_assert(cg_train_position_check(3, 0, 9, 18, "x"));
    ck_assert(cg_train_position_check(3, 5, 9, 23, "x"));
    cg_clear_error();
    ck_assert(!cg_train_position_check(0, 3, 9, 3, "x")); /* the SEGV of issue 16 */
    ck_assert(strstr(cg_last_error(), "bad trainer position"));
    ck_assert(!cg_train_position_check(1000000000000000LL, 3, 9, 3, "x")); /* 1e15 shuffles */
    ck_assert(!cg_train_position_check(INT64_MAX, 3, 9, INT64_MAX, "x"));
    ck_assert(!cg_train_position_check(-1, 3, 9, 3, "x"));
    ck_assert(!cg_train_position_check(1, 10, 9, 10, "x"));
    ck_assert(!cg_train_position_check(1, -1, 9, 0, "x"));
    ck_assert(!cg_train_position_check(2, 3, 9, 3, "x"));
    ck_assert(!cg_train_position_check(1, 3, 0, 3, "x"));
    /* epoch 0 is the position before the first shuffle: its batch is the last */
    ck_assert(!cg_train_position_check(0, 3, 9, 0, "x"));
    /* an epoch whose first step overflows int64 (4 * 2^62 wraps to 0) */
    ck_assert(!cg_train_position_check((INT64_C(1) << 62) + 1, 0, 4, 0, "x"));
}
END_TEST

/* The files beside a checkpoint: its name without ".safetensors", then the
 * suffix; a name without that extension, or that is the extension alone
 * (a hidden file's: no stem), is kept whole. */
START_TEST(test_ckpt_sibling)
{
    static const char *const cases[][2] = {
        {"m.safetensors", "m.loss.png"},
        {"runs/m.safetensors", "runs/m.loss.png"},
        {"m.st", "m.st.loss.png"},
        {"m.safetensors.bak", "m.safetensors.bak.loss.png"},
        {".safetensors", ".safetensors.loss.png"},
        {"runs/.safetensors", "runs/.safetensors.loss.png"},
        {"a.safetensors/m", "a.safetensors/m.loss.png"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *in = strdup(cases[i][0]); /* its own bytes: none read before them */
        char *p = cg_loss_png_path(in);
        ck_assert_ptr_nonnull(p);
        ck_assert_str_eq(p, cases[i][1]);
        free(p);
        free(in);
    }
    char *lock = cg_ckpt_sibling("runs/m.safetensors", "");
    ck_assert_str_eq(lock, "runs/m");
    free(lock);
}
END_TEST

/* 100,000 evaluations: loads completely and correctly (it was quadratic:
 * 20,000 took 4.6 s, 100,000 more than 120 s). */
START_TEST(test_history_long)
{
    cg_history h = {0};
    const int n = 100000;
    for (int i = 0; i < n; i++)
        ck_assert(cg_history_push(&h, 10 * (int64_t)(i + 1), 3.0 - i * 1e-5,
                                  i == 7 ? NAN : 2.0 + i * 1e-6));
    for (int64_t s = 1; s <= 25000; s++)
        ck_assert(cg_history_train_step(&h, s, 1.0 + (double)(s % 7)));
    char *j = cg_history_to_json(&h);
    ck_assert_ptr_nonnull(j);
    cg_history g = {0};
    ck_assert(cg_history_from_json(j, &g));
    ck_assert_int_eq(g.n, n);
    ck_assert_int_eq(g.dn, h.dn);
    ck_assert(g.step[n - 1] == h.step[n - 1] && g.train[12345] == h.train[12345]);
    ck_assert(g.val[n - 1] == h.val[n - 1] && isnan(g.val[7]));
    ck_assert(memcmp(g.dloss, h.dloss, (size_t)h.dn * sizeof *h.dloss) == 0);
    ck_assert(g.every == h.every && g.acc_n == h.acc_n && g.acc_loss == h.acc_loss);
    free(j);
    cg_history_free(&g);
    cg_history_free(&h);
    /* mismatched lengths are refused */
    ck_assert(!cg_history_from_json("{\"step\":[1,2],\"train\":[1],\"val\":[1,2]}", &g));
    ck_assert(!cg_history_from_json("{\"step\":[1],\"train\":[1],\"val\":[\"x\"]}", &g));
    ck_assert(!cg_history_from_json("{\"step\":[1e300],\"train\":[1],\"val\":[1]}", &g));
    cg_history_free(&g);
}
END_TEST

static char *tmpdir;

static const char *tmp(const char *name)
{
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

static void write_file(const char *path, const char *text, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(text, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
}

static void setup(void)
{
    char t[PATH_MAX];
    cg_test_mkdtemp(t, sizeof t, "cg_guards.");
    tmpdir = strdup(t);
}

static void teardown(void)
{
    cg_test_rm_tree(tmpdir);
    ck_assert_msg(access(tmpdir, F_OK) != 0, "%s was not removed", tmpdir);
    free(tmpdir);
}

static void *fifo_writer(void *path)
{
    FILE *w = fopen(path, "w");
    if (w) {
        fputs("fifo text", w);
        fclose(w);
    }
    return NULL;
}

/* 70000 bytes, the last a NUL: more than a stream's first read holds */
static void *fifo_writer_nul(void *path)
{
    static char big[70000];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    FILE *w = fopen(path, "w");
    if (w) {
        fwrite(big, 1, sizeof big, w);
        fclose(w);
    }
    return NULL;
}

/* A NUL byte in a stream is named by its offset in the input, not in the
 * read that found it (a pipe is read in pieces of at most 64 KiB). */
START_TEST(test_read_once_nul_offset)
{
    ck_assert_int_eq(mkfifo(tmp("nulfifo"), 0600), 0);
    void (*was)(int) = signal(SIGPIPE, SIG_IGN);
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, fifo_writer_nul, (void *)tmp("nulfifo")), 0);
    size_t n;
    char *b = cg_read_file_once(tmp("nulfifo"), 0, true, &n);
    pthread_join(th, NULL);
    signal(SIGPIPE, was);
    ck_assert_ptr_null(b);
    ck_assert_msg(strstr(cg_last_error(), "holds a NUL byte at offset 69999: not a text file"),
                  "%s", cg_last_error());
    unlink(tmp("nulfifo"));
}
END_TEST

/* A file is read once from any kind of file; errors are reported. */
START_TEST(test_read_once)
{
    size_t n;
    write_file(tmp("a.txt"), "hello\n", 6);
    char *b = cg_read_file_once(tmp("a.txt"), 0, true, &n);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_eq(n, 6);
    ck_assert_str_eq(b, "hello\n");
    free(b);
    /* a FIFO (and so a pipe, as --data <(cat x) gives it): read once, not
     * "empty"; the writer is a thread (opening a FIFO waits for both ends) */
    ck_assert_int_eq(mkfifo(tmp("fifo"), 0600), 0);
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, fifo_writer, (void *)tmp("fifo")), 0);
    b = cg_read_file_once(tmp("fifo"), 0, true, &n);
    pthread_join(th, NULL);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_eq(n, 9);
    ck_assert_str_eq(b, "fifo text");
    free(b);
    /* refusals, each with its message */
    CG_ASSERT_FAILS(cg_read_file_once(tmpdir, 0, true, &n), "is a directory");
    CG_ASSERT_FAILS(cg_read_file_once(tmp("missing"), 0, true, &n), "cannot open");
    CG_ASSERT_FAILS(cg_read_file_once("/dev/zero", 0, true, &n), "NUL byte at offset 0");
    CG_ASSERT_FAILS(cg_read_file_once("/dev/zero", 1 << 20, false, &n), "larger than 1.0 MB");
    /* a limit the caller gave is not "a sixth of the available memory",
     * and 34 bytes are not "0.0 MB" (found by fuzz/fuzz_corpus.c) */
    CG_ASSERT_FAILS(cg_read_file_once("/dev/zero", 34, false, &n),
                    "is larger than 34 bytes, the limit set for this input");
    CG_ASSERT_FAILS(cg_read_file_once("/dev/zero", 1 << 20, false, &n), "limit set for this input");
    CG_ASSERT_FAILS(cg_read_file_once("/dev/null", 0, true, &n), "is empty");
    b = cg_read_file_once("/dev/null", 0, false, &n);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_eq(n, 0);
    free(b);
    /* a read error (EIO) is an error, not the end of the input */
    CG_ASSERT_FAILS(cg_read_file_once("/proc/self/mem", 0, false, &n), "cannot read");
    /* the limit is the largest input read: 6 bytes under a limit of 6, not 5 */
    b = cg_read_file_once(tmp("a.txt"), 6, true, &n);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_eq(n, 6);
    free(b);
    CG_ASSERT_FAILS(cg_read_file_once(tmp("a.txt"), 5, true, &n), "larger than 5 bytes");
    /* an output whose earlier write failed is an error at the flush, though
     * nothing is left to flush (an unbuffered stream) */
    FILE *full = fopen("/dev/full", "w");
    ck_assert_ptr_nonnull(full);
    ck_assert_int_eq(setvbuf(full, NULL, _IONBF, 0), 0);
    ck_assert_int_eq(fputs("lost", full), EOF);
    errno = ENOENT; /* stale, from something else: not this stream's error */
    ck_assert(!cg_output_flush(full));
    ck_assert_msg(strstr(cg_last_error(), "cannot write the output"), "%s", cg_last_error());
    ck_assert_msg(!strstr(cg_last_error(), strerror(ENOENT)), "%s", cg_last_error());
    fclose(full);
    /* the default limit: CG_MAX_INPUT_MB */
    setenv("CG_MAX_INPUT_MB", "3", 1);
    ck_assert_uint_eq(cg_input_limit(), (size_t)3 << 20);
    unsetenv("CG_MAX_INPUT_MB");
    ck_assert_uint_ge(cg_input_limit(), (size_t)1 << 20);
}
END_TEST

START_TEST(test_read_line)
{
    write_file(tmp("l.txt"), "one\n\nthree", 10);
    FILE *f = fopen(tmp("l.txt"), "rb");
    char *buf = NULL;
    size_t cap = 0;
    ck_assert_int_eq(cg_read_line(&buf, &cap, f, "l", 100), 3);
    ck_assert_str_eq(buf, "one");
    ck_assert_int_eq(cg_read_line(&buf, &cap, f, "l", 100), 0);
    ck_assert_int_eq(cg_read_line(&buf, &cap, f, "l", 100), 5);
    ck_assert_str_eq(buf, "three");
    ck_assert_int_eq(cg_read_line(&buf, &cap, f, "l", 100), -1);
    fclose(f);
    f = fopen(tmp("l.txt"), "rb");
    cg_clear_error();
    /* a bad line is read to its end and dropped: the next line follows */
    ck_assert_int_eq(cg_read_line(&buf, &cap, f, "l", 2), -3);
    ck_assert(strstr(cg_last_error(), "longer than 2 bytes"));
    ck_assert_int_eq(cg_read_line(&buf, &cap, f, "l", 2), 0);
    fclose(f);
    write_file(tmp("l.txt"), "a\0b\nok\n", 7);
    f = fopen(tmp("l.txt"), "rb");
    ck_assert_int_eq(cg_read_line(&buf, &cap, f, "l", 100), -3);
    ck_assert(strstr(cg_last_error(), "NUL byte at byte 2"));
    ck_assert_int_eq(cg_read_line(&buf, &cap, f, "l", 100), 2);
    ck_assert_str_eq(buf, "ok");
    fclose(f);
    /* stdin redirected from a directory: a read error, not the end */
    f = fopen(tmpdir, "rb");
    ck_assert_ptr_nonnull(f);
    cg_clear_error();
    ck_assert_int_eq(cg_read_line(&buf, &cap, f, "stdin", 100), -2);
    ck_assert(strstr(cg_last_error(), "read error"));
    fclose(f);
    f = fopen("/dev/zero", "rb");
    ck_assert_int_eq(cg_read_line(&buf, &cap, f, "stdin", 100), -2);
    fclose(f);
    free(buf);
}
END_TEST

/* cg_read_lines: without `why` a bad line fails the input naming its line;
 * with it the bad line is "" (none of its bytes) and its reason is kept,
 * the lines around it as they were ("\r\n" cut). */
START_TEST(test_read_lines)
{
    write_file(tmp("ls.txt"), "ok\r\nab\0cd\nlast\n", 15);
    FILE *f = fopen(tmp("ls.txt"), "rb");
    ck_assert_ptr_nonnull(f);
    int64_t n = -1;
    cg_clear_error();
    ck_assert_ptr_null(cg_read_lines(f, "ls", &n, NULL));
    ck_assert_msg(strcmp(cg_last_error(), "ls: line 2: a NUL byte at byte 3 (not text)") == 0, "%s",
                  cg_last_error());
    rewind(f);
    char **why = NULL;
    char **lines = cg_read_lines(f, "ls", &n, &why);
    fclose(f);
    ck_assert_ptr_nonnull(lines);
    ck_assert_ptr_nonnull(why);
    ck_assert_int_eq(n, 3);
    ck_assert_str_eq(lines[0], "ok");
    ck_assert_str_eq(lines[1], "");
    ck_assert_str_eq(lines[2], "last");
    ck_assert_ptr_null(why[0]);
    ck_assert_ptr_nonnull(why[1]);
    ck_assert_str_eq(why[1], "a NUL byte at byte 3 (not text)");
    ck_assert_ptr_null(why[2]);
    for (int64_t i = 0; i < n; i++) {
        free(lines[i]);
        free(why[i]);
    }
    free(lines);
    free(why);
}
END_TEST

/* cg_ensure_parent_dir: a file at the root needs no directory; every
 * missing directory of a deep path is made (as mkdir -p, os.makedirs); a
 * file where a directory should be is refused, and the directories that
 * call made before it failed are removed again. */
START_TEST(test_ensure_parent_dir)
{
    cg_clear_error();
    ck_assert_msg(cg_ensure_parent_dir("/cg_no_such_file"), "%s", cg_last_error());
    ck_assert(cg_ensure_parent_dir("plain_name"));
    ck_assert_int_eq(mkdir(tmp("deep"), 0700), 0);
    ck_assert_msg(cg_ensure_parent_dir(tmp("deep/sub/m.st")), "%s", cg_last_error());
    struct stat st;
    ck_assert(stat(tmp("deep/sub"), &st) == 0 && S_ISDIR(st.st_mode));
    ck_assert_msg(cg_ensure_parent_dir(tmp("deep/a/b//c/m.st")), "%s", cg_last_error());
    ck_assert(stat(tmp("deep/a/b/c"), &st) == 0 && S_ISDIR(st.st_mode));
    ck_assert_msg(cg_ensure_parent_dir(tmp("deep/a/b/c/m.st")), "%s", cg_last_error());
    write_file(tmp("deep/file"), "x", 1);
    CG_ASSERT_FAILS((void *)(intptr_t)cg_ensure_parent_dir(tmp("deep/file/m.st")),
                    "is not a directory");
    CG_ASSERT_FAILS((void *)(intptr_t)cg_ensure_parent_dir(tmp("deep/file/z/m.st")),
                    "is not a directory");
    char longer[NAME_MAX + 16];
    memset(longer, 'n', NAME_MAX + 1);
    strcpy(longer + NAME_MAX + 1, "/m.st");
    char deeper[PATH_MAX];
    snprintf(deeper, sizeof deeper, "%s/%s", tmp("deep/x/y"), longer);
    CG_ASSERT_FAILS((void *)(intptr_t)cg_ensure_parent_dir(deeper), "cannot create directory");
    ck_assert(access(tmp("deep/x"), F_OK) != 0);
    ck_assert(rmdir(tmp("deep/a/b/c")) == 0 && rmdir(tmp("deep/a/b")) == 0 &&
              rmdir(tmp("deep/a")) == 0);
    ck_assert(rmdir(tmp("deep/sub")) == 0);
    ck_assert(unlink(tmp("deep/file")) == 0);
    ck_assert(rmdir(tmp("deep")) == 0);
}
END_TEST

/* One read; the vocabulary built from the text; the same ids as before. */
START_TEST(test_corpus_read)
{
    const char *text = "abca\r\nxyz\u00e4a";
    write_file(tmp("c.txt"), text, strlen(text));
    cg_vocab *v = NULL;
    cg_data_id id;
    cg_corpus *c = cg_corpus_read(tmp("c.txt"), NULL, 0, &v, &id);
    ck_assert_ptr_nonnull(c);
    ck_assert_ptr_nonnull(v);
    ck_assert_uint_eq(id.size, strlen(text)); /* the identity of the bytes read */
    ck_assert(id.path[0] == '/' && strstr(id.path, "/c.txt"));
    int64_t n;
    uint32_t *cps = cg_read_text_file(tmp("c.txt"), &n);
    cg_vocab *v2 = cg_vocab_from_codepoints(cps, n);
    cg_corpus *c2 = cg_corpus_new(v2, cps, n);
    ck_assert_int_eq(c->n, 10);
    ck_assert_int_eq(c->n, c2->n);
    ck_assert_int_eq(v->n, v2->n);
    ck_assert(memcmp(c->ids, c2->ids, (size_t)n * sizeof *c->ids) == 0);
    ck_assert_int_eq(c->n_train, c2->n_train);
    ck_assert_int_eq(c->unknown, 0);
    int64_t x[3], y[3];
    cg_split_window(cg_corpus_train(c), 1, 3, x, y);
    ck_assert(x[0] == c->ids[1] && x[2] == c->ids[3] && y[2] == c->ids[4]);
    /* random windows of T + 1 ids of the 9 of the training split: none of
     * T = 9, and of T = 7 both of the two there are ('a' and 'b' first) */
    cg_rng g = cg_rng_new(1);
    int64_t bx[9], by[9];
    CG_ASSERT_FAILS((void *)(intptr_t)cg_get_batch(cg_corpus_train(c), 1, 9, &g, bx, by),
                    "a split of 9 characters is too short for windows of 9+1");
    bool seen[2] = {false, false};
    for (int k = 0; k < 64; k++) {
        ck_assert(cg_get_batch(cg_corpus_train(c), 1, 7, &g, bx, by));
        ck_assert(bx[0] == c->ids[0] || bx[0] == c->ids[1]);
        ck_assert(by[6] == c->ids[bx[0] == c->ids[1] ? 8 : 7]);
        seen[bx[0] == c->ids[1]] = true;
    }
    ck_assert(seen[0] && seen[1]);
    /* with a given vocabulary: unknown characters counted */
    cg_vocab *small = cg_vocab_from_codepoints((uint32_t[]){'a', 'b'}, 2);
    cg_corpus *c3 = cg_corpus_read(tmp("c.txt"), small, 0, NULL, NULL);
    ck_assert_ptr_nonnull(c3);
    ck_assert_int_eq(c3->unknown, 6);
    ck_assert_uint_eq(c3->first_unknown, 'c');
    CG_ASSERT_FAILS(cg_corpus_read("/dev/zero", small, 0, NULL, NULL), "NUL byte");
    cg_corpus_free(c);
    cg_corpus_free(c2);
    cg_corpus_free(c3);
    cg_vocab_free(v);
    cg_vocab_free(v2);
    cg_vocab_free(small);
    free(cps);
}
END_TEST

/* A pair file of empty sides is refused at load (it used to train and then
 * fail every save). */
START_TEST(test_pairs_empty_sides)
{
    cg_pairs p;
    CG_ASSERT_FAILS((void *)(intptr_t)cg_pairs_parse("a\tb\n\t\n", 6, "x", &p),
                    "x:2: empty source");
    CG_ASSERT_FAILS((void *)(intptr_t)cg_pairs_parse("a\t\n", 3, "x", &p), "x:1: empty target");
    CG_ASSERT_FAILS((void *)(intptr_t)cg_pairs_parse("\tb", 2, "x", &p), "x:1: empty source");
    /* issue 34, finding 12: only spaces is no text either */
    CG_ASSERT_FAILS((void *)(intptr_t)cg_pairs_parse("a\tb\nc\t   \n", 11, "x", &p),
                    "x:2: the target holds only spaces");
    CG_ASSERT_FAILS((void *)(intptr_t)cg_pairs_parse("  \tb\n", 5, "x", &p),
                    "x:1: the source holds only spaces");
    ck_assert(cg_pairs_parse("a\tb\n", 4, "x", &p));
    cg_pairs_free(&p);
    CG_ASSERT_FAILS((void *)(intptr_t)cg_pairs_read("/dev/zero", &p, NULL), "NUL byte");
}
END_TEST

/* Characters outside a seq2seq vocabulary are counted (and warned about). */
START_TEST(test_pairs_unknown)
{
    cg_pairs p;
    ck_assert(cg_pairs_parse("ab\tba\nc\u00e9\txa\n", 13, "x", &p));
    cg_pair_vocab v;
    int64_t first = 0;
    ck_assert(cg_pair_vocab_build(&p, &first, 1, &v)); /* a, b */
    ck_assert_int_eq(cg_pairs_warn_unknown(&p, NULL, 2, &v, NULL, "pairs"), 3);
    ck_assert_int_eq(cg_pairs_warn_unknown(&p, &first, 1, &v, NULL, "pairs"), 0);
    ck_assert_int_eq(cg_pair_vocab_warn_unknown(&v, "a\u00e9\u00e9b", NULL, "sentence", 1), 2);
    /* the first unknown character is named, and a sentence without one
     * gives no warning */
    uint32_t fu = 0;
    ck_assert_int_eq(cg_pair_vocab_count_unknown(&v, "aqbx", &fu), 2);
    ck_assert_uint_eq(fu, 'q');
    FILE *err = tmpfile();
    ck_assert_ptr_nonnull(err);
    fflush(stderr);
    int saved = dup(2);
    ck_assert(saved >= 0 && dup2(fileno(err), 2) == 2);
    int64_t none = cg_pair_vocab_warn_unknown(&v, "abba", "prog", "sentence", 1);
    int64_t two = cg_pair_vocab_warn_unknown(&v, "aqbx", "prog", "sentence", 2);
    fflush(stderr);
    ck_assert(dup2(saved, 2) == 2);
    close(saved);
    ck_assert(none == 0 && two == 2);
    char line[256] = "";
    rewind(err);
    ck_assert_ptr_nonnull(fgets(line, sizeof line, err));
    ck_assert_msg(strstr(line, "prog: warning: 2 character(s) of sentence 2 are not in the "
                               "vocabulary (first U+0071 'q')") == line,
                  "%s", line);
    ck_assert_ptr_null(fgets(line, sizeof line, err)); /* one line: none for "abba" */
    fclose(err);
    cg_pair_vocab_free(&v);
    cg_pairs_free(&p);
}
END_TEST

/* A vanishing temperature samples greedily (1e-40 sampled the last ids). */
START_TEST(test_tiny_temperature)
{
    const float logits[5] = {1.0f, 3.0f, -2.0f, 2.5f, 0.5f};
    const double temps[] = {1e-40, 1e-38, 1e-30, 1e-300, 4.9e-324};
    cg_rng rng = cg_rng_new(7);
    for (size_t t = 0; t < sizeof temps / sizeof temps[0]; t++)
        for (int k = 0; k < 50; k++) {
            cg_sample_opts o = {.temperature = temps[t], .top_k = k % 3, .top_p = k % 2 ? 1 : 0.9};
            ck_assert_int_eq(cg_sample(logits, 5, &o, &rng), 1);
        }
    /* a huge logit with an ordinary temperature still samples normally */
    cg_sample_opts o = {.temperature = 1.0, .top_k = 0, .top_p = 1};
    ck_assert_int_eq(cg_sample((const float[]){0, 50, 0}, 3, &o, &rng), 1);
}
END_TEST

/* The identity of a data file: a moved copy matches, an edit does not. */
START_TEST(test_data_id)
{
    write_file(tmp("d.txt"), "some data\n", 10);
    size_t n;
    char *b = cg_read_file_once(tmp("d.txt"), 0, true, &n);
    cg_data_id id, back;
    cg_data_id_of(tmp("d.txt"), b, n, &id);
    ck_assert(id.path[0] == '/');
    ck_assert(strstr(id.path, "/d.txt"));
    ck_assert_uint_eq(id.size, 10);
    cJSON *j = cg_data_id_to_json(&id);
    ck_assert(cg_data_id_from_json(j, "state", &back));
    ck_assert_str_eq(back.path, id.path);
    ck_assert(back.size == id.size && back.hash == id.hash);
    cJSON_Delete(j);
    cg_data_id read;
    cg_data_id_of("copy.txt", b, n, &read);
    ck_assert(cg_data_id_check(&back, &read));
    cg_clear_error();
    cg_data_id_of("other.txt", "some data!\n", 11, &read);
    ck_assert(!cg_data_id_check(&back, &read));
    ck_assert_msg(strstr(cg_last_error(), "11 bytes, the checkpoint's 10"), "%s", cg_last_error());
    ck_assert(strstr(cg_last_error(), "'other.txt' is not the data"));
    cg_data_id_of("other.txt", "some date\n", 10, &read);
    ck_assert(!cg_data_id_check(&back, &read));
    ck_assert_msg(strstr(cg_last_error(), "different checksum"), "%s", cg_last_error());
    free(b);
    cJSON *bad = cJSON_Parse("{\"path\": \"x\", \"size\": \"-1\", \"xxh3\": \"00\"}");
    ck_assert(!cg_data_id_from_json(bad, "state", &back));
    ck_assert(strstr(cg_last_error(), "malformed data identity"));
    cJSON_Delete(bad);
    /* each fault alone in an identity otherwise whole (round thirty: the
     * case above has two, a size of "-1" and an xxh3 of two digits) */
    const char *one[] = {"{\"path\": \"x\", \"size\": \"-1\", \"xxh3\": \"0123456789abcdef\"}",
                         "{\"path\": \"x\", \"size\": \"10\", \"xxh3\": \"00\"}",
                         "{\"path\": \"x\", \"size\": \"10\", \"xxh3\": \"0123456789abcdez\"}",
                         "{\"path\": \"x\", \"size\": \"10x\", \"xxh3\": \"0123456789abcdef\"}",
                         "{\"path\": \"x\", \"size\": \"10\", \"xxh3\": \"0123456789abcdef\"}"};
    for (int i = 0; i < 5; i++) {
        cJSON *o = cJSON_Parse(one[i]);
        ck_assert_ptr_nonnull(o);
        cg_clear_error();
        bool ok = cg_data_id_from_json(o, "state", &back);
        cJSON_Delete(o);
        ck_assert_msg(ok == (i == 4), "%s: %s", one[i], ok ? "read" : cg_last_error());
        if (!ok)
            ck_assert(strstr(cg_last_error(), "state: malformed data identity"));
    }
    ck_assert(back.size == 10 && back.hash == 0x0123456789abcdefull);
    ck_assert_str_eq(back.path, "x");
    /* a FIFO named relative to the working directory: its absolute path,
     * as a file's (round thirty-one: kept as given, eval from another
     * directory would not find it) */
    char cwd[PATH_MAX];
    ck_assert_ptr_nonnull(getcwd(cwd, sizeof cwd));
    ck_assert_int_eq(mkfifo(tmp("id.fifo"), 0600), 0);
    ck_assert_int_eq(chdir(tmpdir), 0);
    cg_data_id_of("id.fifo", "x", 1, &read);
    ck_assert_int_eq(chdir(cwd), 0);
    ck_assert_msg(read.path[0] == '/' && strstr(read.path, "/id.fifo"), "a FIFO's path: %s",
                  read.path);
}
END_TEST

/* Everything about the output is checked before training. */
START_TEST(test_out_check)
{
    ck_assert(cg_out_check(tmp("a.st"), false));
    write_file(tmp("a.st"), "x", 1);
    ck_assert(cg_out_check(tmp("a.st"), false)); /* the overwrite policy is the caller's */
    CG_ASSERT_FAILS((void *)(intptr_t)cg_out_check(tmp("newdir/"), true), "names a directory");
    ck_assert(access(tmp("newdir"), F_OK) != 0); /* and nothing was created */
    CG_ASSERT_FAILS((void *)(intptr_t)cg_out_check(tmp("missing/x.st"), false), "missing");
    ck_assert(cg_out_check(tmp("made/x.st"), true)); /* as out/ by default */
    CG_ASSERT_FAILS((void *)(intptr_t)cg_out_check(tmp("a.st/x.st"), true), "not a directory");
    ck_assert_msg(cg_out_check(tmp("a/b/c.st"), true), "%s", cg_last_error()); /* as mkdir -p */
    ck_assert(access(tmp("a/b"), W_OK) == 0);
    CG_ASSERT_FAILS((void *)(intptr_t)cg_out_check("/dev/null", false), "a character device");
    ck_assert_int_eq(mkfifo(tmp("f.st"), 0600), 0);
    CG_ASSERT_FAILS((void *)(intptr_t)cg_out_check(tmp("f.st"), false), "a FIFO");
    CG_ASSERT_FAILS((void *)(intptr_t)cg_out_check(tmpdir, false), "a directory");
    /* a symlink is followed to a regular file, and refused to anything else */
    ck_assert_int_eq(symlink("a.st", tmp("to_a.st")), 0);
    ck_assert_msg(cg_out_check(tmp("to_a.st"), false), "%s", cg_last_error());
    ck_assert_int_eq(symlink("nothing.st", tmp("dangling.st")), 0);
    CG_ASSERT_FAILS((void *)(intptr_t)cg_out_check(tmp("dangling.st"), false),
                    "is a symbolic link to no regular file");
    ck_assert_int_eq(symlink("made", tmp("to_dir.st")), 0);
    CG_ASSERT_FAILS((void *)(intptr_t)cg_out_check(tmp("to_dir.st"), false),
                    "is a symbolic link to no regular file");
    CG_ASSERT_FAILS((void *)(intptr_t)cg_out_check("", false), "empty");
    char name[300];
    memset(name, 'n', 240);
    name[240] = '\0';
    CG_ASSERT_FAILS((void *)(intptr_t)cg_out_check(tmp(name), false), "temporary suffix");
    name[200] = '\0';
    ck_assert(cg_out_check(tmp(name), false));
    /* the limits exactly: a name of NAME_MAX - CG_OUT_SUFFIX_MAX bytes fits with its
     * temporary suffix, one byte more does not */
    memset(name, 'n', NAME_MAX - CG_OUT_SUFFIX_MAX);
    name[NAME_MAX - CG_OUT_SUFFIX_MAX] = '\0';
    ck_assert_msg(cg_out_check(tmp(name), false), "%s", cg_last_error());
    strcat(name, "n");
    CG_ASSERT_FAILS((void *)(intptr_t)cg_out_check(tmp(name), false), "temporary suffix");
    /* and a path of PATH_MAX - CG_OUT_SUFFIX_MAX - 1 bytes (its temporary's name and
     * NUL fill PATH_MAX), in directories of 100 bytes; one byte more is refused */
    char deep[PATH_MAX + 64];
    size_t len = (size_t)snprintf(deep, sizeof deep, "%s", tmpdir);
    const size_t fit = PATH_MAX - CG_OUT_SUFFIX_MAX - 1;
    while (len + 1 + 100 + 1 + 50 < fit) {
        deep[len++] = '/';
        memset(deep + len, 'd', 100);
        len += 100;
        deep[len] = '\0';
        ck_assert_int_eq(mkdir(deep, 0700), 0);
    }
    deep[len++] = '/';
    memset(deep + len, 'f', fit - len);
    deep[fit] = '\0';
    ck_assert_msg(cg_out_check(deep, false), "%s", cg_last_error());
    strcat(deep, "f");
    CG_ASSERT_FAILS((void *)(intptr_t)cg_out_check(deep, false), "the path is too long");
    for (size_t d = len - 1; d > strlen(tmpdir); d -= 101) { /* the teardown's buffer is shorter */
        deep[d] = '\0';
        ck_assert_int_eq(rmdir(deep), 0);
    }
    /* "." and "..": a directory, whatever is there */
    CG_ASSERT_FAILS((void *)(intptr_t)cg_out_check(tmp("made/.."), false),
                    "names a directory, not a checkpoint file");
    CG_ASSERT_FAILS((void *)(intptr_t)cg_out_check(tmp("."), true),
                    "names a directory, not a checkpoint file");
    /* a picture that exists is replaced only with --force */
    write_file(tmp("p.png"), "x", 1);
    CG_ASSERT_FAILS(
        (void *)(intptr_t)cg_out_picture_check(tmp("p.png"), false, NULL, "--ckpt", false),
        "exists; pass --force to overwrite it");
    ck_assert_msg(cg_out_picture_check(tmp("p.png"), true, NULL, "--ckpt", false), "%s",
                  cg_last_error());
    /* a picture's missing directories: the caller makes them (make_dir) or
     * they are refused; a file in their place is refused either way, and
     * the check itself makes nothing */
    ck_assert_msg(cg_out_picture_check(tmp("m1/m2/p.png"), false, NULL, "--ckpt", true), "%s",
                  cg_last_error());
    ck_assert(access(tmp("m1"), F_OK) != 0);
    CG_ASSERT_FAILS(
        (void *)(intptr_t)cg_out_picture_check(tmp("m1/p.png"), false, NULL, "--ckpt", false),
        "No such file or directory");
    CG_ASSERT_FAILS(
        (void *)(intptr_t)cg_out_picture_check(tmp("p.png/m2/p.png"), false, NULL, "--ckpt", true),
        "/p.png/m2': Not a directory");
    if (geteuid() != 0) { /* root writes anywhere */
        ck_assert_int_eq(mkdir(tmp("ro"), 0500), 0);
        CG_ASSERT_FAILS((void *)(intptr_t)cg_out_check(tmp("ro/x.st"), false), "not writable");
    }
}
END_TEST

/* A file a run reads is none of the four it writes (cg_out_check_reads):
 * the checkpoint (unless it is --resume's, with_ckpt false), its loss
 * curve, its metrics log and its lock, each named in the refusal. */
START_TEST(test_out_check_reads)
{
    const char *const names[] = {"r.st", "r.st.loss.png", "r.st.metrics.jsonl", "r.st.cgrad-lock"};
    const char *const kinds[] = {"the checkpoint", "its loss curve", "its metrics log",
                                 "its lock file"};
    for (int i = 0; i < 4; i++)
        write_file(tmp(names[i]), "12\n", 3);
    write_file(tmp("corpus.txt"), "text\n", 5);
    ck_assert(cg_out_check_reads(tmp("r.st"), tmp("corpus.txt"), "--data", true));
    for (int i = 0; i < 4; i++) {
        char in[512];
        snprintf(in, sizeof in, "%s", tmp(names[i]));
        ck_assert(!cg_out_check_reads(tmp("r.st"), in, "--data", true));
        ck_assert_msg(strstr(cg_last_error(), kinds[i]) && strstr(cg_last_error(), "--data '"),
                      "%s: %s", names[i], cg_last_error());
        bool ok = cg_out_check_reads(tmp("r.st"), in, "--resume", false);
        ck_assert_msg(ok == (i == 0), "%s, without the checkpoint: %d", names[i], ok);
    }
    /* a read that is no regular file is a stream, nothing the run would
     * destroy: the run's metrics log made a FIFO and read as --data is no
     * conflict, nor is a FIFO or a directory the same file as itself */
    char fifo[512];
    snprintf(fifo, sizeof fifo, "%s", tmp("r.st.metrics.jsonl"));
    ck_assert(unlink(fifo) == 0 && mkfifo(fifo, 0600) == 0);
    ck_assert_msg(cg_out_check_reads(tmp("r.st"), fifo, "--data", true), "%s", cg_last_error());
    ck_assert(!cg_same_file(fifo, fifo));
    ck_assert(!cg_same_file(tmpdir, tmpdir));
    ck_assert(unlink(fifo) == 0);
}
END_TEST

/* --keep-last's rules on the files already there (cg_kept_check): a kept
 * checkpoint of this run (kept[]) is fine, another needs --force, one that
 * is a file the run reads or standard output is refused even with --force,
 * and a name this run would not write ("k.step0777.safetensors", fewer than
 * 8 digits; "k.stepX.safetensors") is no kept checkpoint at all. */
START_TEST(test_kept_check)
{
    const char *out = tmp("k.safetensors");
    char *mine = cg_kept_path(out, 250), *other = cg_kept_path(out, 300);
    ck_assert_str_eq(mine, tmp("k.step00000250.safetensors"));
    const int64_t kept[] = {250};
    const char *reads[] = {NULL, mine}, *what[] = {"--data", "--init-from"};
    ck_assert(cg_kept_check(out, kept, 1, false, reads, what, 0)); /* nothing there */
    write_file(mine, "x", 1);
    write_file(tmp("k.step0777.safetensors"), "x", 1); /* not a name of ours */
    write_file(tmp("k.step0000025x.safetensors"), "x", 1);
    ck_assert_msg(cg_kept_check(out, kept, 1, false, reads, what, 0), "%s", cg_last_error());
    CG_ASSERT_FAILS((void *)(intptr_t)cg_kept_check(out, kept, 0, false, reads, what, 0),
                    "an evaluation checkpoint this run did not write");
    ck_assert(cg_kept_check(out, kept, 0, true, reads, what, 0)); /* --force */
    CG_ASSERT_FAILS((void *)(intptr_t)cg_kept_check(out, kept, 1, true, reads, what, 2),
                    "--init-from '");
    write_file(other, "x", 1);
    CG_ASSERT_FAILS((void *)(intptr_t)cg_kept_check(out, kept, 1, false, reads, what, 0),
                    "k.step00000300.safetensors' exists: an evaluation checkpoint");
    /* standard output into a kept checkpoint: lost when --keep-last replaces it */
    fflush(stdout);
    int saved = dup(1), fd = open(other, O_WRONLY | O_APPEND);
    ck_assert(saved >= 0 && fd >= 0 && dup2(fd, 1) == 1);
    bool ok = cg_kept_check(out, kept, 1, true, reads, what, 0);
    ck_assert(dup2(saved, 1) == 1);
    close(fd);
    close(saved);
    ck_assert(!ok);
    ck_assert_msg(strstr(cg_last_error(), "an evaluation checkpoint that --keep-last replaces"),
                  "%s", cg_last_error());
    free(mine);
    free(other);
}
END_TEST

/* A second writer of the same checkpoint is refused; the lock cleans up
 * what a killed writer left behind. */
/* A metrics log replaced by a run (--force, --resume) keeps the old log's
 * mode, as the checkpoint beside it does (a log the user made 0640 became
 * 0644); a new one is 0666 less the umask. */
START_TEST(test_metrics_log_mode)
{
    const char *path = tmp("mode.metrics.jsonl");
    mode_t old_mask = umask(022);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("{\"step\": 1}\n", f);
    fclose(f);
    ck_assert(chmod(path, 0640) == 0);
    for (int resume = 0; resume < 2; resume++) {
        cg_metrics_log log;
        int64_t dropped = 0;
        ck_assert_msg(cg_metrics_log_open(&log, path, resume ? 1 : -1, &dropped), "%s",
                      cg_last_error());
        ck_assert(cg_metrics_log_append(log.f, "{\"step\": 2}", 0));
        ck_assert_msg(cg_metrics_log_publish(&log), "%s", cg_last_error());
        ck_assert(cg_metrics_log_close(&log));
        struct stat st;
        ck_assert(stat(path, &st) == 0);
        ck_assert_msg((st.st_mode & 0777) == 0640, "mode %o (resume %d)", st.st_mode & 0777,
                      resume);
    }
    ck_assert(unlink(path) == 0);
    umask(002);
    cg_metrics_log log;
    int64_t dropped = 0;
    ck_assert(cg_metrics_log_open(&log, path, -1, &dropped) && cg_metrics_log_publish(&log));
    ck_assert(cg_metrics_log_close(&log));
    struct stat st;
    ck_assert(stat(path, &st) == 0 && (st.st_mode & 0777) == 0664);
    umask(old_mask);
    unlink(path);
}
END_TEST

/* A metrics log opens though its first temporary name is taken (a killed
 * process of this pid left it): "cannot write the metrics log: File
 * exists" stopped every later run in a container; the file is left. */
/* A torn last line of a log is dropped on --resume even when what is there
 * parses ('{"step": 2}' written, its '\n' not), and a line the disk took
 * in part is cut off (RLIMIT_FSIZE: the write stops after 5 bytes). */
START_TEST(test_metrics_log_torn)
{
    const char log[] = "{\"step\": 1}\n{\"step\": 2}";
    size_t n = 0;
    int64_t dropped = 0;
    char *kept = cg_metrics_log_keep(log, strlen(log), 5, &n, &dropped);
    ck_assert_ptr_nonnull(kept);
    ck_assert_str_eq(kept, "{\"step\": 1}\n");
    ck_assert_int_eq(dropped, 1);
    free(kept);
    const char *path = tmp("torn.metrics.jsonl");
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    ck_assert(cg_metrics_log_append(f, "{\"step\": 1}", 0));
    cg_test_fsize_limit(12 + 5);
    bool ok = cg_metrics_log_append(f, "{\"step\": 2, \"loss\": 1.5}", 0);
    cg_test_fsize_restore();
    ck_assert(!ok);
    ck_assert_msg(!strstr(cg_last_error(), "torn"), "%s", cg_last_error());
    fclose(f);
    struct stat st;
    ck_assert(stat(path, &st) == 0);
    ck_assert_int_eq(st.st_size, 12); /* the first line alone */
    unlink(path);
}
END_TEST

/* A resumed run whose metrics log cannot be written (the kept lines'
 * write fails: RLIMIT_FSIZE of 10 bytes, SIGXFSZ ignored) fails in one
 * line and leaves no temporary behind; the old log is as it was. */
START_TEST(test_metrics_log_open_fails)
{
    const char *path = tmp("full.metrics.jsonl");
    const char old_log[] = "{\"step\": 1, \"loss\": 2.5}\n{\"step\": 2, \"loss\": 2.25}\n";
    write_file(path, old_log, strlen(old_log));
    cg_metrics_log log;
    int64_t dropped = 0;
    cg_test_fsize_limit(10);
    bool ok = cg_metrics_log_open(&log, path, 2, &dropped);
    cg_test_fsize_restore();
    ck_assert(!ok);
    ck_assert_ptr_null(log.f);
    ck_assert_msg(strstr(cg_last_error(), "cannot write the metrics log") &&
                      strstr(cg_last_error(), strerror(EFBIG)),
                  "%s", cg_last_error());
    char temp[64];
    snprintf(temp, sizeof temp, "full.metrics.jsonl.tmp.%ld", (long)getpid());
    ck_assert_msg(access(tmp(temp), F_OK) != 0, "'%s' was left", temp);
    struct stat st;
    ck_assert(stat(path, &st) == 0);
    ck_assert_int_eq(st.st_size, (off_t)strlen(old_log));
    unlink(path);
}
END_TEST

START_TEST(test_metrics_log_taken_temp)
{
    const char *path = tmp("taken.metrics.jsonl");
    char taken[64];
    snprintf(taken, sizeof taken, "taken.metrics.jsonl.tmp.%ld", (long)getpid());
    write_file(tmp(taken), "old", 3);
    cg_metrics_log log;
    int64_t dropped = 0;
    ck_assert_msg(cg_metrics_log_open(&log, path, -1, &dropped), "%s", cg_last_error());
    ck_assert(cg_metrics_log_append(log.f, "{\"step\": 1}", 0));
    ck_assert(cg_metrics_log_publish(&log) && cg_metrics_log_close(&log));
    FILE *f = fopen(path, "r");
    char line[64] = "";
    ck_assert_ptr_nonnull(f);
    ck_assert_ptr_nonnull(fgets(line, sizeof line, f));
    fclose(f);
    ck_assert_str_eq(line, "{\"step\": 1}\n");
    ck_assert(access(tmp(taken), F_OK) == 0); /* not this log's: left */
    unlink(tmp(taken));
    unlink(path);
}
END_TEST

/* A temporary named by a live process of another user (kill gives EPERM,
 * not ESRCH) is not a dead writer's: kept. Run as a user other than pid 1's
 * (as root: a child that becomes nobody, in a directory of its own). */
START_TEST(test_out_lock_other_users_temp)
{
    char dir[PATH_MAX];
    cg_test_mkdtemp(dir, sizeof dir, "cg_guards_user.");
    ck_assert_int_eq(chmod(dir, 0777), 0); /* the child writes it as nobody */
    pid_t c = fork();
    ck_assert_int_ge(c, 0);
    if (c == 0) { /* in the directory first: its parents need not be nobody's to cross */
        if (chdir(dir) != 0 || (geteuid() == 0 && setuid(65534) != 0))
            _exit(2);
        FILE *fp = fopen("m.safetensors.tmp.1", "wb");
        if (!fp || fclose(fp) != 0)
            _exit(4);
        cg_out_lock lock;
        bool took = cg_out_lock_take("m.safetensors", &lock);
        int rc = !took ? 5 : access("m.safetensors.tmp.1", F_OK) == 0 ? 0 : 1;
        cg_out_lock_release(&lock);
        unlink("m.safetensors.tmp.1");
        _exit(rc);
    }
    int st = 0;
    ck_assert_int_eq(waitpid(c, &st, 0), c);
    rmdir(dir);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
                  "child: %d (1: another user's temporary removed)", WEXITSTATUS(st));
}
END_TEST

START_TEST(test_out_lock)
{
    write_file(tmp("m.safetensors.tmp.99999999"), "partial", 7);
    write_file(tmp("m.loss.png.tmp.99999998.1"), "partial", 7);
    write_file(tmp("m.metrics.jsonl.tmp.99999997"), "partial", 7);
    write_file(tmp("other.safetensors.tmp.1"), "keep", 4);
    /* a dead writer's temporary of another checkpoint, its name as long as
     * m.safetensors: that checkpoint's lock holder removes it, not this one */
    write_file(tmp("n.safetensors.tmp.99999990"), "partial", 7);
    write_file(tmp("m.safetensors.tmp.notes"), "a user's", 8); /* not a writer's: kept */
    /* nor these: a writer's pid has no leading zero or sign, its count only digits */
    static const char *const odd[] = {"m.safetensors.tmp.099999996", "m.safetensors.tmp.-99999995",
                                      "m.safetensors.tmp.99999994.2x",
                                      "m.safetensors.tmp.99999993."};
    for (int i = 0; i < 4; i++)
        write_file(tmp(odd[i]), "a user's", 8);
    /* what a killed process of this pid left (a container's program has the
     * same pid at every start): nothing of this run's yet, removed too */
    char own[3][64];
    snprintf(own[0], sizeof own[0], "m.metrics.jsonl.tmp.%ld", (long)getpid());
    snprintf(own[1], sizeof own[1], "m.safetensors.tmp.%ld.2", (long)getpid());
    snprintf(own[2], sizeof own[2], "other.safetensors.tmp.%ld", (long)getpid());
    for (int i = 0; i < 3; i++)
        write_file(tmp(own[i]), "partial", 7);
    cg_out_lock a, b;
    ck_assert(cg_out_lock_take(tmp("m.safetensors"), &a));
    ck_assert(access(tmp(own[0]), F_OK) != 0);
    ck_assert(access(tmp(own[1]), F_OK) != 0);
    ck_assert(access(tmp(own[2]), F_OK) == 0); /* another checkpoint's */
    unlink(tmp(own[2]));
    ck_assert(access(tmp("m.safetensors.tmp.99999999"), F_OK) != 0);
    ck_assert(access(tmp("m.loss.png.tmp.99999998.1"), F_OK) != 0);
    ck_assert(access(tmp("m.metrics.jsonl.tmp.99999997"), F_OK) != 0);
    ck_assert(access(tmp("other.safetensors.tmp.1"), F_OK) == 0);
    ck_assert(access(tmp("n.safetensors.tmp.99999990"), F_OK) == 0);
    unlink(tmp("n.safetensors.tmp.99999990"));
    ck_assert(access(tmp("m.safetensors.tmp.notes"), F_OK) == 0);
    for (int i = 0; i < 4; i++) {
        ck_assert_msg(access(tmp(odd[i]), F_OK) == 0, "%s removed", odd[i]);
        unlink(tmp(odd[i]));
    }
    CG_ASSERT_FAILS((void *)(intptr_t)cg_out_lock_take(tmp("m.safetensors"), &b),
                    "is being written by another run (pid ");
    ck_assert_int_eq(b.fd, -1);
    /* "m" writes the same m.loss.png, m.metrics.jsonl: the same lock */
    CG_ASSERT_FAILS((void *)(intptr_t)cg_out_lock_take(tmp("m"), &b),
                    "is being written by another run (pid ");
    ck_assert_str_eq(a.path, tmp("m.cgrad-lock"));
    ck_assert(cg_out_lock_take(tmp("n.safetensors"), &b)); /* another checkpoint: fine */
    cg_out_lock_release(&b);
    cg_out_lock_release(&a);
    ck_assert(cg_out_lock_take(tmp("m.safetensors"), &b)); /* released: free again */
    cg_out_lock_release(&b);
    cg_out_lock_release(&b); /* twice is harmless */
    /* a file at a lock's name holding more than a process id is not ours:
     * refused, and left as it was */
    const char *const notes[] = {"123 my notes\n", "123\n456\n", "123"};
    for (int i = 0; i < 3; i++) {
        write_file(tmp("u.cgrad-lock"), notes[i], strlen(notes[i]));
        CG_ASSERT_FAILS((void *)(intptr_t)cg_out_lock_take(tmp("u.safetensors"), &b),
                        "is not a lock file of these programs");
        char back[32] = "";
        FILE *f = fopen(tmp("u.cgrad-lock"), "rb");
        ck_assert_ptr_nonnull(f);
        ck_assert_uint_eq(fread(back, 1, sizeof back - 1, f), strlen(notes[i]));
        fclose(f);
        ck_assert_str_eq(back, notes[i]);
    }
    /* a lock that is a symbolic link is never followed, even to a file that
     * would pass for a lock (empty): the file there keeps its bytes */
    write_file(tmp("empty.txt"), "", 0);
    ck_assert_int_eq(symlink("empty.txt", tmp("s.cgrad-lock")), 0);
    CG_ASSERT_FAILS((void *)(intptr_t)cg_out_lock_take(tmp("s.safetensors"), &b),
                    "is a symbolic link (a lock is never followed)");
    struct stat st;
    ck_assert(stat(tmp("empty.txt"), &st) == 0 && st.st_size == 0);
    /* a lock left by a dead run with a longer process id holds this run's
     * pid alone once taken (not "<pid>\n" over the old digits' tail, which
     * the next run would refuse as no lock of ours) */
    write_file(tmp("p.cgrad-lock"), "1234567890123\n", 14);
    ck_assert_msg(cg_out_lock_take(tmp("p.safetensors"), &b), "%s", cg_last_error());
    char want[32], held[32] = "";
    snprintf(want, sizeof want, "%ld\n", (long)getpid());
    ck_assert(pread(b.fd, held, sizeof held - 1, 0) >= 0);
    ck_assert_str_eq(held, want);
    cg_out_lock_release(&b);
    ck_assert_msg(cg_out_lock_take(tmp("p.safetensors"), &b), "%s", cg_last_error());
    cg_out_lock_release(&b);
}
END_TEST

/* A run's lock file goes when the run releases it, while it holds it:
 * only the file still at its name (not one moved away, nor a file made at
 * the name since). A run that opened the file before it went finds that
 * once it has the flock and makes another, so two processes taking and
 * releasing one lock as fast as they can are never inside it together. */
enum { LOCK_ROUNDS = 20000 };
static void lock_rounds(const char *ckpt, atomic_int *inside, atomic_int *overlaps,
                        atomic_int *taken)
{
    for (int i = 0; i < LOCK_ROUNDS; i++) {
        cg_out_lock l;
        if (!cg_out_lock_take(ckpt, &l))
            continue; /* held by the other: refused, as a second run is */
        atomic_fetch_add(taken, 1);
        if (atomic_fetch_add(inside, 1) != 0)
            atomic_fetch_add(overlaps, 1);
        for (volatile int spin = 0; spin < 200; spin++) {
        }
        atomic_fetch_sub(inside, 1);
        cg_out_lock_release(&l);
    }
}
START_TEST(test_out_lock_removed)
{
    char ckpt[4096], lock[4096], away[4096];
    snprintf(ckpt, sizeof ckpt, "%s", tmp("r.safetensors"));
    snprintf(lock, sizeof lock, "%s", tmp("r.cgrad-lock"));
    snprintf(away, sizeof away, "%s", tmp("r.lock.away"));
    cg_out_lock a, b;
    ck_assert(cg_out_lock_take(ckpt, &a));
    ck_assert(access(lock, F_OK) == 0);
    cg_out_lock_release(&a);
    ck_assert_msg(access(lock, F_OK) != 0, "the lock file stayed after its release");
    /* moved away under the run, and another file made at its name: both stay */
    ck_assert(cg_out_lock_take(ckpt, &a));
    ck_assert_int_eq(rename(lock, away), 0);
    write_file(lock, "", 0);
    cg_out_lock_release(&a);
    ck_assert(access(lock, F_OK) == 0 && access(away, F_OK) == 0);
    unlink(away);
    /* the file held by a run that opened it before its holder released it
     * (and then got its flock) is no lock: the next run makes its own */
    ck_assert(cg_out_lock_take(ckpt, &a));
    int late = open(lock, O_RDWR | O_CLOEXEC);
    ck_assert_int_ge(late, 0);
    cg_out_lock_release(&a);
    ck_assert_int_eq(flock(late, LOCK_EX | LOCK_NB), 0);
    ck_assert_msg(cg_out_lock_take(ckpt, &b), "%s", cg_last_error());
    CG_ASSERT_FAILS((void *)(intptr_t)cg_out_lock_take(ckpt, &a),
                    "is being written by another run (pid ");
    cg_out_lock_release(&b);
    close(late);
    /* two processes at once */
    atomic_int *shared = mmap(NULL, 3 * sizeof(atomic_int), PROT_READ | PROT_WRITE,
                              MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert(shared != MAP_FAILED);
    atomic_init(&shared[0], 0);
    atomic_init(&shared[1], 0);
    atomic_init(&shared[2], 0);
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        lock_rounds(ckpt, &shared[0], &shared[1], &shared[2]);
        _exit(0);
    }
    lock_rounds(ckpt, &shared[0], &shared[1], &shared[2]);
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    ck_assert_msg(atomic_load(&shared[1]) == 0, "%d of %d takes overlapped another",
                  atomic_load(&shared[1]), atomic_load(&shared[2]));
    ck_assert_int_gt(atomic_load(&shared[2]), 0);
    ck_assert(access(lock, F_OK) != 0);
    munmap(shared, 3 * sizeof(atomic_int));
}
END_TEST

/* A run's lock moved or removed under it (`mv runs/a runs/b` of its
 * directory, which the next save makes again) kept no second run out of
 * the new directory: both then wrote the same checkpoint. Before each save
 * the lock is checked at its name and taken again; when another run took
 * it meanwhile, the save is refused. */
START_TEST(test_out_lock_moved)
{
    char dir[4096], moved[4096], ckpt[4096];
    snprintf(dir, sizeof dir, "%s", tmp("run"));
    snprintf(moved, sizeof moved, "%s", tmp("run_moved"));
    snprintf(ckpt, sizeof ckpt, "%s", tmp("run/m.safetensors"));
    ck_assert_int_eq(mkdir(dir, 0777), 0);
    cg_out_lock a, b;
    ck_assert(cg_out_lock_take(ckpt, &a));
    ck_assert_int_eq(cg_out_lock_keep(ckpt, &a), 1); /* still in place */
    ck_assert_int_eq(rename(dir, moved), 0);         /* the directory moved */
    ck_assert_int_eq(cg_out_lock_keep(ckpt, &a), 2); /* made again, taken again */
    ck_assert(access(a.path, F_OK) == 0);
    CG_ASSERT_FAILS((void *)(intptr_t)cg_out_lock_take(ckpt, &b),
                    "is being written by another run (pid ");
    ck_assert_int_eq(cg_out_lock_keep(ckpt, &a), 1);
    /* removed, and another run took the name first */
    ck_assert_int_eq(unlink(a.path), 0);
    ck_assert(cg_out_lock_take(ckpt, &b));
    CG_ASSERT_FAILS((void *)(intptr_t)cg_out_lock_keep(ckpt, &a),
                    "was moved or removed during the run and cannot be taken again");
    cg_out_lock_release(&b);
    cg_out_lock_release(&a);
    cg_out_lock none = {.fd = -1};
    ck_assert_int_eq(cg_out_lock_keep(ckpt, &none), 1); /* nothing held: nothing to keep */
}
END_TEST

/* Under a locale with a decimal comma (a host program's setlocale(LC_ALL,
 * "") in Germany) the zoo's JSON lines printed "1,5000" (not JSON), a
 * config with dropout "0,1", the trainer's state and loss history wrote
 * "0,10000000000000001", which a program in the "C" locale refused, and
 * "--lr 0.001" or CG_DIST_TIMEOUT=2.5 were "not a number": numbers are
 * written and read with a decimal point whatever the locale. */
START_TEST(test_numbers_any_locale)
{
    if (!cg_test_comma_locale())
        return;
    ck_assert_str_eq(CG_JSON_NUM("%.4f", 1.5), "1.5000");
    double f = 0;
    ck_assert_msg(cg_parse_f64("--lr", "0.001", 0, 1, &f) && f == 0.001, "%s", cg_last_error());
    CG_ASSERT_FAILS((void *)(intptr_t)cg_parse_f64("--lr", "0,001", 0, 1, &f),
                    "--lr: '0,001' is not a number");
    setenv("CG_DIST_TIMEOUT", "2.5", 1);
    f = 0;
    ck_assert_msg(cg_env_number("CG_DIST_TIMEOUT", &f) && f == 2.5, "%s", cg_last_error());
    unsetenv("CG_DIST_TIMEOUT");
    /* a model's config: JSON that parses, read back */
    cg_charlm_config c = cg_charlm_config_default(), back;
    c.dropout = 0.1f;
    char *json = cg_charlm_config_to_json(&c);
    ck_assert_ptr_nonnull(json);
    cJSON *o = cJSON_Parse(json);
    ck_assert_msg(o != NULL, "not JSON: %s", json);
    cJSON_Delete(o);
    ck_assert_msg(cg_charlm_config_from_json(json, &back) && back.dropout == 0.1f, "%s", json);
    free(json);
    /* the trainer's state fields and the loss history: written under the
     * comma locale, read under it and under "C" */
    double lr = 0.1, lr_back = 0;
    cg_json_field w[] = {{"lr", CG_JF_F64, &lr, 0, 10, true}};
    cg_json_field r[] = {{"lr", CG_JF_F64, &lr_back, 0, 10, true}};
    o = cJSON_CreateObject();
    ck_assert(cg_json_write_fields(o, w, 1));
    ck_assert_str_eq(cJSON_GetObjectItem(o, "lr")->valuestring, "0.10000000000000001");
    cg_history h = {0};
    for (int64_t s = 1; s <= 3; s++)
        ck_assert(cg_history_train_step(&h, s, 1.25 + 0.1 * (double)s));
    char *hj = cg_history_to_json(&h);
    ck_assert_ptr_nonnull(hj);
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1)
            cg_test_c_locale();
        lr_back = 0;
        ck_assert_msg(cg_json_read_fields(o, "state", r, 1) && lr_back == 0.1, "%s",
                      cg_last_error());
        cg_history g = {0};
        ck_assert_msg(cg_history_from_json(hj, &g) && g.acc_loss == h.acc_loss, "%s", hj);
        cg_history_free(&g);
    }
    cJSON_Delete(o);
    free(hj);
    cg_history_free(&h);
}
END_TEST

/* JSON lines: NaN and Inf print as null, strings are escaped. */
/* The JSON a checkpoint's metadata holds (config, vocabulary, training
 * state, loss history, "init_from") is read whole: bytes after its value
 * are damage, not ignored (cJSON_Parse stops at the end of the first value,
 * so "{...}x" loaded as if whole; nn/lora.c's adapter_config was found so
 * by fuzz_lora, round twenty-seven). */
START_TEST(test_metadata_json_whole)
{
    static const char *const tails[] = {"x", " }", "{}", "\n1", " \"a\""};
    cg_history h = {0};
    ck_assert(cg_history_push(&h, 10, 2.5, 2.75));
    char *hist = cg_history_to_json(&h);
    cg_history_free(&h);
    ck_assert_ptr_nonnull(hist);
    char ok_origin[256];
    snprintf(ok_origin, sizeof ok_origin,
             "{\"path\": \"/b.st\", \"size\": \"12\", \"xxh3\": \"%016x\", \"step\": 3}", 7);
    for (int t = -1; t < (int)(sizeof tails / sizeof *tails); t++) {
        const char *tail = t < 0 ? " \n" : tails[t]; /* whitespace after a value is fine */
        bool want = t < 0;
        char buf[512];
        snprintf(buf, sizeof buf, "{\"steps\": 4}%s", tail);
        cJSON *o = cg_json_parse_object(buf, "charlm config");
        ck_assert_msg((o != NULL) == want, "config %s", buf);
        cJSON_Delete(o);
        o = cg_train_state_parse(buf);
        ck_assert_msg((o != NULL) == want, "state %s", buf);
        cJSON_Delete(o);
        cg_precision pr = CG_PRECISION_BF16;
        ck_assert_msg(cg_train_precision(buf, "c.st", &pr) == want, "precision %s", buf);
        if (!want)
            ck_assert_ptr_nonnull(strstr(cg_last_error(), "its training state is damaged"));
        snprintf(buf, sizeof buf, "\"abc\"%s", tail);
        cg_vocab *v = cg_vocab_from_json(buf);
        ck_assert_msg((v != NULL) == want, "vocab %s", buf);
        cg_vocab_free(v);
        snprintf(buf, sizeof buf, "%s%s", hist, tail);
        cg_history back = {0};
        ck_assert_msg(cg_history_from_json(buf, &back) == want, "history %s", buf);
        cg_history_free(&back);
        /* "init_from", read from the file */
        snprintf(buf, sizeof buf, "%s%s", ok_origin, tail);
        cg_st_writer *w = cg_st_writer_new();
        const float x = 1.0f;
        const int64_t one = 1;
        ck_assert(cg_st_add_f32_raw(w, "w", 1, &one, &x) &&
                  cg_st_set_metadata(w, "init_from", buf));
        const char *path = cg_test_path("origin.st");
        ck_assert(cg_st_writer_save(w, path));
        cg_st_writer_free(w);
        cg_st_file *f = cg_st_open(path);
        ck_assert_ptr_nonnull(f);
        cg_ft_origin org;
        bool present = false;
        ck_assert_msg(cg_ft_origin_read(f, path, &org, &present) == want, "init_from %s: %s", buf,
                      cg_last_error());
        ck_assert(present);
        if (want)
            ck_assert(org.step == 3);
        else
            ck_assert_ptr_nonnull(strstr(cg_last_error(), "\"init_from\": malformed"));
        cg_st_close(f);
    }
    free(hist);
}
END_TEST

START_TEST(test_json_values)
{
    ck_assert_str_eq(CG_JSON_NUM("%.4f", 1.5), "1.5000");
    ck_assert_str_eq(CG_JSON_NUM("%.4f", NAN), "null");
    ck_assert_str_eq(CG_JSON_NUM("%.1f", -INFINITY), "null");
    ck_assert_str_eq(CG_JSON_STR("a\"b\\c\n"), "\"a\\\"b\\\\c\\u000a\"");
    ck_assert_str_eq(CG_JSON_STR("a\x7f"
                                 "b"),
                     "\"a\\u007fb\""); /* DEL escaped too */
    char line[256];
    snprintf(line, sizeof line, "{\"loss\": %s, \"val\": %s, \"path\": %s}",
             CG_JSON_NUM("%.4f", NAN), CG_JSON_NUM("%.2f", 2.0), CG_JSON_STR("d\"ir/x"));
    cJSON *o = cJSON_Parse(line);
    ck_assert_msg(o != NULL, "%s", line);
    ck_assert(cJSON_IsNull(cJSON_GetObjectItem(o, "loss")));
    ck_assert_str_eq(cJSON_GetObjectItem(o, "path")->valuestring, "d\"ir/x");
    cJSON_Delete(o);
    /* truncation keeps a valid literal and whole UTF-8 characters */
    char small[8];
    cg_json_quote(small, sizeof small, "ab\u00e4\u00e4\u00e4");
    o = cJSON_Parse(small);
    ck_assert_msg(o && cJSON_IsString(o), "%s", small);
    cJSON_Delete(o);
}
END_TEST

/* Names are bytes (config_json.h): one that is not UTF-8 is put as shown
 * (U+FFFD for each bad byte) and as "key_hex", and read back byte for byte;
 * a "key_hex" of odd length, with a byte that is not hex or holding a NUL
 * is no name. */
START_TEST(test_json_names)
{
    cJSON *o = cJSON_CreateObject();
    ck_assert(cg_json_add_name(o, "out", "a\xff/b.st"));
    ck_assert_str_eq(cJSON_GetObjectItem(o, "out")->valuestring, "a\xef\xbf\xbd/b.st");
    ck_assert_str_eq(cJSON_GetObjectItem(o, "out_hex")->valuestring, "61ff2f622e7374");
    char *back = cg_json_get_name(o, "out");
    ck_assert_str_eq(back, "a\xff/b.st");
    free(back);
    cJSON_Delete(o);
    const char *bad[] = {"{\"out\": \"x\", \"out_hex\": \"616\"}",
                         "{\"out\": \"x\", \"out_hex\": \"616g\"}",
                         "{\"out\": \"x\", \"out_hex\": \"610062\"}"};
    for (int i = 0; i < 3; i++) {
        o = cg_json_parse(bad[i]);
        back = cg_json_get_name(o, "out");
        ck_assert_msg(back == NULL, "%s: read as '%s'", bad[i], back);
        ck_assert(!cg_json_name_decode(o, "out", "st"));
        ck_assert_str_eq(cg_last_error(), "st: \"out_hex\" is not the hex digits of a name");
        cJSON_Delete(o);
    }
}
END_TEST

/* cg_config_same_arch compares every field of the table but the floats
 * (config_json.h): a dropout that differs is the same architecture, a
 * width that differs in the table's last row is not. */
START_TEST(test_config_same_arch)
{
    struct {
        float drop;
        int64_t d;
    } a = {0.1f, 8}, b = {0.3f, 8};
    typedef __typeof__(a) conf;
    const cg_config_field cf[] = {CG_CF_PROBABILITY(conf, drop), CG_CF_INT(conf, d, 2, 100)};
    ck_assert_msg(cg_config_same_arch(cf, 2, &a, &b), "%s", cg_last_error());
    b.d = 16;
    CG_ASSERT_FAILS((void *)(intptr_t)cg_config_same_arch(cf, 2, &a, &b),
                    "d is 8 in one and 16 in the other");
}
END_TEST

/* The strict parsers (core/parse.h): a leading space, an overflow, a sign
 * on an unsigned value and hexadecimal are refused, a bound itself is in, a
 * switch is true/false, 1/0, yes/no or on/off in any case. The environment:
 * a variable set empty is not given (the value kept, as unset), a switch and
 * a number are read each by its own function, the table's bounds hold, and
 * cg_env_check refuses a malformed variable. */
START_TEST(test_parse_edges)
{
    int64_t i = 7;
    uint64_t u = 7;
    double f = 7;
    bool b = false;
    CG_ASSERT_FAILS((void *)(intptr_t)cg_parse_i64("--n", " 5", 0, 10, &i),
                    "--n: expected an integer, got ' 5'");
    CG_ASSERT_FAILS(
        (void *)(intptr_t)cg_parse_i64("--n", "99999999999999999999", INT64_MIN, INT64_MAX, &i),
        "--n: 99999999999999999999 is out of range");
    ck_assert(i == 7);
    CG_ASSERT_FAILS((void *)(intptr_t)cg_parse_u64("--seed", "-1", &u),
                    "--seed: expected a non-negative integer, got '-1'");
    CG_ASSERT_FAILS((void *)(intptr_t)cg_parse_u64("--seed", "18446744073709551616", &u),
                    "--seed: 18446744073709551616 is too large");
    ck_assert(u == 7);
    ck_assert(cg_parse_u64("--seed", "18446744073709551615", &u) && u == UINT64_MAX);
    CG_ASSERT_FAILS((void *)(intptr_t)cg_parse_f64("--lr", "0x10", 0, 100, &f),
                    "--lr: '0x10' is not a decimal number");
    ck_assert(cg_parse_f64("--lr", "2.5", 0, 2.5, &f) && f == 2.5);
    const char *yes[] = {"true", "1", "YES", "On"}, *no[] = {"False", "0", "no", "OFF"};
    for (int k = 0; k < 4; k++) {
        ck_assert_msg(cg_parse_bool("--x", yes[k], &b) && b, "%s", yes[k]);
        ck_assert_msg(cg_parse_bool("--x", no[k], &b) && !b, "%s", no[k]);
    }
    /* the environment (each variable restored as the run had it) */
    const char *names[] = {"CG_DIST_TIMEOUT", "CG_DIST_VERBOSE", "CG_MAX_INPUT_MB",
                           "CG_DIST_BUCKET_MB"};
    char *saved[4];
    for (int k = 0; k < 4; k++) {
        saved[k] = getenv(names[k]) ? strdup(getenv(names[k])) : NULL;
        unsetenv(names[k]);
    }
    f = 3;
    b = true;
    ck_assert(cg_env_number("CG_DIST_TIMEOUT", &f) && f == 3); /* not set: kept */
    ck_assert(cg_env_flag("CG_DIST_VERBOSE", &b) && b);
    setenv("CG_DIST_TIMEOUT", "", 1);
    setenv("CG_DIST_VERBOSE", "", 1);
    ck_assert_msg(cg_env_number("CG_DIST_TIMEOUT", &f) && f == 3, "%s", cg_last_error());
    ck_assert_msg(cg_env_flag("CG_DIST_VERBOSE", &b) && b, "%s", cg_last_error());
    setenv("CG_DIST_VERBOSE", "off", 1);
    ck_assert(cg_env_flag("CG_DIST_VERBOSE", &b) && !b);
    CG_ASSERT_FAILS((void *)(intptr_t)cg_env_number("CG_DIST_VERBOSE", &f),
                    "cg_env_number: 'CG_DIST_VERBOSE' is not a numeric variable cgrad reads");
    CG_ASSERT_FAILS((void *)(intptr_t)cg_env_flag("CG_DIST_TIMEOUT", &b),
                    "cg_env_flag: 'CG_DIST_TIMEOUT' is not a switch cgrad reads");
    setenv("CG_MAX_INPUT_MB", "0", 1);
    CG_ASSERT_FAILS((void *)(intptr_t)cg_env_number("CG_MAX_INPUT_MB", &f),
                    "environment variable CG_MAX_INPUT_MB: 0 is out of range");
    unsetenv("CG_MAX_INPUT_MB");
    ck_assert_msg(cg_env_check(), "%s", cg_last_error());
    setenv("CG_DIST_BUCKET_MB", "0", 1);
    CG_ASSERT_FAILS((void *)(intptr_t)cg_env_check(),
                    "environment variable CG_DIST_BUCKET_MB: 0 is out of range");
    for (int k = 0; k < 4; k++) {
        if (saved[k])
            setenv(names[k], saved[k], 1);
        else
            unsetenv(names[k]);
        free(saved[k]);
    }
}
END_TEST

static void *no_memory(size_t n)
{
    (void)n;
    return NULL;
}

/* The one JSON line writer (cJSON objects, printed as {"a": 1, "b": "x"}):
 * numbers keep their format, non-finite ones are null, names keep their
 * bytes, and a model config is read back as it was written. */
START_TEST(test_json_line_writer)
{
    cJSON *o = cJSON_CreateObject();
    ck_assert(cg_json_put_int(o, "step", 9007199254740993LL));
    ck_assert(cg_json_put_num(o, "loss", "%.4f", 2.5));
    ck_assert(cg_json_put_num(o, "val", "%.1f", NAN));
    ck_assert(cg_json_put_bool(o, "done", true));
    ck_assert(cg_json_put_str(o, "path", "d\"ir/x.st"));
    char *line = cg_json_line(o);
    ck_assert_str_eq(line, "{\"step\": 9007199254740993, \"loss\": 2.5000, \"val\": null, "
                           "\"done\": true, \"path\": \"d\\\"ir/x.st\"}");
    cJSON *back = cJSON_Parse(line);
    ck_assert_msg(back && cJSON_IsNull(cJSON_GetObjectItem(back, "val")), "%s", line);
    cJSON_Delete(back);
    free(line);
    /* a name's byte that is not UTF-8: Python's surrogateescape */
    cJSON_DeleteItemFromObject(o, "path");
    ck_assert(cg_json_put_str(o, "path", "\xff.st"));
    line = cg_json_line(o);
    ck_assert_msg(strstr(line, "\"path\": \"\\udcff.st\"}"), "%s", line);
    free(line);
    cJSON_Delete(o);
    cg_clear_error();
    ck_assert_ptr_null(cg_json_line(NULL)); /* an object that could not be made */
    ck_assert(cg_has_error());
    /* a put that fails (cJSON out of memory) marks its object, and the
     * line is refused rather than printed without the field; nested too */
    o = cJSON_CreateObject();
    cJSON *inner = cJSON_AddObjectToObject(o, "inner");
    ck_assert(cg_json_put_num(o, "step", "%.0f", 3) && inner);
    cJSON_InitHooks(&(cJSON_Hooks){.malloc_fn = no_memory, .free_fn = free});
    bool put = cg_json_put_num(inner, "val_loss", "%.4f", 1.5);
    cJSON_InitHooks(NULL);
    ck_assert(!put);
    cg_clear_error();
    ck_assert_ptr_null(cg_json_line(o));
    ck_assert_msg(strstr(cg_last_error(), "out of memory"), "%s", cg_last_error());
    cJSON_Delete(o);
    /* a config table: written in order, read back */
    struct {
        int64_t d;
        bool nf;
        float drop;
        cg_norm_kind norm;
        cg_act act;
    } c = {64, false, 0.1f, CG_NORM_RMSNORM, CG_ACT_RELU},
      back2 = {1, true, 0, CG_NORM_LAYERNORM, CG_ACT_GELU};
    typedef __typeof__(c) conf;
    const cg_config_field f[] = {
        CG_CF_INT(conf, d, 2, 100),
        {"norm", CG_CF_NORM, offsetof(conf, norm), NULL, 0, 0, NULL, NULL},
        {"act", CG_CF_ACT, offsetof(conf, act), NULL, 0, 0, NULL, NULL},
        {"norm_first", CG_CF_BOOL, offsetof(conf, nf), NULL, 0, 0, NULL, NULL},
        CG_CF_PROBABILITY(conf, drop)};
    char *cfg = cg_config_write("m", f, 5, &c);
    ck_assert_str_eq(cfg, "{\"model\": \"m\", \"d\": 64, \"norm\": \"rmsnorm\", \"act\": "
                          "\"relu\", \"norm_first\": false, \"drop\": 0.100000001}");
    ck_assert(cg_config_read(cfg, "m config", f, 5, &back2));
    ck_assert(back2.d == 64 && !back2.nf && back2.drop == 0.1f && back2.norm == CG_NORM_RMSNORM &&
              back2.act == CG_ACT_RELU);
    free(cfg);
    ck_assert(!cg_config_read("{\"d\": 1.5}", "m config", f, 5, &back2));
    ck_assert_msg(strstr(cg_last_error(), "m config: \"d\" must be an integer"), "%s",
                  cg_last_error());
    /* issue 35: the table is also the config's check, and with its name and
     * defaults, the whole reader, writer and checker */
    const conf defaults = {8, true, 0, CG_NORM_LAYERNORM, CG_ACT_GELU};
    const cg_config_model m = {"m", f, 5, sizeof(conf), &defaults};
    ck_assert(cg_config_check(&m, &c));
    ck_assert(cg_config_parse(&m, "{\"d\": 10}", &back2));
    ck_assert(back2.d == 10 && back2.nf && back2.act == CG_ACT_GELU && back2.drop == 0);
    const char *bad[][2] = {{"{\"d\": 1}", "m config: d must be >= 2 (got 1)"},
                            {"{\"d\": 101}", "m config: d must be <= 100 (got 101)"},
                            {"{\"drop\": 1.5}", "m config: drop must be in [0, 1] (got 1.5)"},
                            {"{\"act\": \"swish\"}", "unknown activation 'swish' (choices: "}};
    for (int i = 0; i < 4; i++) {
        ck_assert_msg(!cg_config_parse(&m, bad[i][0], &back2), "%s", bad[i][0]);
        ck_assert_msg(strstr(cg_last_error(), bad[i][1]), "%s: %s", bad[i][0], cg_last_error());
    }
    ck_assert(back2.d == 10); /* unchanged by a refused config */
    c.act = CG_N_ACTS;
    ck_assert(!cg_config_to_json(&m, &c));
    ck_assert_msg(strstr(cg_last_error(), "m config: unknown activation 16"), "%s",
                  cg_last_error());
    ck_assert(!cg_config_parse(&m, "{}", NULL));
}
END_TEST

/* The typed readers at their edges: an integer's fraction, a bool given 2,
 * a string given a number, an array for an object, a bound itself (in, not
 * out) in a field table and in a config, a number string with bytes after
 * it, a signed 64-bit string, an optional field absent. */
START_TEST(test_json_readers_edges)
{
    cJSON *o = cg_json_parse("{\"i\": 2.5, \"b\": 2, \"one\": 1, \"s\": 5, \"norm\": \"bogus\"}");
    ck_assert_ptr_nonnull(o);
    int64_t i = 7;
    ck_assert(!cg_json_int(o, "w", "i", &i));
    ck_assert_str_eq(cg_last_error(), "w: \"i\" must be an integer");
    ck_assert_int_eq(i, 7);
    bool b = false;
    ck_assert(!cg_json_bool(o, "w", "b", &b));
    ck_assert_str_eq(cg_last_error(), "w: \"b\" must be true or false");
    ck_assert(cg_json_bool(o, "w", "one", &b) && b);
    bool ok = true;
    ck_assert_ptr_null(cg_json_str(o, "w", "s", &ok));
    ck_assert(!ok);
    ck_assert_str_eq(cg_last_error(), "w: \"s\" must be a string");
    cg_norm_kind nk = CG_NORM_LAYERNORM;
    cg_act ak = CG_ACT_GELU;
    ck_assert(!cg_json_norm_act(o, "w", &nk, &ak));
    cJSON_Delete(o);
    CG_ASSERT_FAILS(cg_json_parse_object("[1, 2]", "w"), "w: not a JSON object");
    /* a field table: each bound is in, a decimal string whole, u64 unsigned */
    int64_t n = 0;
    double x = 0;
    uint64_t u = 0, opt = 42;
    const cg_json_field f[] = {{"n", CG_JF_I64, &n, 1, 10, false},
                               {"x", CG_JF_F64, &x, 0, 1, false},
                               {"u", CG_JF_U64STR, &u, 0, 0, false},
                               {"opt", CG_JF_U64STR, &opt, 0, 0, true}};
    const char *good[] = {"{\"n\": 1, \"x\": \"1\", \"u\": \"18446744073709551615\"}",
                          "{\"n\": 10, \"x\": 0, \"u\": \"0\"}"};
    for (int k = 0; k < 2; k++) {
        o = cg_json_parse(good[k]);
        ck_assert_msg(cg_json_read_fields(o, "w", f, 4), "%s: %s", good[k], cg_last_error());
        cJSON_Delete(o);
    }
    ck_assert(n == 10 && x == 0 && u == 0 && opt == 42);
    const char *bad[][2] = {
        {"{\"n\": 0, \"x\": 0, \"u\": \"0\"}", "w: \"n\" is 0, outside [1, 10]"},
        {"{\"n\": 1, \"x\": \"0.5x\", \"u\": \"0\"}", "w: \"x\" must be a finite number"},
        {"{\"n\": 1, \"x\": 0, \"u\": \"-1\"}",
         "w: \"u\" must be a decimal string of a 64-bit integer"},
        {"{\"n\": 1, \"x\": 0}", "w: \"u\" is missing"}};
    for (int k = 0; k < 4; k++) {
        o = cg_json_parse(bad[k][0]);
        ck_assert_msg(!cg_json_read_fields(o, "w", f, 4), "%s", bad[k][0]);
        ck_assert_msg(strcmp(cg_last_error(), bad[k][1]) == 0, "%s: %s", bad[k][0],
                      cg_last_error());
        cJSON_Delete(o);
    }
    /* a bool field is true or false only (1 is refused), and a number
     * field's empty string is no 0 */
    bool flag = false;
    const cg_json_field g[] = {{"x", CG_JF_F64, &x, 0, 1, true},
                               {"t", CG_JF_BOOL, &flag, 0, 0, false}};
    const char *bad_g[][2] = {{"{\"t\": 1}", "w: \"t\" must be true or false"},
                              {"{\"t\": true, \"x\": \"\"}", "w: \"x\" must be a finite number"}};
    for (int k = 0; k < 2; k++) {
        o = cg_json_parse(bad_g[k][0]);
        ck_assert_msg(!cg_json_read_fields(o, "w", g, 2), "%s", bad_g[k][0]);
        ck_assert_msg(strcmp(cg_last_error(), bad_g[k][1]) == 0, "%s: %s", bad_g[k][0],
                      cg_last_error());
        cJSON_Delete(o);
    }
    ck_assert(!flag && x == 0);
    /* a float is a number, not its string; an array is an array (neither a
     * number nor an object's members) of finite numbers (1e999 parses as
     * inf) */
    o = cg_json_parse("{\"p\": \"0.5\", \"a\": 5, \"o\": {\"k\": 1}, \"inf\": [1, 1e999]}");
    ck_assert_ptr_nonnull(o);
    float p = 0.25f;
    ck_assert(!cg_json_float(o, "w", "p", &p));
    ck_assert_str_eq(cg_last_error(), "w: \"p\" must be a number");
    ck_assert(p == 0.25f);
    double r[4];
    int nr = 0;
    ck_assert(!cg_json_f64_array(o, "w", "a", r, 4, &nr));
    ck_assert_str_eq(cg_last_error(), "w: \"a\" must be an array");
    ck_assert(!cg_json_f64_array(o, "w", "o", r, 4, &nr)); /* an object's members are no array */
    ck_assert_str_eq(cg_last_error(), "w: \"o\" must be an array");
    ck_assert(!cg_json_f64_array(o, "w", "inf", r, 4, &nr));
    ck_assert_str_eq(cg_last_error(), "w: \"inf\" must hold finite numbers");
    cJSON_Delete(o);
    /* a config's bounds are in too: d = 100 (its largest), drop = 1 */
    struct {
        int64_t d;
        float drop;
    } c = {0, 0};
    typedef __typeof__(c) conf;
    const cg_config_field cf[] = {CG_CF_INT(conf, d, 2, 100), CG_CF_PROBABILITY(conf, drop)};
    const conf defaults = {8, 0};
    const cg_config_model m = {"m", cf, 2, sizeof(conf), &defaults};
    ck_assert_msg(cg_config_parse(&m, "{\"d\": 100, \"drop\": 1}", &c), "%s", cg_last_error());
    ck_assert(c.d == 100 && c.drop == 1);
    ck_assert_msg(cg_config_parse(&m, "{\"d\": 2, \"drop\": 0}", &c), "%s", cg_last_error());
}
END_TEST

/* --threads is bounded by the CPUs this process may use. */
START_TEST(test_threads)
{
    int cpus = cg_num_cpus();
    ck_assert_int_ge(cpus, 1);
    ck_assert_int_eq(cg_cli_threads("t", 1000), cpus);
    ck_assert_int_eq(cg_cli_threads("t", 1), 1);
    ck_assert_int_eq(cg_cli_threads("t", 0), 0);
    ck_assert_int_eq(cg_cli_threads("t", cpus), cpus);
}
END_TEST

/* OMP_NUM_THREADS above the CPUs is lowered to them at cg_cli_start, and
 * cg_cli_set_threads without --threads warns of it once, however often it
 * is called (round thirty-one's CS4 warned at every call). */
START_TEST(test_threads_env_warning_once)
{
    /* no exec to a shorter spin here: it would start the suite again */
    setenv("OMP_WAIT_POLICY", "passive", 0);
    cg_set_num_threads(0); /* no --threads from an earlier test (CK_FORK=no) */
    int cpus = cg_num_cpus();
    omp_set_num_threads(cpus + 3);
    cg_cli_start();
    ck_assert_int_eq(omp_get_max_threads(), cpus);
    FILE *err = tmpfile();
    ck_assert_ptr_nonnull(err);
    fflush(stderr);
    int saved = dup(2);
    ck_assert(saved >= 0 && dup2(fileno(err), 2) == 2);
    cg_cli_set_threads("prog", 0);
    cg_cli_set_threads("prog", 0);
    fflush(stderr);
    ck_assert(dup2(saved, 2) == 2);
    close(saved);
    char line[256] = "", want[128];
    snprintf(want, sizeof want, "prog: warning: OMP_NUM_THREADS=%d is more than the %d CPU",
             cpus + 3, cpus);
    rewind(err);
    ck_assert_ptr_nonnull(fgets(line, sizeof line, err));
    ck_assert_msg(strstr(line, want) == line, "%s", line);
    const bool twice = fgets(line, sizeof line, err) != NULL;
    ck_assert_msg(!twice, "a second line: %s", line); /* once */
    fclose(err);
}
END_TEST

/* The loss curve's temporary file of a killed writer is removed by the next
 * write (mkstemp names were left behind for good). */
START_TEST(test_png_stale_temp)
{
    write_file(tmp("r.loss.png.tmp.99999999"), "partial", 7);
    cg_history h = {0};
    for (int i = 1; i <= 30; i++)
        ck_assert(cg_history_train_step(&h, i, 3.0 - 0.01 * i));
    ck_assert(cg_history_push(&h, 30, 2.7, 2.8));
    ck_assert(cg_history_plot(&h, tmp("r.loss.png"), "t"));
    ck_assert(access(tmp("r.loss.png"), F_OK) == 0);
    ck_assert(access(tmp("r.loss.png.tmp.99999999"), F_OK) != 0);
    char self[64];
    snprintf(self, sizeof self, "r.loss.png.tmp.%ld", (long)getpid());
    ck_assert(access(tmp(self), F_OK) != 0);
    cg_history_free(&h);
}
END_TEST

/* cg_prefix_error puts its text (separator included) before the message;
 * the zoo's "WHAT: why" messages are built with it. */
START_TEST(test_prefix_error)
{
    cg_set_error("bad dtype");
    cg_prefix_error("checkpoint '%s': ", "x.st");
    ck_assert_str_eq(cg_last_error(), "checkpoint 'x.st': bad dtype");
    cg_prefix_error("loss %g, ", 1.5);
    ck_assert_str_eq(cg_last_error(), "loss 1.5, checkpoint 'x.st': bad dtype");
    char long_msg[2000];
    memset(long_msg, 'a', sizeof long_msg - 1);
    long_msg[sizeof long_msg - 1] = '\0';
    cg_set_error("%s", long_msg);
    cg_prefix_error("p: ");
    ck_assert(strncmp(cg_last_error(), "p: aaa", 6) == 0); /* truncated, not overrun */
    /* a prefix exactly as long as the slot (1024 bytes) is kept whole: its
     * last byte, before the old message, is in the kept end */
    char pre[1025];
    memset(pre, 'p', 1023);
    pre[1023] = 'Q';
    pre[1024] = '\0';
    cg_set_error("why");
    cg_prefix_error("%s", pre);
    const char *m = cg_last_error();
    ck_assert_msg(strlen(m) > 4 && strcmp(m + strlen(m) - 4, "Qwhy") == 0, "...%s",
                  m + strlen(m) - 10);
    cg_clear_error();
}
END_TEST

/* A NULL argument records its own message only when none is set: the
 * cause (the call that returned the NULL) stays, as error.h says. */
START_TEST(test_null_argument_keeps_the_cause)
{
    cg_clear_error();
    ck_assert(!cg_check_f32("op", "w", NULL));
    ck_assert_str_eq(cg_last_error(), "op: argument 'w' is NULL");
    cg_set_error("the cause");
    ck_assert(!cg_check_f32("op", "w", NULL));
    ck_assert(!cg_error_null_input("op"));
    ck_assert_str_eq(cg_last_error(), "the cause");
    cg_clear_error();
}
END_TEST

/* The one UTF-8 codec (core/utf8.h) that metrics, plots, vocabularies,
 * pairs and safetensors share: strict sequences, byte offsets of bad ones,
 * and the round trip through cg_utf8_put. */
START_TEST(test_utf8_codec)
{
    uint32_t cp = 0;
    ck_assert_int_eq(cg_utf8_seq((const unsigned char *)"A", 1, &cp), 1);
    ck_assert_uint_eq(cp, 'A');
    ck_assert_int_eq(cg_utf8_seq((const unsigned char *)"\xc3\xb6", 2, &cp), 2);
    ck_assert_uint_eq(cp, 0xF6);
    ck_assert_int_eq(cg_utf8_seq((const unsigned char *)"\xf0\x9f\x98\x80", 4, &cp), 4);
    ck_assert_uint_eq(cp, 0x1F600);
    static const char *const bad[] = {"\xc0\xaf",         "\xe0\x80\xaf", "\xed\xa0\x80",
                                      "\xf4\x90\x80\x80", "\x80",         "\xc3"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_int_eq(cg_utf8_seq((const unsigned char *)bad[i], strlen(bad[i]), &cp), 0);
    size_t at = 0;
    ck_assert_int_eq(cg_utf8_count("ab\xc3\xb6"
                                   "c",
                                   5, NULL),
                     4);
    ck_assert_int_eq(cg_utf8_count("ab\xed\xa0\x80", 5, &at), -1);
    ck_assert_uint_eq(at, 2);
    int64_t n = 0;
    uint32_t *cps = cg_utf8_decode("a\r\nb\rc", 6, "t", &n);
    ck_assert_ptr_nonnull(cps);
    ck_assert_int_eq(n, 5); /* "a\nb\nc" */
    ck_assert_uint_eq(cps[1], '\n');
    ck_assert_uint_eq(cps[3], '\n');
    free(cps);
    cps = cg_utf8_decode_exact("a\r\n", 3, "t", &n);
    ck_assert_int_eq(n, 3);
    free(cps);
    ck_assert_ptr_null(cg_utf8_decode("ok\xff", 3, "t", &n));
    ck_assert_str_eq(cg_last_error(), "t is not valid UTF-8 (bad byte 0xff at offset 2)");
    for (uint32_t c = 1; c < 0x110000; c += 97) {
        if (c >= 0xD800 && c <= 0xDFFF)
            continue;
        char b[4];
        int k = cg_utf8_put(c, b);
        uint32_t back = 0;
        ck_assert_int_eq(cg_utf8_seq((const unsigned char *)b, (size_t)k, &back), k);
        ck_assert_uint_eq(back, c);
    }
    /* the edges: each length's first and last code point, in that many
     * bytes and back, and one byte short refused; the overlong forms of a
     * 2-byte and a 3-byte code point, the last surrogate, past U+10FFFF, a
     * lead where a continuation belongs, and a sequence cut short by n
     * while the next byte would complete it */
    static const struct {
        uint32_t c;
        int len;
    } edge[] = {{0x7F, 1},   {0x80, 2},    {0x7FF, 2},    {0x800, 3},
                {0xFFFF, 3}, {0x10000, 4}, {0x10FFFF, 4}, {0xE000, 3}};
    for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++) {
        char b[4];
        ck_assert_int_eq(cg_utf8_put(edge[i].c, b), edge[i].len);
        uint32_t back = 0;
        ck_assert_int_eq(cg_utf8_seq((const unsigned char *)b, (size_t)edge[i].len, &back),
                         edge[i].len);
        ck_assert_uint_eq(back, edge[i].c);
        if (edge[i].len > 1)
            ck_assert_int_eq(cg_utf8_seq((const unsigned char *)b, (size_t)edge[i].len - 1, &back),
                             0);
    }
    static const char *const bad_edge[] = {"\xe0\x9f\xbf", "\xf0\x8f\xbf\xbf", "\xed\xbf\xbf",
                                           "\xf4\x90\x80\x80", "\xc3\xc3"};
    for (size_t i = 0; i < sizeof bad_edge / sizeof bad_edge[0]; i++)
        ck_assert_int_eq(cg_utf8_seq((const unsigned char *)bad_edge[i], strlen(bad_edge[i]), &cp),
                         0);
    ck_assert_int_eq(cg_utf8_count("ab\xc3\xb6", 3, &at), -1);
    ck_assert_uint_eq(at, 2);
}
END_TEST

static Suite *guards_suite(void)
{
    Suite *s = suite_create("guards");
    TCase *t = tcase_create("state");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, test_state_fields);
    tcase_add_test(t, test_position_check);
    tcase_add_test(t, test_ckpt_sibling);
    tcase_add_test(t, test_history_long);
    tcase_add_test(t, test_tiny_temperature);
    tcase_add_test(t, test_json_values);
    tcase_add_test(t, test_json_names);
    tcase_add_test(t, test_parse_edges);
    tcase_add_test(t, test_config_same_arch);
    tcase_add_test(t, test_metadata_json_whole);
    tcase_add_test(t, test_numbers_any_locale);
    tcase_add_test(t, test_json_line_writer);
    tcase_add_test(t, test_json_readers_edges);
    tcase_add_test(t, test_threads);
    tcase_add_test(t, test_threads_env_warning_once);
    tcase_add_test(t, test_prefix_error);
    tcase_add_test(t, test_null_argument_keeps_the_cause);
    tcase_add_test(t, test_utf8_codec);
    suite_add_tcase(s, t);
    TCase *d = tcase_create("data");
    tcase_add_checked_fixture(d, setup, teardown);
    tcase_add_test(d, test_read_once);
    tcase_add_test(d, test_read_once_nul_offset);
    tcase_add_test(d, test_read_line);
    tcase_add_test(d, test_read_lines);
    tcase_add_test(d, test_ensure_parent_dir);
    tcase_add_test(d, test_corpus_read);
    tcase_add_test(d, test_pairs_empty_sides);
    tcase_add_test(d, test_pairs_unknown);
    tcase_add_test(d, test_data_id);
    tcase_add_test(d, test_out_check);
    tcase_add_test(d, test_out_check_reads);
    tcase_add_test(d, test_kept_check);
    tcase_add_test(d, test_out_lock);
    tcase_add_test(d, test_out_lock_other_users_temp);
    tcase_add_test(d, test_out_lock_moved);
    tcase_add_test(d, test_out_lock_removed);
    tcase_add_test(d, test_metrics_log_taken_temp);
    tcase_add_test(d, test_metrics_log_torn);
    tcase_add_test(d, test_metrics_log_open_fails);
    tcase_add_test(d, test_metrics_log_mode);
    tcase_add_test(d, test_png_stale_temp);
    suite_add_tcase(s, d);
    return s;
}

int main(void)
{
    Suite *s[] = {guards_suite()};
    return cg_test_run(s, 1);
}
