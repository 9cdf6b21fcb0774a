/* libFuzzer target: the LoRA adapter loader (nn/lora.h cg_lora_read, and
 * the zoo's adapter checkpoints on top of it: models/train/finetune.h
 * cg_ft_read_adapters, then the adapters' optimizer state, as `charlm
 * sample/eval/train --resume` read a checkpoint made by `train --lora-rank`).
 *
 * The input is a safetensors file (opened in memory) read onto a fresh tiny
 * char LM, the base. Refused: a message, and the base's weights untouched.
 * Accepted: every adapter holds the file's A and B bit for bit, with the
 * file's r, only the adapters train, the base's weights are untouched, a
 * forward pass runs, and the adapters saved again as PEFT's file
 * (cg_lora_save) load onto another base to the same adapters. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "fuzz/fuzz.h"
#include "fuzz/lora_base.h"
#include "models/charlm/charlm.h"
#include "models/train/finetune.h"
#include "nn/lora.h"

static cg_charlm *base_model(void)
{
    const cg_charlm_config c = cg_fuzz_lora_base_config();
    cg_charlm *m = cg_charlm_new(&c, 7);
    CG_FUZZ_CHECK(m != NULL);
    return m;
}

/* The base's parameters (those without an adapter's name) as floats. */
static float *snapshot(const cg_charlm *m, int *n_out)
{
    cg_param_list pl = {0};
    CG_FUZZ_CHECK(cg_module_params(CG_MODULE(m), &pl));
    int64_t total = 0;
    for (int i = 0; i < pl.n; i++)
        if (!strstr(pl.items[i].name, ".lora_"))
            total += cg_numel(pl.items[i].tensor);
    float *v = malloc((size_t)total * sizeof *v + 1), *p = v;
    CG_FUZZ_CHECK(v != NULL);
    for (int i = 0; i < pl.n; i++)
        if (!strstr(pl.items[i].name, ".lora_")) {
            CG_FUZZ_CHECK(cg_copy_to(pl.items[i].tensor, p));
            p += cg_numel(pl.items[i].tensor);
        }
    *n_out = (int)total;
    cg_param_list_free(&pl);
    return v;
}

static bool same_floats(const cg_tensor *a, const cg_tensor *b)
{
    int64_t n = cg_numel(a);
    if (n != cg_numel(b) || a->ndim != b->ndim)
        return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d])
            return false;
    float *x = malloc((size_t)n * sizeof *x + 1), *y = malloc((size_t)n * sizeof *y + 1);
    CG_FUZZ_CHECK(x && y && cg_copy_to(a, x) && cg_copy_to(b, y));
    bool same = memcmp(x, y, (size_t)n * sizeof *x) == 0;
    free(x);
    free(y);
    return same;
}

/* Elements of m's adapters, and of f's tensors: an adapter's size comes
 * from the config's r, and is only allocated for tensors the file holds
 * (a few bytes of config must not attach gigabytes before a refusal). */
static double adapter_elements(const cg_charlm *m)
{
    cg_param_list pl = {0};
    CG_FUZZ_CHECK(cg_module_params(CG_MODULE(m), &pl));
    double n = 0;
    for (int i = 0; i < pl.n; i++)
        if (strstr(pl.items[i].name, ".lora_"))
            n += (double)cg_numel(pl.items[i].tensor);
    cg_param_list_free(&pl);
    return n;
}

static double file_elements(const cg_st_file *f)
{
    double n = 0;
    for (int i = 0; i < cg_st_count(f); i++) {
        int nd = 0;
        int64_t sh[CG_MAX_DIMS];
        CG_FUZZ_CHECK(cg_st_info(f, cg_st_name(f, i), NULL, &nd, sh));
        n += (double)cg_numel_shape(nd, sh);
    }
    return n;
}

/* Every adapter of m: its parameters A, B against the file f under PEFT's
 * names, r as the config says; returns how many. */
static int check_adapters(const cg_charlm *m, const cg_st_file *f, int r)
{
    cg_param_list pl = {0};
    CG_FUZZ_CHECK(cg_module_params(CG_MODULE(m), &pl));
    int n = 0;
    for (int i = 0; i < pl.n; i++) {
        const char *name = pl.items[i].name;
        bool is_lora = strstr(name, ".lora_A.") || strstr(name, ".lora_B.");
        /* only the adapters train */
        CG_FUZZ_CHECK(pl.items[i].tensor->requires_grad == is_lora);
        if (!is_lora)
            continue;
        char key[512];
        snprintf(key, sizeof key, "base_model.model.%s", name);
        cg_tensor *t = cg_st_get_f32(f, key);
        CG_FUZZ_CHECK(t != NULL && same_floats(t, pl.items[i].tensor));
        const cg_tensor *w = pl.items[i].tensor;
        CG_FUZZ_CHECK(w->ndim == 2 && w->shape[strstr(name, ".lora_A.") ? 0 : 1] == r);
        cg_release(t);
        n += strstr(name, ".lora_A.") != NULL;
    }
    cg_param_list_free(&pl);
    return n;
}

