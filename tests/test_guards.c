/* Guards against damaged and hostile inputs (issue 16): range-checked
 * trainer state, linear-time JSON arrays, bounded data loading, output
 * checks and the lock, valid JSON numbers, sampling at tiny temperatures. */
#include <check.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "models/config_json.h"
#include "models/train_common.h"
#include "testutil.h"

START_TEST(test_state_fields)
{
    int64_t epoch = -1, steps = -1;
    double lr = 0;
    uint64_t seed = 0;
    const char *data = NULL;
    const cg_json_field f[] = {
        {"epoch", CG_JF_I64, &epoch, 0, 1e9, false},
        {"steps", CG_JF_I64, &steps, 1, 1e9, true},
        {"lr", CG_JF_F64, &lr, 0, 10, false},
        {"seed", CG_JF_U64STR, &seed, 0, 0, false},
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
    const char *bad[][2] = {
        {"{\"epoch\": 1e15, \"lr\": 1, \"seed\": \"1\", \"data\": \"x\"}", "\"epoch\" is 1000000000000000"},
        {"{\"epoch\": 1.5, \"lr\": 1, \"seed\": \"1\", \"data\": \"x\"}", "integer"},
        {"{\"epoch\": -1, \"lr\": 1, \"seed\": \"1\", \"data\": \"x\"}", "outside"},
        {"{\"lr\": 1, \"seed\": \"1\", \"data\": \"x\"}", "\"epoch\" is missing"},
        {"{\"epoch\": 1, \"lr\": 11, \"seed\": \"1\", \"data\": \"x\"}", "\"lr\""},
        {"{\"epoch\": 1, \"lr\": 1, \"seed\": \"-1\", \"data\": \"x\"}", "\"seed\""},
        {"{\"epoch\": 1, \"lr\": 1, \"seed\": \"99999999999999999999\", \"data\": \"x\"}", "64-bit"},
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
    ck_assert(cg_train_position_check(0, 9, 9, 0, "x"));  /* nothing drawn yet */
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

static Suite *guards_suite(void)
{
    Suite *s = suite_create("guards");
    TCase *t = tcase_create("state");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, test_state_fields);
    tcase_add_test(t, test_position_check);
    tcase_add_test(t, test_history_long);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    Suite *s[] = {guards_suite()};
    return cg_test_run(s, 1);
}