static char g_dir[64]; /* the round trip's files, removed at exit */
static void remove_dir(void) { rmdir(g_dir); }

/* The adapters of m saved as PEFT's file and loaded onto a fresh base. */
static void round_trip(const cg_charlm *m, int r, int n_adapters)
{
    char *dir = g_dir;
    if (!dir[0]) {
        snprintf(dir, sizeof g_dir, "/tmp/cg_fuzz_lora_XXXXXX");
        CG_FUZZ_CHECK(mkdtemp(dir) != NULL);
        atexit(remove_dir);
    }
    char path[128];
    snprintf(path, sizeof path, "%s/adapter_%d.safetensors", dir, (int)getpid());
    cg_clear_error();
    if (!cg_lora_save(CG_MODULE(m), path)) {
        /* only adapters that differ in alpha or dropout cannot be one file;
         * one config made them all */
        fprintf(stderr, "fuzz_lora: save: %s\n", cg_last_error());
        CG_FUZZ_CHECK(false);
    }
    cg_charlm *m2 = base_model();
    cg_clear_error();
    bool ok = cg_lora_load(CG_MODULE(m2), path);
    if (!ok)
        fprintf(stderr, "fuzz_lora: reload: %s\n", cg_last_error());
    CG_FUZZ_CHECK(ok);
    cg_st_file *f2 = cg_st_open(path);
    CG_FUZZ_CHECK(f2 != NULL);
    CG_FUZZ_CHECK(check_adapters(m2, f2, r) == n_adapters);
    /* and the same values as the first model's */
    cg_param_list a = {0}, b = {0};
    CG_FUZZ_CHECK(cg_module_params(CG_MODULE(m), &a) && cg_module_params(CG_MODULE(m2), &b));
    CG_FUZZ_CHECK(a.n == b.n);
    for (int i = 0; i < a.n; i++)
        CG_FUZZ_CHECK(!strcmp(a.items[i].name, b.items[i].name) &&
                      same_floats(a.items[i].tensor, b.items[i].tensor));
    cg_param_list_free(&a);
    cg_param_list_free(&b);
    cg_st_close(f2);
    unlink(path);
    cg_charlm_free(m2);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cg_clear_error();
    cg_st_file *f = cg_st_open_memory(data, size, "adapter");
    if (!f) {
        CG_FUZZ_CHECK(cg_last_error()[0] != '\0');
        return 0;
    }
    cg_charlm *m = base_model();
    int n_before, n_after;
    float *before = snapshot(m, &n_before);
    cg_clear_error();
    bool ok = cg_ft_read_adapters(CG_MODULE(m), f, "adapter", &m->dropout_rng);
    float *after = snapshot(m, &n_after);
    /* the base's weights are never written, loaded or not */
    CG_FUZZ_CHECK(n_before == n_after &&
                  memcmp(before, after, (size_t)n_before * sizeof *before) == 0);
    CG_FUZZ_CHECK(adapter_elements(m) <= file_elements(f));
    free(before);
    free(after);
    if (!ok) {
        CG_FUZZ_CHECK(cg_last_error()[0] != '\0');
        cg_charlm_free(m);
        cg_st_close(f);
        return 0;
    }
    cJSON *cfg = cg_st_metadata_json(f, "adapter_config");
    const cJSON *rj = cJSON_GetObjectItemCaseSensitive(cfg, "r");
    CG_FUZZ_CHECK(cJSON_IsNumber(rj));
    int r = rj->valueint;
    cJSON_Delete(cfg);
    int n = check_adapters(m, f, r);
    CG_FUZZ_CHECK(n >= 1);

    /* the adapters' optimizer state, as --resume reads it */
    cg_optim *o = cg_adam_from_module(CG_MODULE(m), 1e-3);
    CG_FUZZ_CHECK(o != NULL);
    cg_clear_error();
    if (!cg_optim_load(o, f, "optim"))
        CG_FUZZ_CHECK(cg_last_error()[0] != '\0');
    cg_optim_free(o);

    /* a forward pass, train mode (the adapters' dropout) and eval */
    int64_t x[2] = {0, 4};
    for (int train = 0; train < 2; train++) {
        cg_module_train(CG_MODULE(m), train);
        cg_tensor *logits = cg_charlm_forward(m, x, 1, 2);
        CG_FUZZ_CHECK(logits != NULL);
        cg_release(logits);
    }
    round_trip(m, r, n);
    cg_charlm_free(m);
    cg_st_close(f);
    return 0;
}
