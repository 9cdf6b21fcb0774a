/* Tests of the nn layer: parameter registry, save/load, every module's
 * forward values (naive loops or PyTorch reference values) and gradients
 * (gradcheck on inputs and parameters). */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "autograd/gradcheck.h"
#include "core/gemm.h"
#include "core/ops.h"
#include "nn/nn.h"
#include "tests/testutil.h"

/* ------------------------------------------------------------ helpers */
static void assert_ok(const void *p)
{
    ck_assert_msg(p != NULL, "unexpected failure: %s", cg_last_error());
}

/* Every parameter of m, element j of the k-th parameter (named_parameters()
 * order): 0.5 sin(1.3 k + 0.37 j + 0.2). The PyTorch reference values below
 * were computed with the same fill. */
static void fill_formula(cg_module *m)
{
    cg_param_list l = {0};
    ck_assert(cg_module_params(m, &l));
    for (int k = 0; k < l.n; k++) {
        cg_tensor *t = l.items[k].tensor;
        ck_assert(cg_is_contiguous(t));
        float *v = cg_data(t);
        for (int64_t j = 0; j < cg_numel(t); j++)
            v[j] = (float)(0.5 * sin(1.3 * k + 0.37 * (double)j + 0.2));
    }
    cg_param_list_free(&l);
}

/* x[j] = f(a j + b) over a contiguous tensor (f = sin or cos). */
static cg_tensor *formula_input(int ndim, const int64_t *shape, double a, double b, bool use_cos)
{
    cg_tensor *t = cg_empty(ndim, shape);
    assert_ok(t);
    float *v = cg_data(t);
    for (int64_t j = 0; j < cg_numel(t); j++)
        v[j] = (float)(use_cos ? cos(a * (double)j + b) : sin(a * (double)j + b));
    return t;
}

/* Every parameter ~ N(0, std) (so biases and norm weights are non-trivial). */
static void randomize(cg_module *m, uint64_t seed, float std)
{
    cg_rng r = cg_rng_new(seed);
    cg_param_list l = {0};
    ck_assert(cg_module_params(m, &l));
    for (int k = 0; k < l.n; k++)
        ck_assert(cg_normal_(l.items[k].tensor, &r, 0.0f, std));
    cg_param_list_free(&l);
}

static cg_tensor *randn_leaf(cg_rng *r, int ndim, const int64_t *shape)
{
    cg_tensor *t = cg_randn(r, ndim, shape);
    assert_ok(t);
    cg_requires_grad(t, true);
    return t;
}

static void assert_names(const cg_module *m, const char *const *names, int n, int64_t count)
{
    cg_param_list l = {0};
    ck_assert(cg_module_params(m, &l));
    ck_assert_int_eq(l.n, n);
    for (int i = 0; i < n; i++)
        ck_assert_str_eq(l.items[i].name, names[i]);
    cg_param_list_free(&l);
    ck_assert_int_eq(cg_module_num_param_tensors(m), n);
    ck_assert_int_eq(cg_module_num_params(m), count);
}

/* ------------------------------------------------- gradcheck plumbing */
typedef struct {
    cg_module *m;
    int kind;
    /* masks */
    bool causal;
    const cg_tensor *key_pad;
    const cg_tensor *mask;
    cg_attn_mask sm, cm;
    /* embedding ids */
    const int64_t *ids;
    int ids_ndim;
    int64_t ids_shape[4];
    /* dropout: reset the generator before every call */
    cg_rng *rng;
    cg_rng rng0;
} fctx;

enum {
    K_LINEAR,
    K_EMBED,
    K_NORM,
    K_NORM_ADD,
    K_DROP,
    K_POSENC,
    K_FF,
    K_MHA_SELF,
    K_MHA_CROSS,
    K_MHA_BIAS, /* self-attention, in[1] the float mask (a learnable bias) */
    K_ENC,
    K_ENC_BIAS, /* encoder layer, in[1] the self-attention's float mask */
    K_DEC_BIAS, /* decoder layer, in[2] and in[3] the float masks of its attentions */
    K_DEC,
    K_BLOCK,
    K_ENC_STACK,
    K_DEC_STACK
};

static cg_tensor *fwd(void *ctx, cg_tensor *const *in)
{
    fctx *c = ctx;
    if (c->rng)
        *c->rng = c->rng0;
    switch (c->kind) {
    case K_LINEAR: return cg_linear_forward((cg_linear *)c->m, in[0]);
    case K_EMBED:
        return cg_embed_forward((cg_embed *)c->m,
                                cg_test_ids_nd(c->ids_ndim, c->ids_shape, c->ids));
    case K_NORM: return cg_norm_forward((cg_norm *)c->m, in[0]);
    case K_NORM_ADD: return cg_norm_add_forward((cg_norm *)c->m, in[0], in[1]);
    case K_DROP: return cg_drop_forward((cg_drop *)c->m, in[0]);
    case K_POSENC: return cg_posenc_forward((cg_posenc *)c->m, in[0]);
    case K_FF: return cg_ff_forward((cg_ff *)c->m, in[0]);
    case K_MHA_SELF:
        return cg_mha_forward((cg_mha *)c->m, in[0], in[0], c->causal, c->key_pad, c->mask, NULL);
    case K_MHA_CROSS:
        return cg_mha_forward((cg_mha *)c->m, in[0], in[1], c->causal, c->key_pad, c->mask, NULL);
    case K_MHA_BIAS:
        return cg_mha_forward((cg_mha *)c->m, in[0], in[0], c->causal, c->key_pad, in[1], NULL);
    case K_ENC: return cg_enc_layer_forward((cg_enc_layer *)c->m, in[0], &c->sm);
    case K_ENC_BIAS: {
        cg_attn_mask sm = c->sm;
        sm.mask = in[1];
        return cg_enc_layer_forward((cg_enc_layer *)c->m, in[0], &sm);
    }
    case K_DEC_BIAS: {
        cg_attn_mask sm = c->sm, cm = c->cm;
        sm.mask = in[2];
        cm.mask = in[3];
        return cg_dec_layer_forward((cg_dec_layer *)c->m, in[0], in[1], &sm, &cm);
    }
    case K_DEC: return cg_dec_layer_forward((cg_dec_layer *)c->m, in[0], in[1], &c->sm, &c->cm);
    case K_BLOCK: return cg_lm_block_forward((cg_lm_block *)c->m, in[0], &c->sm);
    case K_ENC_STACK: return cg_enc_stack_forward((cg_enc_stack *)c->m, in[0], &c->sm);
    case K_DEC_STACK:
        return cg_dec_stack_forward((cg_dec_stack *)c->m, in[0], in[1], &c->sm, &c->cm);
    }
    return NULL;
}

/* gradcheck over the n_in inputs and every parameter of c->m. */
static void gradcheck_module(fctx *c, int n_in, cg_tensor *const *in, double atol, double rtol)
{
    cg_param_list l = {0};
    ck_assert(cg_module_params(c->m, &l));
    cg_tensor **all = calloc((size_t)(n_in + l.n), sizeof *all);
    for (int i = 0; i < n_in; i++)
        all[i] = in[i];
    for (int i = 0; i < l.n; i++)
        all[n_in + i] = l.items[i].tensor;
    cg_gradcheck_opts o = cg_gradcheck_defaults();
    o.atol = atol;
    o.rtol = rtol;
    cg_gradcheck_report rep;
    bool ok = cg_gradcheck(fwd, c, n_in + l.n, all, &o, &rep);
    const char *where = rep.worst_input >= n_in && rep.worst_input < n_in + l.n
                            ? l.items[rep.worst_input - n_in].name
                            : "an input";
    if (getenv("CG_TEST_VERBOSE"))
        printf("%s: %s (worst in %s)\n", c->m->type, rep.message, where);
    ck_assert_msg(ok, "%s %s (worst in %s)", c->m->type, rep.message, where);
    ck_assert_int_gt(rep.checked, 0);
    free(all);
    cg_param_list_free(&l);
}

/* ------------------------------------------------------ naive references */
/* y[r, o] = sum_i x[r, i] W[o, i] + b[o] in double. */
static void naive_linear(const float *x, int64_t rows, const cg_linear *l, double *y)
{
    float *w = cg_test_values(l->weight);
    float *b = l->bias ? cg_test_values(l->bias) : NULL;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t o = 0; o < l->out_features; o++) {
            double s = b ? b[o] : 0.0;
            for (int64_t i = 0; i < l->in_features; i++)
                s += (double)x[r * l->in_features + i] * w[o * l->in_features + i];
            y[r * l->out_features + o] = s;
        }
    free(w);
    free(b);
}

static void to_float(const double *a, float *b, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        b[i] = (float)a[i];
}

/* PyTorch reference values (models.py, float32), computed once with the fill
 * and inputs above (x[j] = sin(0.9 j + 0.3) [2,3,6] or [2,3,10]; memory
 * m[j] = cos(0.7 j + 0.1) [2,4,6] or [2,4,10]) and pasted here. */
static const float ref_enc_post_ln_relu[36] = {
    0.725785017f, 0.503676534f, 0.512940347f, 0.596529841f, 0.545439005f, 0.959141672f,
    0.668558657f, 0.489528179f, 0.410507143f, 0.505603909f, 0.59058845f,  1.10059941f,
    0.681459486f, 0.47007373f,  0.455989033f, 0.465449274f, 0.255174845f, 1.18207061f,
    0.757107317f, 0.474142492f, 0.597573638f, 0.545698762f, 0.135473043f, 0.925492048f,
    0.770721674f, 0.48643133f,  0.62350297f,  0.636122763f, 0.215230927f, 0.782600343f,
    0.767071009f, 0.497578889f, 0.600314438f, 0.680349946f, 0.3488684f,   0.767726421f};
static const float ref_enc_pre_rms_gelu[36] = {
    0.939688683f,   -1.01047421f, 1.10979557f,   -0.211486369f, -2.83713293f, -1.32153392f,
    -0.042750597f,  -1.61848187f, 1.30287135f,   0.395857722f,  -2.03923774f, -0.937731683f,
    -0.506526828f,  -2.59606028f, 0.776387215f,  0.568404078f,  -1.44112825f, -0.154251814f,
    -0.0810313821f, -3.12979126f, -0.189203963f, 0.189124733f,  -1.42420816f, 0.418788195f,
    0.838501632f,   -2.84283209f, -0.775733709f, -0.577868581f, -1.99499106f, 0.468451321f,
    1.64185309f,    -1.95630848f, -0.6266343f,   -1.06995881f,  -2.76596832f, -0.124074757f};
static const float ref_dec_pre_ln_gelu[36] = {
    -0.0687635541f, -1.99788642f, 1.98552644f,    -1.02592218f,  -3.48761773f, 0.475021064f,
    -1.04465806f,   -2.61485744f, 2.17143846f,    -0.406433403f, -2.68276501f, 0.83576715f,
    -1.55449653f,   -3.43461609f, 1.58689797f,    -0.365709424f, -1.92955208f, 1.64209294f,
    -0.907377064f,  -4.02577829f, 0.550265193f,   -0.656869769f, -1.99884903f, 2.31441951f,
    0.102929592f,   -3.77305794f, -0.0875973701f, -1.35063255f,  -2.59216619f, 2.33308458f,
    0.970805347f,   -3.01243091f, 0.0890460908f,  -1.72344863f,  -3.48945427f, 1.72227609f};
static const float ref_dec_post_rms_relu[36] = {
    -0.238863364f, -0.0593556985f, 0.205957219f,  -0.194742575f, -0.124601364f, 0.747890651f,
    -0.219347298f, 0.199369147f,   0.0496037751f, -0.521191895f, -0.107390724f, 0.677124619f,
    -0.226648763f, 0.342765003f,   0.248424575f,  -0.44900471f,  -0.147077948f, 0.622555017f,
    -0.298956037f, 0.448491663f,   0.427934408f,  -0.181133524f, -0.162773371f, 0.513375103f,
    -0.317406178f, 0.34580484f,    0.569977105f,  0.0889134482f, -0.193433046f, 0.486764967f,
    -0.327056348f, 0.229970679f,   0.595626652f,  0.291344315f,  -0.180842549f, 0.476950794f};
static const float ref_enc_stack_pre[48] = {
    -0.673212707f, 0.268422127f, -0.585299671f, 0.126524568f,  0.788508832f, 0.261682212f,
    -0.222984508f, 0.472653866f, -0.645914674f, -0.145696849f, 0.58004576f,  0.240009695f,
    -0.3177993f,   0.513363421f, -0.364575058f, 0.0300004035f, 0.503230035f, 0.145102829f,
    -0.675110817f, 0.270560026f, -0.578589797f, 0.130480453f,  0.786565483f, 0.259025216f,
    -0.206409991f, 0.463577062f, -0.66449666f,  -0.137879208f, 0.575850546f, 0.241782829f,
    -0.292664707f, 0.509677291f, -0.372812629f, 0.0368900336f, 0.490043432f, 0.143137187f,
    -0.672709823f, 0.266232312f, -0.580264807f, 0.143687278f,  0.784770429f, 0.256074816f,
    -0.212402612f, 0.46083644f,  -0.669874847f, -0.137875661f, 0.581420362f, 0.244046092f};
static const float ref_lm_block[36] = {
    0.588286519f,  0.235819072f,  2.31557608f,  0.816006422f,  -0.830361128f,  0.62311697f,
    -0.195182413f, -0.405952245f, 2.31519747f,  1.64546227f,   -0.0471487641f, 0.81481719f,
    -0.580049396f, -1.24929905f,  1.62019563f,  1.82918596f,   0.665431499f,   1.52939963f,
    -0.116316974f, -1.60029125f,  0.450767696f, 1.52323735f,   0.736876488f,   1.98700047f,
    0.637830555f,  -1.3643775f,   0.065506041f, 0.628901422f,  0.108824104f,   2.17378068f,
    1.29570794f,   -0.565035343f, 0.426914275f, 0.0202841163f, -0.724201262f,  1.71464658f};
static const float ref_mha_cross[60] = {
    0.98791939f,   -0.226009309f, -1.03679967f,  0.957073569f,  -2.07038736f,  0.815500736f,
    -1.07210517f,  -0.538154483f, 0.870434403f,  -1.4752537f,   0.968851447f,  -0.263755977f,
    -0.953706026f, 0.853876591f,  -1.97843838f,  0.762733698f,  -1.07455099f,  -0.48123911f,
    0.776340246f,  -1.37256682f,  1.01466882f,   -0.204940557f, -1.09928584f,  1.04199386f,
    -2.15194321f,  0.868915081f,  -1.08115101f,  -0.57622534f,  0.944055915f,  -1.56206012f,
    0.371202439f,  0.100396521f,  -0.973732293f, 0.523692846f,  -1.39835441f,  0.108978748f,
    -0.545735955f, -0.724460185f, 0.660077035f,  -0.932139754f, 0.455713451f,  0.0938488021f,
    -1.04713714f,  0.654749751f,  -1.54724813f,  0.230475843f,  -0.602925241f, -0.748952746f,
    0.75881052f,   -1.07511902f,  0.37825349f,   0.112665348f,  -1.00159407f,  0.55868268f,
    -1.42984271f,  0.127399504f,  -0.545492649f, -0.743293524f, 0.691778719f,  -0.967078924f};
static const float ref_mha_cross_w[120] = {
    0.214836746f,  0.201378077f, 0.242262423f, 0.341522813f, 0.356995165f, 0.253830343f,
    0.197910637f,  0.191263914f, 0.314202338f, 0.254743397f, 0.218131498f, 0.212922767f,
    0.217989996f,  0.286748439f, 0.283469319f, 0.21179226f,  0.361164331f, 0.228716314f,
    0.188309118f,  0.221810192f, 0.187148169f, 0.311062068f, 0.312485874f, 0.18930386f,
    0.0788703337f, 0.1842127f,   0.348032475f, 0.388884544f, 0.408220977f, 0.249186665f,
    0.174804196f,  0.167788133f, 0.118357368f, 0.213670865f, 0.326147974f, 0.341823757f,
    0.223395243f,  0.204778671f, 0.239826024f, 0.332000166f, 0.300119221f, 0.240264237f,
    0.219732136f,  0.239884481f, 0.294810802f, 0.261811495f, 0.230102971f, 0.213274777f,
    0.211476654f,  0.288252831f, 0.288443297f, 0.211827233f, 0.442993402f, 0.220067397f,
    0.154498756f,  0.182440504f, 0.184701025f, 0.301958621f, 0.312324554f, 0.201015875f,
    0.434307128f,  0.565692842f, 0.0f,         0.0f,         0.430098236f, 0.569901764f,
    0.0f,          0.0f,         0.45287326f,  0.54712677f,  0.0f,         0.0f,
    0.356844932f,  0.643155098f, 0.0f,         0.0f,         0.625565946f, 0.374434054f,
    0.0f,          0.0f,         0.435058922f, 0.564941108f, 0.0f,         0.0f,
    0.486527294f,  0.513472736f, 0.0f,         0.0f,         0.509272873f, 0.490727156f,
    0.0f,          0.0f,         0.623179317f, 0.376820683f, 0.0f,         0.0f,
    0.426032722f,  0.573967338f, 0.0f,         0.0f,         0.479539067f, 0.520460904f,
    0.0f,          0.0f,         0.431511849f, 0.568488121f, 0.0f,         0.0f,
    0.327002704f,  0.672997236f, 0.0f,         0.0f,         0.587023973f, 0.412976086f,
    0.0f,          0.0f,         0.432761252f, 0.567238748f, 0.0f,         0.0f};
static const float ref_pe_7_5[35] = {
    0.0f,          1.0f,          0.0f,          1.0f,         0.0f,
    0.841470957f,  0.540302277f,  0.025116222f,  0.999684513f, 0.000630957307f,
    0.909297407f,  -0.416146845f, 0.0502166003f, 0.998738348f, 0.00126191438f,
    0.141120002f,  -0.989992499f, 0.0752852932f, 0.997162044f, 0.00189287087f,
    -0.756802499f, -0.653643608f, 0.100306489f,  0.994956613f, 0.00252382667f,
    -0.958924294f, 0.2836622f,    0.125264391f,  0.992123365f, 0.00315478141f,
    -0.279415488f, 0.960170269f,  0.150143266f,  0.988664269f, 0.003785735f};
static const float ref_ff_gelu[36] = {
    -0.737372756f, -1.30636919f,  0.28481102f,     -0.0487088263f, -1.31939149f,  -0.0051690191f,
    -0.476134568f, -1.24955904f,  -0.00773984194f, 0.0557293296f,  -1.08440495f,  -0.239127219f,
    -0.459021688f, -1.36545241f,  0.0390254259f,   0.145846605f,   -1.18084121f,  -0.276090741f,
    -0.492672741f, -1.30834746f,  0.0412013531f,   0.0875422359f,  -1.15088081f,  -0.234299958f,
    -0.534184277f, -0.967651486f, -0.105072021f,   -0.172530591f,  -0.861260355f, -0.133860275f,
    -0.72375381f,  -0.977995574f, 0.0901989341f,   -0.269816041f,  -1.00290942f,  0.0414994359f};

/* Attention in double with plain loops. mask_h: optional [H, 1, Tk] user
 * mask (broadcast over B and Tq). w_out (optional) gets [B,H,Tq,Tk]. */
static void naive_mha(const cg_mha *m, const float *xq, const float *xkv, int64_t B, int64_t Tq,
                      int64_t Tk, bool causal, const uint8_t *key_pad, const float *mask_h,
                      double *out, double *w_out)
{
    int64_t d = m->d, H = m->H, dh = m->d_head;
    double *q = malloc(sizeof(double) * B * Tq * d), *k = malloc(sizeof(double) * B * Tk * d);
    double *v = malloc(sizeof(double) * B * Tk * d), *cat = malloc(sizeof(double) * B * Tq * d);
    double *s = malloc(sizeof(double) * Tk);
    naive_linear(xq, B * Tq, m->q_proj, q);
    naive_linear(xkv, B * Tk, m->k_proj, k);
    naive_linear(xkv, B * Tk, m->v_proj, v);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < Tq; i++) {
                double mx = -INFINITY;
                for (int64_t j = 0; j < Tk; j++) {
                    bool masked = (causal && j > i) || (key_pad && key_pad[b * Tk + j]) ||
                                  (mask_h && mask_h[h * Tk + j] != 0.0f);
                    double acc = 0;
                    for (int64_t c = 0; c < dh; c++)
                        acc += q[(b * Tq + i) * d + h * dh + c] * k[(b * Tk + j) * d + h * dh + c];
                    s[j] = masked ? -INFINITY : acc / sqrt((double)dh);
                    mx = s[j] > mx ? s[j] : mx;
                }
                double z = 0;
                for (int64_t j = 0; j < Tk; j++)
                    z += (s[j] = exp(s[j] - mx));
                for (int64_t j = 0; j < Tk; j++) {
                    s[j] /= z;
                    if (w_out)
                        w_out[((b * H + h) * Tq + i) * Tk + j] = s[j];
                }
                for (int64_t c = 0; c < dh; c++) {
                    double acc = 0;
                    for (int64_t j = 0; j < Tk; j++)
                        acc += s[j] * v[(b * Tk + j) * d + h * dh + c];
                    cat[(b * Tq + i) * d + h * dh + c] = acc;
                }
            }
    float *catf = malloc(sizeof(float) * B * Tq * d);
    to_float(cat, catf, B * Tq * d);
    naive_linear(catf, B * Tq, m->o_proj, out);
    free(catf);
    free(q);
    free(k);
    free(v);
    free(cat);
    free(s);
}

/* ====================================================== registry tests */
START_TEST(test_names_basic)
{
    cg_linear *l = cg_linear_new(3, 4, true, NULL);
    assert_ok(l);
    assert_names(CG_MODULE(l), (const char *[]){"weight", "bias"}, 2, 16);
    ck_assert_str_eq(l->base.type, "Linear");
    ck_assert(l->weight->requires_grad && l->bias->requires_grad && !l->weight->node);
    ck_assert_int_eq(l->weight->shape[0], 4);
    ck_assert_int_eq(l->weight->shape[1], 3);
    cg_module_free(CG_MODULE(l));

    cg_linear *nb = cg_linear_new(3, 4, false, NULL);
    assert_names(CG_MODULE(nb), (const char *[]){"weight"}, 1, 12);
    ck_assert_ptr_null(nb->bias);
    cg_module_free(CG_MODULE(nb));

    cg_norm *ln = cg_layernorm_new(5), *rn = cg_rmsnorm_new(5);
    assert_names(CG_MODULE(ln), (const char *[]){"weight", "bias"}, 2, 10);
    assert_names(CG_MODULE(rn), (const char *[]){"weight"}, 1, 5);
    ck_assert_str_eq(ln->base.type, "LayerNorm");
    ck_assert_str_eq(rn->base.type, "RMSNorm");
    cg_module_free(CG_MODULE(ln));
    cg_module_free(CG_MODULE(rn));

    cg_embed *e = cg_embed_new(7, 3, NULL);
    assert_names(CG_MODULE(e), (const char *[]){"weight"}, 1, 21);
    cg_module_free(CG_MODULE(e));

    cg_ff *f = cg_ff_new(6, 5, CG_ACT_GELU, NULL);
    assert_names(CG_MODULE(f), (const char *[]){"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"},
                 4, 6 * 5 + 5 + 5 * 6 + 6);
    cg_module_free(CG_MODULE(f));

    cg_mha *m = cg_mha_new(6, 2, NULL);
    assert_names(CG_MODULE(m),
                 (const char *[]){"q_proj.weight", "q_proj.bias", "k_proj.weight", "k_proj.bias",
                                  "v_proj.weight", "v_proj.bias", "o_proj.weight", "o_proj.bias"},
                 8, 4 * 42);
    ck_assert_int_eq(m->d_head, 3);
    cg_module_free(CG_MODULE(m));

    cg_drop *dr = cg_drop_new(0.1f, NULL);
    cg_posenc *pe = cg_posenc_new(8, 4);
    assert_names(CG_MODULE(dr), NULL, 0, 0);
    assert_names(CG_MODULE(pe), NULL, 0, 0);
    cg_module_free(CG_MODULE(dr));
    cg_module_free(CG_MODULE(pe));
}
END_TEST

static cg_tf_config small_cfg(cg_norm_kind norm, cg_act act, bool norm_first)
{
    return (cg_tf_config){.d = 6,
                          .H = 2,
                          .d_ff = 5,
                          .norm = norm,
                          .act = act,
                          .norm_first = norm_first,
                          .dropout = 0.0f,
                          .dropout_rng = NULL};
}

/* Names and counts printed by models.py (d=6, H=2, d_ff=5). */
START_TEST(test_names_transformer)
{
    cg_tf_config c = small_cfg(CG_NORM_LAYERNORM, CG_ACT_RELU, true);
    cg_enc_layer *enc = cg_enc_layer_new(&c, NULL);
    assert_ok(enc);
    assert_names(CG_MODULE(enc),
                 (const char *[]){"self_attn.q_proj.weight", "self_attn.q_proj.bias",
                                  "self_attn.k_proj.weight", "self_attn.k_proj.bias",
                                  "self_attn.v_proj.weight", "self_attn.v_proj.bias",
                                  "self_attn.o_proj.weight", "self_attn.o_proj.bias", "ln1.weight",
                                  "ln1.bias", "ff.fc1.weight", "ff.fc1.bias", "ff.fc2.weight",
                                  "ff.fc2.bias", "ln2.weight", "ln2.bias"},
                 16, 263);
    cg_module_free(CG_MODULE(enc));

    c = small_cfg(CG_NORM_RMSNORM, CG_ACT_RELU, false);
    cg_dec_layer *dec = cg_dec_layer_new(&c, NULL);
    assert_ok(dec);
    assert_names(CG_MODULE(dec),
                 (const char *[]){"self_attn.q_proj.weight",
                                  "self_attn.q_proj.bias",
                                  "self_attn.k_proj.weight",
                                  "self_attn.k_proj.bias",
                                  "self_attn.v_proj.weight",
                                  "self_attn.v_proj.bias",
                                  "self_attn.o_proj.weight",
                                  "self_attn.o_proj.bias",
                                  "ln1.weight",
                                  "cross_attn.q_proj.weight",
                                  "cross_attn.q_proj.bias",
                                  "cross_attn.k_proj.weight",
                                  "cross_attn.k_proj.bias",
                                  "cross_attn.v_proj.weight",
                                  "cross_attn.v_proj.bias",
                                  "cross_attn.o_proj.weight",
                                  "cross_attn.o_proj.bias",
                                  "ln2.weight",
                                  "ff.fc1.weight",
                                  "ff.fc1.bias",
                                  "ff.fc2.weight",
                                  "ff.fc2.bias",
                                  "ln3.weight"},
                 23, 425);
    cg_module_free(CG_MODULE(dec));

    c = small_cfg(CG_NORM_LAYERNORM, CG_ACT_GELU, true);
    cg_enc_stack *es = cg_enc_stack_new(2, &c, NULL);
    assert_ok(es);
    cg_param_list l = {0};
    ck_assert(cg_module_params(CG_MODULE(es), &l));
    ck_assert_int_eq(l.n, 34);
    ck_assert_str_eq(l.items[0].name, "layers.0.self_attn.q_proj.weight");
    ck_assert_str_eq(l.items[15].name, "layers.0.ln2.bias");
    ck_assert_str_eq(l.items[16].name, "layers.1.self_attn.q_proj.weight");
    ck_assert_str_eq(l.items[31].name, "layers.1.ln2.bias");
    ck_assert_str_eq(l.items[32].name, "ln_f.weight");
    ck_assert_str_eq(l.items[33].name, "ln_f.bias");
    cg_param_list_free(&l);
    ck_assert_int_eq(cg_module_num_params(CG_MODULE(es)), 538);
    cg_module_free(CG_MODULE(es));

    c = small_cfg(CG_NORM_LAYERNORM, CG_ACT_RELU, false);
    cg_dec_stack *ds = cg_dec_stack_new(1, &c, NULL);
    assert_ok(ds);
    ck_assert_ptr_null(ds->ln_f);
    ck_assert(cg_module_params(CG_MODULE(ds), &l));
    ck_assert_int_eq(l.n, 26);
    ck_assert_str_eq(l.items[10].name, "layers.0.cross_attn.q_proj.weight");
    ck_assert_str_eq(l.items[25].name, "layers.0.ln3.bias");
    cg_param_list_free(&l);
    ck_assert_int_eq(cg_module_num_params(CG_MODULE(ds)), 443);
    cg_module_free(CG_MODULE(ds));

    c = small_cfg(CG_NORM_LAYERNORM, CG_ACT_GELU, true);
    cg_lm_block *blk = cg_lm_block_new(&c, NULL);
    assert_ok(blk);
    assert_names(CG_MODULE(blk),
                 (const char *[]){"ln1.weight", "ln1.bias", "attn.q_proj.weight",
                                  "attn.q_proj.bias", "attn.k_proj.weight", "attn.k_proj.bias",
                                  "attn.v_proj.weight", "attn.v_proj.bias", "attn.o_proj.weight",
                                  "attn.o_proj.bias", "ln2.weight", "ln2.bias", "ff.fc1.weight",
                                  "ff.fc1.bias", "ff.fc2.weight", "ff.fc2.bias"},
                 16, 263);
    cg_module_free(CG_MODULE(blk));
}
END_TEST

START_TEST(test_registry_lookup_and_errors)
{
    cg_tf_config c = small_cfg(CG_NORM_LAYERNORM, CG_ACT_GELU, true);
    cg_enc_stack *es = cg_enc_stack_new(2, &c, NULL);
    cg_module *m = CG_MODULE(es);
    cg_tensor *b = cg_module_get_param(m, "layers.1.ff.fc2.bias");
    assert_ok(b);
    ck_assert_ptr_eq(b, es->layers[1]->ff->fc2->bias);
    ck_assert_ptr_eq(cg_module_get_param(m, "ln_f.weight"), es->ln_f->weight);
    CG_ASSERT_FAILS(cg_module_get_param(m, "layers.2.ff.fc2.bias"), "layers.2.ff.fc2.bias");
    CG_ASSERT_FAILS(cg_module_get_param(m, "layers.1.ff.fc3.bias"), "no parameter");
    cg_module *sa = cg_module_get_child(m, "layers.0.self_attn");
    assert_ok(sa);
    ck_assert_str_eq(sa->type, "MultiHeadAttention");
    ck_assert_ptr_eq(sa, CG_MODULE(es->layers[0]->self_attn));
    ck_assert_ptr_eq(cg_module_get_child(m, ""), m);
    CG_ASSERT_FAILS(cg_module_get_child(m, "layers.x"), "layers.x");
    cg_module_free(m);

    /* a child's name is matched whole: "head" is not the "headx" added before it */
    cg_module *pre = cg_module_new("Prefixes");
    cg_linear *hx = cg_module_add_child(pre, "headx", cg_linear_new(2, 2, true, NULL));
    cg_linear *h = cg_module_add_child(pre, "head", cg_linear_new(3, 3, false, NULL));
    assert_ok(hx);
    assert_ok(h);
    ck_assert_ptr_eq(cg_module_get_child(pre, "head"), CG_MODULE(h));
    ck_assert_ptr_eq(cg_module_get_param(pre, "head.weight"), h->weight);
    CG_ASSERT_FAILS(cg_module_get_param(pre, "head.bias"), "no parameter named 'head.bias'");
    CG_ASSERT_FAILS(cg_module_get_child(pre, "hea"), "no child module at 'hea'");
    cg_module_free(pre);

    /* a hand-built module with a tied parameter, listed once */
    cg_module *top = cg_module_new("Tied");
    cg_embed *e = cg_module_add_child(top, "emb", cg_embed_new(5, 3, NULL));
    assert_ok(e);
    cg_tensor *extra = cg_zeros(CG_SHAPE(2));
    assert_ok(cg_module_add_param(top, "scale", extra));
    ck_assert(extra->requires_grad);
    ck_assert_ptr_nonnull(cg_module_add_child(top, "head", cg_module_new("Head")));
    assert_ok(cg_module_add_param(cg_module_get_child(top, "head"), "weight", e->weight));
    cg_param_list l = {0};
    ck_assert(cg_module_params(top, &l));
    ck_assert_int_eq(l.n, 2);
    ck_assert_str_eq(l.items[0].name, "scale"); /* own parameters first */
    ck_assert_str_eq(l.items[1].name, "emb.weight");
    cg_param_list_free(&l);
    ck_assert_int_eq(cg_module_num_params(top), 17);
    /* bad registrations */
    CG_ASSERT_FAILS(cg_module_add_param(top, "scale", extra), "already");
    CG_ASSERT_FAILS(cg_module_add_param(top, "emb", extra), "already");
    CG_ASSERT_FAILS(cg_module_add_param(top, "a.b", extra), "'a.b'");
    CG_ASSERT_FAILS(cg_module_add_param(top, "", extra), "non-empty");
    CG_ASSERT_FAILS(cg_module_add_child(top, "emb", cg_module_new("X")), "already");
    cg_tensor *nonleaf = cg_muls(extra, 2.0f);
    CG_ASSERT_FAILS(cg_module_add_param(top, "nl", nonleaf), "leaf");
    cg_release_all(2, extra, nonleaf); /* the module keeps its own reference */
    ck_assert_int_eq(cg_module_num_params(top), 17);
    cg_module_free(top);
    cg_module_free(NULL);

    /* constructor errors */
    CG_ASSERT_FAILS(cg_mha_new(10, 4, NULL), "not divisible");
    CG_ASSERT_FAILS(cg_linear_new(0, 3, true, NULL), "in_features");
    CG_ASSERT_FAILS(cg_drop_new(1.5f, NULL), "[0, 1]");
    CG_ASSERT_FAILS(cg_drop_new(NAN, NULL), "[0, 1]");
    c.H = 4;
    CG_ASSERT_FAILS(cg_enc_layer_new(&c, NULL), "divisible");
    c.H = 2;
    c.dropout = -0.5f;
    CG_ASSERT_FAILS(cg_dec_stack_new(1, &c, NULL), "dropout");
    cg_act a;
    cg_norm_kind nk;
    ck_assert(cg_act_parse("gelu", &a) && a == CG_ACT_GELU);
    ck_assert(cg_norm_kind_parse("rmsnorm", &nk) && nk == CG_NORM_RMSNORM);
    ck_assert(!cg_act_parse("swish", &a));
    ck_assert(strstr(cg_last_error(), "swish") != NULL);
    ck_assert(!cg_norm_kind_parse("batchnorm", &nk));
    CG_ASSERT_REFUSED(!cg_act_parse("relu", NULL), "cg_act_parse: argument 'out' is NULL");
    CG_ASSERT_REFUSED(!cg_norm_kind_parse("layernorm", NULL),
                      "cg_norm_kind_parse: argument 'out' is NULL");
    ck_assert_str_eq(cg_act_name(CG_ACT_RELU), "relu");
    ck_assert_str_eq(cg_norm_kind_name(CG_NORM_LAYERNORM), "layernorm");
}
END_TEST

/* Issue 35: the encoder's and the decoder's stack have one constructor.
 * Either one is its layers made one after another from the generator (then
 * ln_f when pre-norm), with the names and the values of layers made by
 * hand: the order of the draws, on which the bench's bits and every
 * checkpoint's resume depend, is kept. */
START_TEST(test_stacks_draw_order)
{
    for (int dec = 0; dec < 2; dec++)
        for (int pre = 0; pre < 2; pre++) {
            cg_tf_config c = small_cfg(CG_NORM_LAYERNORM, CG_ACT_GELU, pre);
            cg_rng r1 = cg_rng_new(11), r2 = cg_rng_new(11);
            cg_module *s = dec ? CG_MODULE(cg_dec_stack_new(3, &c, &r1))
                               : CG_MODULE(cg_enc_stack_new(3, &c, &r1));
            ck_assert_str_eq(s->type, dec ? "TransformerDecoder" : "TransformerEncoder");
            cg_module *hand = cg_module_new("Hand"), *list = cg_module_new("ModuleList");
            assert_ok(cg_module_add_child(hand, "layers", list));
            for (int i = 0; i < 3; i++) {
                char name[8];
                snprintf(name, sizeof name, "%d", i);
                void *l =
                    dec ? (void *)cg_dec_layer_new(&c, &r2) : (void *)cg_enc_layer_new(&c, &r2);
                assert_ok(cg_module_add_child(list, name, l));
            }
            if (pre)
                assert_ok(cg_module_add_child(hand, "ln_f", cg_norm_new(c.norm, c.d)));
            cg_param_list a = {0}, b = {0};
            ck_assert(cg_module_params(s, &a) && cg_module_params(hand, &b));
            ck_assert_int_eq(a.n, b.n);
            for (int i = 0; i < a.n; i++) {
                ck_assert_str_eq(a.items[i].name, b.items[i].name);
                ck_assert(!memcmp(cg_data(a.items[i].tensor), cg_data(b.items[i].tensor),
                                  sizeof(float) * (size_t)cg_numel(a.items[i].tensor)));
            }
            ck_assert(r1.counter == r2.counter && r1.seed == r2.seed);
            cg_param_list_free(&a);
            cg_param_list_free(&b);
            cg_module_free(s);
            cg_module_free(hand);
        }
    cg_tf_config c = small_cfg(CG_NORM_LAYERNORM, CG_ACT_GELU, true);
    CG_ASSERT_FAILS(cg_dec_stack_new(-1, &c, NULL), "TransformerDecoder: n_layers must be >= 0");
    CG_ASSERT_FAILS(cg_enc_stack_new(-2, &c, NULL), "TransformerEncoder: n_layers must be >= 0");
}
END_TEST

/* Issue 35: one table of activations and one of norms. Every row is
 * accepted by every module that takes the choice, by name and by value,
 * and computes the row's function; an unknown name or value is refused
 * naming every row. */
static bool lists_every(const char *msg, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (!strstr(msg, names[i]))
            return false;
    return true;
}

START_TEST(test_act_norm_tables)
{
    cg_rng rng = cg_rng_new(5);
    cg_tensor *x = cg_randn(&rng, CG_SHAPE(3, 4));
    const char *acts[CG_N_ACTS], *norms[CG_N_NORMS];
    for (int i = 0; i < CG_N_ACTS; i++) {
        const cg_act_info *r = cg_act_info_of((cg_act)i, "t");
        ck_assert_ptr_nonnull(r);
        acts[i] = r->name;
        cg_act back;
        ck_assert(cg_act_parse(r->name, &back) && back == (cg_act)i);
        ck_assert_str_eq(cg_act_name((cg_act)i), r->name);
        cg_tensor *want = r->forward(x), *got = cg_activation(x, (cg_act)i);
        cg_module *m = cg_activation_new((cg_act)i);
        ck_assert_msg(m, "%s: %s", r->name, cg_last_error());
        ck_assert_str_eq(m->type, r->type);
        cg_tensor *mod = cg_module_forward(m, x);
        const size_t nb = (size_t)cg_numel(want) * sizeof(float); /* gated: halves */
        ck_assert(!memcmp(cg_data(got), cg_data(want), nb));
        ck_assert(!memcmp(cg_data(mod), cg_data(want), nb));
        cg_ff *ff = cg_ff_new(4, 8, (cg_act)i, &rng);
        cg_tf_config c = {.d = 4, .H = 2, .d_ff = 8, .act = (cg_act)i};
        ck_assert(ff && cg_tf_config_check(&c));
        cg_module_free(CG_MODULE(ff));
        cg_module_free(m);
        cg_release_all(3, want, got, mod);
    }
    ck_assert_str_eq(cg_act_info_of(CG_ACT_GELU_ERF, NULL)->gelu_approximate, "none");
    ck_assert_str_eq(cg_act_info_of(CG_ACT_GELU, NULL)->gelu_approximate, "tanh");
    for (int i = 0; i < CG_N_NORMS; i++) {
        const cg_norm_info *r = cg_norm_info_of((cg_norm_kind)i, "t");
        ck_assert_ptr_nonnull(r);
        norms[i] = r->name;
        cg_norm_kind back;
        ck_assert(cg_norm_kind_parse(r->name, &back) && back == (cg_norm_kind)i);
        cg_norm *n = cg_norm_new((cg_norm_kind)i, 4);
        ck_assert_str_eq(n->base.type, r->type);
        ck_assert(r->bias == (n->bias != NULL));
        cg_module_free(CG_MODULE(n));
    }
    char buf[160];
    ck_assert_str_eq(cg_act_names(buf, sizeof buf, "|"),
                     "relu|gelu|gelu_erf|silu|swiglu|geglu|tanh|sigmoid|mish|hardswish|"
                     "hardsigmoid|relu6|selu|softsign|logsigmoid|tanhshrink");
    ck_assert_str_eq(cg_norm_names(buf, sizeof buf, ", "), "layernorm, rmsnorm");
    ck_assert_str_eq(cg_act_names(buf, 7, "|"), "relu|g"); /* truncated to fit */
    cg_act a;
    cg_norm_kind nk;
    ck_assert(!cg_act_parse("swish", &a));
    ck_assert_str_eq(cg_last_error(),
                     "unknown activation 'swish' (choices: relu, gelu, gelu_erf, silu, "
                     "swiglu, geglu, tanh, sigmoid, mish, hardswish, hardsigmoid, relu6, "
                     "selu, softsign, logsigmoid, tanhshrink)");
    ck_assert(!cg_norm_kind_parse("batchnorm", &nk));
    ck_assert(lists_every(cg_last_error(), norms, CG_N_NORMS));
    /* an unknown value, in every place that takes one */
    CG_ASSERT_FAILS(cg_ff_new(4, 8, CG_N_ACTS, NULL), "FeedForward: unknown activation 16");
    ck_assert(lists_every(cg_last_error(), acts, CG_N_ACTS));
    CG_ASSERT_FAILS(cg_activation_new(CG_N_ACTS), "activation: unknown activation 16");
    ck_assert(lists_every(cg_last_error(), acts, CG_N_ACTS));
    CG_ASSERT_FAILS(cg_activation(x, (cg_act)-1), "unknown activation -1");
    CG_ASSERT_FAILS(cg_norm_new(CG_N_NORMS, 4), "norm: unknown norm 2");
    ck_assert(lists_every(cg_last_error(), norms, CG_N_NORMS));
    cg_tf_config c = {.d = 4, .H = 2, .d_ff = 8, .norm = CG_N_NORMS};
    ck_assert(!cg_tf_config_check(&c));
    ck_assert(lists_every(cg_last_error(), norms, CG_N_NORMS));
    ck_assert_str_eq(cg_act_name(CG_N_ACTS), "?");
    cg_release(x);
}
END_TEST

/* A module added twice (two names, two parents) is shared: freed once, its
 * parameters listed, optimised and saved once; the same module twice under
 * one name and cycles are refused. Under ASan any double free shows. */
static const char *tmp_path(const char *name); /* save and load, below */

START_TEST(test_shared_modules)
{
    cg_rng rng = cg_rng_new(3);
    cg_module *top = cg_module_new("Top");
    cg_linear *blk = cg_linear_new(3, 3, true, &rng);
    assert_ok(cg_module_add_child(top, "a", blk));
    assert_ok(cg_module_add_child(top, "b", blk)); /* same block, two names */
    cg_module *other = cg_module_add_child(top, "other", cg_module_new("Other"));
    assert_ok(other);
    assert_ok(cg_module_add_child(other, "c", blk)); /* and under another parent */
    ck_assert_int_eq(CG_MODULE(blk)->n_owners, 3);
    cg_param_list l = {0};
    ck_assert(cg_module_params(top, &l));
    ck_assert_int_eq(l.n, 2); /* one set of parameters, under the first name */
    ck_assert_str_eq(l.items[0].name, "a.weight");
    ck_assert_str_eq(l.items[1].name, "a.bias");
    cg_param_list_free(&l);
    ck_assert_int_eq(cg_module_num_params(top), 12);
    ck_assert_ptr_eq(cg_module_get_param(top, "b.weight"), blk->weight);
    ck_assert_ptr_eq(cg_module_get_param(top, "other.c.bias"), blk->bias);
    /* the same module again under a used name: refused, nothing freed */
    CG_ASSERT_FAILS(cg_module_add_child(top, "a", blk), "already a child");
    CG_ASSERT_FAILS(cg_module_add_child(top, "b", blk), "already a child");
    ck_assert_int_eq(CG_MODULE(blk)->n_owners, 3);
    /* cycles: refused, nothing freed */
    CG_ASSERT_FAILS(cg_module_add_child(other, "up", top), "cycle");
    CG_ASSERT_FAILS(cg_module_add_child(top, "self", top), "own child");
    /* save and load: the shared parameters once, under the first name */
    const char *path = tmp_path("shared.safetensors");
    ck_assert(cg_module_save(top, path, 0, NULL));
    cg_st_file *f = cg_st_open(path);
    assert_ok(f);
    ck_assert(cg_st_has(f, "a.weight"));
    ck_assert(!cg_st_has(f, "b.weight"));
    float w0 = cg_data(blk->weight)[0];
    cg_fill_(blk->weight, 0.0f);
    ck_assert(cg_module_load(top, f, NULL));
    ck_assert_float_eq(cg_data(blk->weight)[0], w0);
    cg_st_close(f);
    unlink(path);
    /* a NaN or Inf weight is refused at load, naming it, and nothing is
     * copied (issue 25: sampling printed one character forever) */
    for (int k = 0; k < 2; k++) {
        cg_data(blk->bias)[1] = k == 0 ? NAN : -INFINITY;
        ck_assert(cg_module_save(top, path, 0, NULL));
        cg_data(blk->bias)[1] = 0.5f;
        cg_fill_(blk->weight, 0.25f);
        f = cg_st_open(path);
        assert_ok(f);
        CG_ASSERT_FAILS(cg_module_load(top, f, NULL), k == 0 ? "'a.bias' holds nan at element 1"
                                                             : "'a.bias' holds -inf at element 1");
        ck_assert_float_eq(cg_data(blk->weight)[0], 0.25f);
        ck_assert_float_eq(cg_data(blk->bias)[1], 0.5f);
        cg_st_close(f);
        unlink(path);
    }
    /* freeing the parents frees the shared block exactly once */
    cg_module_free(top);

    /* a shared child outlives the first parent freed */
    cg_module *p1 = cg_module_new("P1"), *p2 = cg_module_new("P2");
    cg_linear *s = cg_linear_new(2, 2, false, &rng);
    assert_ok(cg_module_add_child(p1, "s", s));
    assert_ok(cg_module_add_child(p2, "s", s));
    cg_module_free(p1);
    ck_assert_int_eq(cg_module_num_params(p2), 4);
    cg_module_free(p2);
}
END_TEST

START_TEST(test_zero_grad_and_train_mode)
{
    cg_tf_config c = small_cfg(CG_NORM_RMSNORM, CG_ACT_RELU, true);
    cg_enc_stack *es = cg_enc_stack_new(2, &c, NULL);
    cg_module *m = CG_MODULE(es);
    cg_rng r = cg_rng_new(3);
    cg_tensor *x = cg_randn(&r, CG_SHAPE(1, 2, 6));
    cg_tensor *y = cg_enc_stack_forward(es, x, NULL);
    cg_tensor *s = cg_sum_all(y);
    ck_assert(cg_backward(s, NULL, false));
    cg_param_list l = {0};
    ck_assert(cg_module_params(m, &l));
    for (int i = 0; i < l.n; i++)
        ck_assert_msg(cg_grad(l.items[i].tensor) != NULL, "%s has no grad", l.items[i].name);
    cg_module_zero_grad(m);
    for (int i = 0; i < l.n; i++)
        ck_assert_ptr_null(cg_grad(l.items[i].tensor));
    cg_param_list_free(&l);
    cg_release_all(3, x, y, s);

    ck_assert(m->training && es->layers[1]->self_attn->base.training);
    cg_module_train(m, false);
    ck_assert(!m->training && !es->layers[1]->self_attn->base.training &&
              !es->layers[0]->ff->fc2->base.training && !es->ln_f->base.training);
    cg_module_train(m, true);
    ck_assert(es->layers[1]->ln2->base.training);
    cg_module_free(m);
}
END_TEST

/* ============================================================ init */
/* t's values have mean 0 and standard deviation sd, both within tol. */
static void assert_mean_std(const cg_tensor *t, double sd, double tol)
{
    float *v = cg_test_values(t);
    int64_t n = cg_numel(t);
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < n; i++) {
        s += v[i];
        s2 += (double)v[i] * v[i];
    }
    double mean = s / (double)n, got = sqrt(s2 / (double)n - mean * mean);
    ck_assert_msg(fabs(mean) < tol && fabs(got - sd) < tol, "mean %g std %g", mean, got);
    free(v);
}

/* Every |value| of t below bound, the largest above 0.9 * bound (a uniform
 * sample over the whole range), none NaN. */
static void assert_uniform(const cg_tensor *t, double bound)
{
    float *v = cg_test_values(t), mx = 0;
    for (int64_t i = 0; i < cg_numel(t); i++) {
        ck_assert_msg(fabsf(v[i]) <= (float)bound, "%g outside +-%g", (double)v[i], bound);
        mx = fabsf(v[i]) > mx ? fabsf(v[i]) : mx;
    }
    ck_assert_msg(mx > 0.9 * bound, "largest %g of bound %g", (double)mx, bound);
    free(v);
}

static void assert_all(const cg_tensor *t, float x)
{
    float *v = cg_test_values(t);
    for (int64_t i = 0; i < cg_numel(t); i++)
        ck_assert_float_eq(v[i], x);
    free(v);
}

/* PyTorch's defaults from our generator: the distributions, not PyTorch's
 * numbers (the meson test torch_init checks those, from cg_mt19937). */
START_TEST(test_reset_parameters)
{
    cg_rng r = cg_rng_new(3);
    cg_tf_config c = small_cfg(CG_NORM_LAYERNORM, CG_ACT_RELU, true);
    cg_module *root = cg_module_new("Root");
    cg_linear *lin = cg_module_add_child(root, "lin", cg_linear_new(50, 40, true, &r));
    cg_embed *emb = cg_module_add_child(root, "emb", cg_embed_new(100, 64, &r));
    cg_norm *ln = cg_module_add_child(root, "ln", cg_layernorm_new(8));
    cg_mha *mha = cg_module_add_child(root, "mha", cg_mha_new(16, 4, &r));
    cg_enc_stack *st = cg_module_add_child(root, "stack", cg_enc_stack_new(2, &c, &r));
    cg_linear *ad = cg_module_add_child(root, "ad", cg_linear_new(12, 10, true, &r));
    ck_assert_ptr_nonnull(st);
    cg_lora *lo = cg_lora_attach(ad, 4, 8.0f, 0.0f, &r);
    ck_assert_ptr_nonnull(lo);
    randomize(root, 9, 1.0f);
    ck_assert(cg_module_reset_parameters(root, &r));

    assert_uniform(lin->weight, 1 / sqrt(50.0)); /* kaiming_uniform_(a=sqrt(5)) */
    assert_uniform(lin->bias, 1 / sqrt(50.0));
    assert_mean_std(emb->weight, 1.0, 0.05); /* N(0, 1) */
    assert_all(ln->weight, 1.0f);
    assert_all(ln->bias, 0.0f);
    /* MultiheadAttention: xavier over the packed [3d, d], out_proj a Linear */
    assert_uniform(mha->q_proj->weight, sqrt(6.0 / (16 + 48)));
    assert_uniform(mha->v_proj->weight, sqrt(6.0 / (16 + 48)));
    assert_uniform(mha->o_proj->weight, 1 / sqrt(16.0));
    assert_all(mha->q_proj->bias, 0.0f);
    assert_all(mha->o_proj->bias, 0.0f);
    /* nn.TransformerEncoder: every layer a copy of the first */
    cg_param_list a = {0}, b = {0};
    ck_assert(cg_module_params(CG_MODULE(st->layers[0]), &a));
    ck_assert(cg_module_params(CG_MODULE(st->layers[1]), &b));
    ck_assert_int_eq(a.n, b.n);
    for (int i = 0; i < a.n; i++)
        ck_assert(!memcmp(cg_data(a.items[i].tensor), cg_data(b.items[i].tensor),
                          (size_t)cg_numel(a.items[i].tensor) * sizeof(float)));
    cg_param_list_free(&a);
    cg_param_list_free(&b);
    assert_uniform(st->layers[0]->ff->fc1->weight, 1 / sqrt(6.0));
    assert_all(st->ln_f->weight, 1.0f);
    /* LoRA as PEFT: A kaiming, B zero */
    assert_uniform(ad->weight, 1 / sqrt(12.0));
    assert_uniform(lo->lora_A->weight, 1 / sqrt(12.0));
    assert_all(lo->lora_B->weight, 0.0f);

    CG_ASSERT_REFUSED(!cg_module_reset_parameters(root, NULL), "rng is NULL");
    CG_ASSERT_REFUSED(!cg_module_reset_parameters_torch(root, NULL), "generator is NULL");
    CG_ASSERT_REFUSED(!cg_init_kaiming_uniform_(lin->bias, &r, sqrt(5.0)), "at least 2 dims");
    cg_mt19937 g;
    cg_mt19937_seed(&g, 1);
    cg_tensor *tr = cg_transpose(lin->weight, 0, 1);
    CG_ASSERT_REFUSED(!cg_uniform_torch_(tr, &g, -1.0f, 1.0f), "must be contiguous");
    CG_ASSERT_REFUSED(!cg_uniform_torch_(lin->bias, &g, 1.0f, -1.0f), "need lo <= hi");
    cg_release(tr);
    cg_module_free(root);
}
END_TEST

/* cg_init_skip: the initialisers check their arguments and leave the
 * tensor as it is; constructors leave their weights at zero; the
 * generator itself never moves. */
START_TEST(test_init_skip)
{
    cg_rng *skip = cg_init_skip();
    const cg_rng before = *skip;
    cg_tf_config c = small_cfg(CG_NORM_LAYERNORM, CG_ACT_RELU, true);
    cg_module *mods[] = {
        CG_MODULE(cg_linear_new(5, 3, true, skip)), CG_MODULE(cg_embed_new(7, 4, skip)),
        CG_MODULE(cg_mha_new(6, 2, skip)),          CG_MODULE(cg_enc_layer_new(&c, skip)),
        CG_MODULE(cg_dec_stack_new(2, &c, skip)),   CG_MODULE(cg_lm_block_new(&c, skip))};
    for (int i = 0; i < 6; i++) {
        ck_assert_msg(mods[i] != NULL, "%s", cg_last_error());
        cg_param_list l = {0};
        ck_assert(cg_module_params(mods[i], &l) && l.n > 0);
        for (int p = 0; p < l.n; p++) { /* norm weights 1, everything else 0 */
            const bool norm = strstr(l.items[p].name, "ln") && strstr(l.items[p].name, "weight");
            float *v = cg_test_values(l.items[p].tensor);
            for (int64_t j = 0; j < cg_numel(l.items[p].tensor); j++)
                ck_assert_msg(v[j] == (norm ? 1.0f : 0.0f), "module %d, %s[%lld] = %g", i,
                              l.items[p].name, (long long)j, (double)v[j]);
            free(v);
        }
        cg_param_list_free(&l);
        cg_module_free(mods[i]);
    }
    float x[6] = {1, -2, 3, 0.5f, 7, -1};
    cg_tensor *t = cg_from_data(CG_SHAPE(2, 3), x);
    ck_assert(cg_init_normal_(t, skip, 0.0f, 1.0f) && cg_init_uniform_(t, skip, -1.0f, 1.0f) &&
              cg_init_xavier_uniform_(t, skip, 1.0f) && cg_init_xavier_normal_(t, skip, 1.0f) &&
              cg_init_kaiming_uniform_(t, skip, 2.0));
    CG_ASSERT_TENSOR(t, x, 0, 0);
    ck_assert(!cg_init_normal_(t, skip, 0.0f, -1.0f)); /* the arguments are still checked */
    ck_assert(strstr(cg_last_error(), "finite std >= 0") != NULL);
    ck_assert(!cg_init_uniform_(t, skip, 1.0f, -1.0f));
    ck_assert(skip->seed == before.seed && skip->counter == before.counter);
    cg_release(t);
}
END_TEST

START_TEST(test_init)
{
    cg_rng r = cg_rng_new(11);
    cg_linear *l = cg_linear_new(200, 100, true, &r);
    assert_mean_std(l->weight, 0.02, 0.001);
    float *w;
    float *b = cg_test_values(l->bias);
    for (int i = 0; i < 100; i++)
        ck_assert_float_eq(b[i], 0.0f);
    free(b);

    /* Xavier uniform: bound a = sqrt(6 / (in + out)) */
    ck_assert(cg_init_xavier_uniform_(l->weight, &r, 1.0f));
    w = cg_test_values(l->weight);
    float a = (float)sqrt(6.0 / 300.0), mx = 0;
    for (int i = 0; i < 20000; i++) {
        ck_assert(fabsf(w[i]) <= a);
        mx = fabsf(w[i]) > mx ? fabsf(w[i]) : mx;
    }
    ck_assert(mx > 0.98f * a);
    free(w);
    ck_assert(cg_init_xavier_normal_(l->weight, &r, 2.0f));
    ck_assert(!cg_init_xavier_uniform_(l->bias, &r, 1.0f)); /* 1-D has no fans */
    ck_assert(strstr(cg_last_error(), "[100]") != NULL);
    cg_module_free(CG_MODULE(l));

    /* models.py init_params: norm weights one, biases zero, weights N(0, std) */
    cg_tf_config c = small_cfg(CG_NORM_LAYERNORM, CG_ACT_RELU, true);
    cg_enc_layer *e = cg_enc_layer_new(&c, NULL);
    randomize(CG_MODULE(e), 5, 1.0f);
    ck_assert(cg_module_init_params(CG_MODULE(e), &r, 0.5f));
    float one[6] = {1, 1, 1, 1, 1, 1}, zero[6] = {0};
    CG_ASSERT_TENSOR(e->ln1->weight, one, 0, 0);
    CG_ASSERT_TENSOR(e->ln2->bias, zero, 0, 0);
    CG_ASSERT_TENSOR(e->self_attn->o_proj->bias, zero, 0, 0);
    float *q = cg_test_values(e->ff->fc1->weight);
    double q2 = 0;
    for (int i = 0; i < 30; i++)
        q2 += (double)q[i] * q[i];
    ck_assert(sqrt(q2 / 30) > 0.25 && sqrt(q2 / 30) < 1.0);
    free(q);
    cg_module_free(CG_MODULE(e));

    /* same seed, same weights; NULL rng is seed 0 */
    cg_rng r1 = cg_rng_new(7), r2 = cg_rng_new(7);
    cg_mha *m1 = cg_mha_new(6, 3, &r1), *m2 = cg_mha_new(6, 3, &r2);
    float *w1 = cg_test_values(m1->v_proj->weight);
    CG_ASSERT_TENSOR(m2->v_proj->weight, w1, 0, 0);
    free(w1);
    cg_module_free(CG_MODULE(m1));
    cg_module_free(CG_MODULE(m2));
}
END_TEST

/* Arguments that make no distribution are refused and change nothing, as
 * torch.nn.init refuses them (uniform_: "from is out of bounds for float",
 * "expects to return a [from, to) range"; normal_: "expects std >= 0"):
 * a NaN or negative gain, an infinite bound, a non-finite mean or std.
 * They wrote NaN or infinite weights, or U(b, -b), and returned true. */
START_TEST(test_init_bad_arguments)
{
    cg_rng r = cg_rng_new(5);
    float x[6] = {1, -2, 3, 0.5f, 7, -1};
    cg_tensor *t = cg_from_data(CG_SHAPE(2, 3), x);
    const float bad_gain[] = {NAN, INFINITY, -1.0f};
    for (int i = 0; i < 3; i++) {
        CG_ASSERT_REFUSED(!cg_init_xavier_uniform_(t, &r, bad_gain[i]), "gain");
        CG_ASSERT_REFUSED(!cg_init_xavier_normal_(t, &r, bad_gain[i]), "gain");
    }
    CG_ASSERT_REFUSED(!cg_init_uniform_(t, &r, -INFINITY, 1.0f), "finite");
    CG_ASSERT_REFUSED(!cg_init_uniform_(t, &r, 0.0f, INFINITY), "finite");
    CG_ASSERT_REFUSED(!cg_init_uniform_(t, &r, NAN, 1.0f), "init uniform");
    CG_ASSERT_REFUSED(!cg_init_normal_(t, &r, 0.0f, INFINITY), "finite");
    CG_ASSERT_REFUSED(!cg_init_normal_(t, &r, NAN, 1.0f), "finite");
    CG_ASSERT_REFUSED(!cg_init_normal_(t, &r, INFINITY, 1.0f), "finite");
    CG_ASSERT_TENSOR(t, x, 0, 0);
    ck_assert(cg_init_xavier_uniform_(t, &r, 0.0f)); /* gain 0: zeros, as in PyTorch */
    float zero[6] = {0};
    CG_ASSERT_TENSOR(t, zero, 0, 0);
    cg_release(t);
}
END_TEST

/* ======================================================= save and load */
/* In the suite's scratch directory (cg_test_tmpdir), removed when the run
 * ends, passed or failed. */
static const char *tmp_path(const char *name) { return cg_test_path(name); }

START_TEST(test_save_load)
{
    cg_tf_config c = small_cfg(CG_NORM_LAYERNORM, CG_ACT_GELU, true);
    cg_rng r1 = cg_rng_new(1), r2 = cg_rng_new(2);
    cg_dec_stack *a = cg_dec_stack_new(2, &c, &r1), *b = cg_dec_stack_new(2, &c, &r2);
    randomize(CG_MODULE(a), 100, 0.3f);
    char path[128];
    snprintf(path, sizeof path, "%s", tmp_path("dec.safetensors"));
    const char *meta[] = {"model", "dec_stack", "d", "6"};
    ck_assert_msg(cg_module_save(CG_MODULE(a), path, 2, meta), "%s", cg_last_error());

    cg_st_file *f = cg_st_open(path);
    assert_ok(f);
    ck_assert_int_eq(cg_st_count(f), cg_module_num_param_tensors(CG_MODULE(a)));
    ck_assert_str_eq(cg_st_name(f, 0), "layers.0.self_attn.q_proj.weight");
    ck_assert_str_eq(cg_st_metadata(f, "model"), "dec_stack");
    ck_assert_str_eq(cg_st_metadata(f, "d"), "6");
    ck_assert_msg(cg_module_load(CG_MODULE(b), f, NULL), "%s", cg_last_error());
    cg_param_list la = {0}, lb = {0};
    ck_assert(cg_module_params(CG_MODULE(a), &la) && cg_module_params(CG_MODULE(b), &lb));
    for (int i = 0; i < la.n; i++) {
        float *v = cg_test_values(la.items[i].tensor);
        CG_ASSERT_TENSOR(lb.items[i].tensor, v, 0, 0);
        free(v);
        ck_assert(lb.items[i].tensor->requires_grad);
    }
    cg_st_close(f);

    /* with a prefix, through a writer */
    cg_st_writer *w = cg_st_writer_new();
    ck_assert(cg_module_write(CG_MODULE(a), w, "model.decoder."));
    ck_assert(cg_st_writer_save(w, tmp_path("prefixed.safetensors")));
    cg_st_writer_free(w);
    f = cg_st_open(tmp_path("prefixed.safetensors"));
    ck_assert(cg_st_has(f, "model.decoder.ln_f.bias"));
    randomize(CG_MODULE(b), 5, 1.0f);
    ck_assert(!cg_module_load(CG_MODULE(b), f, NULL)); /* names lack the prefix */
    ck_assert(strstr(cg_last_error(), "'layers.0.self_attn.q_proj.weight'") &&
              strstr(cg_last_error(), "missing"));
    ck_assert_msg(cg_module_load(CG_MODULE(b), f, "model.decoder."), "%s", cg_last_error());
    for (int i = 0; i < la.n; i++) {
        float *v = cg_test_values(la.items[i].tensor);
        CG_ASSERT_TENSOR(lb.items[i].tensor, v, 0, 0);
        free(v);
    }
    cg_st_close(f);
    cg_param_list_free(&la);
    cg_param_list_free(&lb);

    /* shape mismatch: clear error, and nothing is copied */
    cg_tf_config c2 = c;
    c2.d_ff = 7;
    cg_dec_stack *other = cg_dec_stack_new(2, &c2, NULL);
    float *before = cg_test_values(other->layers[0]->self_attn->q_proj->weight);
    f = cg_st_open(path);
    ck_assert(!cg_module_load(CG_MODULE(other), f, NULL));
    const char *err = cg_last_error();
    ck_assert_msg(strstr(err, "'layers.0.ff.fc1.weight'") && strstr(err, "[5, 6]") &&
                      strstr(err, "[7, 6]"),
                  "%s", err);
    CG_ASSERT_TENSOR(other->layers[0]->self_attn->q_proj->weight, before, 0, 0);
    free(before);
    cg_st_close(f);
    cg_module_free(CG_MODULE(other));

    /* loading the parameters of a smaller module from the same file works */
    cg_mha *m = cg_mha_new(6, 2, NULL);
    f = cg_st_open(path);
    ck_assert(cg_module_load(CG_MODULE(m), f, "layers.1.cross_attn."));
    cg_tensor *ref = cg_module_get_param(CG_MODULE(a), "layers.1.cross_attn.k_proj.bias");
    float *v = cg_test_values(ref);
    CG_ASSERT_TENSOR(m->k_proj->bias, v, 0, 0);
    free(v);
    cg_st_close(f);
    cg_module_free(CG_MODULE(m));

    ck_assert(!cg_module_save(CG_MODULE(a), tmp_path("no/such/dir.safetensors"), 0, NULL));
    cg_module_free(CG_MODULE(a));
    cg_module_free(CG_MODULE(b));
    unlink(path);
    unlink(tmp_path("prefixed.safetensors"));
}
END_TEST

/* Strict loading (issue 22): a file that lacks a parameter of the module, or
 * holds a tensor the module does not have, is refused with one message
 * listing both kinds, and the module is left as it was; non-strict (PyTorch's
 * strict=False) loads what matches and reports the rest. */
static cg_module *two_linears(const char *n1, const char *n2, int64_t out2, uint64_t seed)
{
    cg_rng r = cg_rng_new(seed);
    cg_module *m = cg_module_new("Pair");
    ck_assert(cg_module_add_child(m, n1, cg_linear_new(3, 2, true, &r)));
    ck_assert(cg_module_add_child(m, n2, cg_linear_new(2, out2, true, &r)));
    return m;
}

static void assert_untouched(cg_module *m, const char *name, float v0)
{
    ck_assert_float_eq(cg_data(cg_module_get_param(m, name))[0], v0);
}

/* The weights' kept copies (core/weight_cache.c) follow every way a whole
 * model's weights change: an LM block and a head, their no-grad output
 * (fp32 panels, then bf16 copies where the CPU has them) read from the
 * cache after each change, equal to the output with the cache off: a load
 * into the live model, LoRA merge, unmerge and load onto a base, and a tie
 * made after the weights were packed. */
static cg_tensor *kept_out(cg_module *root, cg_tensor *x, bool cached)
{
    const size_t limit = cg_weight_cache_stats().limit;
    if (!cached)
        cg_weight_cache_limit(0);
    cg_no_grad_begin();
    cg_tensor *h = cg_lm_block_forward((cg_lm_block *)root->children[0].module, x,
                                       &(cg_attn_mask){.causal = true});
    cg_tensor *y = cg_linear_forward((cg_linear *)root->children[1].module, h);
    cg_no_grad_end();
    cg_weight_cache_limit(limit);
    cg_release(h);
    ck_assert_msg(y != NULL, "%s", cg_last_error());
    return y;
}

static cg_module *kept_model(uint64_t seed)
{
    cg_rng r = cg_rng_new(seed);
    const cg_tf_config cfg = {.d = 32,
                              .H = 4,
                              .d_ff = 64,
                              .norm = CG_NORM_LAYERNORM,
                              .act = CG_ACT_GELU,
                              .norm_first = true};
    cg_module *m = cg_module_new("M");
    ck_assert(cg_module_add_child(m, "blk", cg_lm_block_new(&cfg, &r)) &&
              cg_module_add_child(m, "head", cg_linear_new(32, 24, true, &r)));
    return m;
}

/* the cached output (read from copies packed before the change) equals
 * the uncached one, and differs from before's; the copies packed again */
static cg_tensor *kept_check(cg_module *m, cg_tensor *x, cg_tensor *before, const char *what)
{
    cg_tensor *a = kept_out(m, x, true), *b = kept_out(m, x, true), *want = kept_out(m, x, false);
    float *va = cg_test_values(a), *vb = cg_test_values(b), *vw = cg_test_values(want);
    const size_t bytes = sizeof(float) * (size_t)cg_numel(want);
    ck_assert_msg(!memcmp(va, vw, bytes) && !memcmp(vb, vw, bytes), "%s: a stale copy", what);
    if (before) {
        float *v0 = cg_test_values(before);
        ck_assert_msg(memcmp(v0, vw, bytes) != 0, "%s changed nothing", what);
        free(v0);
    }
    free(va);
    free(vb);
    free(vw);
    cg_release_all(3, a, b, before);
    cg_release(kept_out(m, x, true)); /* the copies made again (the limit of 0 freed them) */
    return want;
}

START_TEST(test_kept_weights_follow_changes)
{
    const bool bf16 =
        cg_gemm_path_available(CG_GEMM_BF16) || cg_gemm_path_available(CG_GEMM_BF16_EMULATED);
    char dir[PATH_MAX], f_other[PATH_MAX + 32], f_lora[PATH_MAX + 32];
    cg_test_mkdtemp(dir, sizeof dir, "kept");
    snprintf(f_other, sizeof f_other, "%s/other.safetensors", dir);
    snprintf(f_lora, sizeof f_lora, "%s/lora.safetensors", dir);
    cg_rng r = cg_rng_new(8);
    cg_tensor *x = cg_randn(&r, CG_SHAPE(2, 12, 32));
    for (int p = 0; p < 1 + bf16; p++) {
        cg_set_matmul_precision(p ? CG_PRECISION_BF16 : CG_PRECISION_FP32);
        cg_module *m = kept_model(1), *other = kept_model(2), *base = kept_model(1);
        ck_assert(cg_module_save(other, f_other, 0, NULL));
        cg_tensor *y = kept_check(m, x, NULL, "fresh");
        y = kept_check(m, x, (cg_module_load_file(m, f_other), y), "load");
        const char *tg[] = {"q_proj", "fc1", "head"};
        const cg_lora_config cfg = {.r = 4, .alpha = 8, .n_targets = 3, .targets = tg};
        ck_assert(cg_lora_attach_all(m, &cfg, &r) == 3);
        cg_param_list l = {0};
        ck_assert(cg_module_params(m, &l));
        for (int i = 0; i < l.n; i++) /* B = 0 as attached: nonzero, so merging changes W */
            if (strstr(l.items[i].name, "lora_B"))
                ck_assert(cg_normal_(l.items[i].tensor, &r, 0.0f, 0.5f));
        cg_param_list_free(&l);
        y = kept_check(m, x, y, "adapters");
        cg_release(kept_out(base, x, true)); /* base's copies packed before the adapters */
        ck_assert(cg_lora_save(m, f_lora) && cg_lora_merge_all(m) == 3);
        /* W changed, the output barely: no "before" next */
        cg_release(kept_check(m, x, y, "merge"));
        ck_assert(cg_lora_unmerge_all(m) == 3);
        cg_release(kept_check(m, x, NULL, "unmerge"));
        ck_assert(cg_lora_load(base, f_lora));
        cg_release(kept_check(base, x, NULL, "LoRA load"));
        y = kept_check(other, x, NULL, "other");
        ck_assert(cg_module_tie(other, "blk.attn.k_proj.weight", "blk.attn.q_proj.weight"));
        cg_release(kept_check(other, x, y, "tie"));
        cg_module_free(m);
        cg_module_free(other);
        cg_module_free(base);
    }
    cg_set_matmul_precision(CG_PRECISION_FP32);
    cg_release(x);
    cg_test_rm_tree(dir);
}
END_TEST

START_TEST(test_load_strict)
{
    cg_module *src = two_linears("a", "b", 2, 1);
    const char *path = tmp_path("strict.safetensors");
    ck_assert(cg_module_save(src, path, 0, NULL));
    cg_st_file *f = cg_st_open(path);
    assert_ok(f);
    float want = cg_data(cg_module_get_param(src, "a.weight"))[0];

    /* unexpected keys: the module lacks "b" */
    cg_rng r = cg_rng_new(9);
    cg_module *fewer = cg_module_new("One");
    ck_assert(cg_module_add_child(fewer, "a", cg_linear_new(3, 2, true, &r)));
    float v0 = cg_data(cg_module_get_param(fewer, "a.weight"))[0];
    CG_ASSERT_FAILS(cg_module_load(fewer, f, NULL),
                    "2 unexpected tensors in the file: 'b.weight', 'b.bias'");
    ck_assert(!strstr(cg_last_error(), "missing"));
    assert_untouched(fewer, "a.weight", v0);

    /* missing keys: the module has "c" too */
    cg_module *more = two_linears("a", "b", 2, 2);
    ck_assert(cg_module_add_child(more, "c", cg_linear_new(2, 2, true, &r)));
    v0 = cg_data(cg_module_get_param(more, "a.weight"))[0];
    CG_ASSERT_FAILS(cg_module_load(more, f, NULL),
                    "2 parameters missing from the file: 'c.weight', 'c.bias'");
    ck_assert(!strstr(cg_last_error(), "unexpected"));
    assert_untouched(more, "a.weight", v0);

    /* both, in one message */
    cg_module *both = two_linears("a", "c", 2, 3);
    v0 = cg_data(cg_module_get_param(both, "a.weight"))[0];
    float c0 = cg_data(cg_module_get_param(both, "c.weight"))[0];
    CG_ASSERT_FAILS(cg_module_load(both, f, NULL),
                    "missing from the file: 'c.weight', 'c.bias'; "
                    "2 unexpected tensors in the file: 'b.weight', 'b.bias'");
    assert_untouched(both, "a.weight", v0);

    /* a refused strict load gives its lists too */
    cg_load_keys refused = {0};
    CG_ASSERT_FAILS(cg_module_load_ex(both, f, &(cg_load_options){.keys = &refused}),
                    "missing from the file");
    ck_assert_int_eq(refused.n_missing, 2);
    ck_assert_str_eq(refused.missing[0], "c.weight");
    ck_assert_int_eq(refused.n_unexpected, 2);
    ck_assert_str_eq(refused.unexpected[1], "b.bias");
    cg_load_keys_free(&refused);
    assert_untouched(both, "a.weight", v0);

    /* non-strict: loads what matches, returns the lists */
    cg_load_keys keys = {0};
    cg_load_options o = {.non_strict = true, .keys = &keys};
    ck_assert_msg(cg_module_load_ex(both, f, &o), "%s", cg_last_error());
    assert_untouched(both, "a.weight", want);
    assert_untouched(both, "c.weight", c0);
    ck_assert_int_eq(keys.n_missing, 2);
    ck_assert_str_eq(keys.missing[0], "c.weight");
    ck_assert_str_eq(keys.missing[1], "c.bias");
    ck_assert_int_eq(keys.n_unexpected, 2);
    ck_assert_str_eq(keys.unexpected[0], "b.weight");
    ck_assert_str_eq(keys.unexpected[1], "b.bias");
    cg_load_keys_free(&keys);
    ck_assert_ptr_null(keys.missing);
    /* a strict success reports empty lists */
    cg_module *same = two_linears("a", "b", 2, 4);
    o = (cg_load_options){.keys = &keys};
    ck_assert(cg_module_load_ex(same, f, &o));
    ck_assert_int_eq(keys.n_missing + keys.n_unexpected, 0);
    cg_load_keys_free(&keys);

    /* a shape mismatch fails, strict or not, and copies nothing */
    cg_module *wide = two_linears("a", "b", 5, 5);
    v0 = cg_data(cg_module_get_param(wide, "a.weight"))[0];
    o = (cg_load_options){.non_strict = true};
    CG_ASSERT_FAILS(cg_module_load_ex(wide, f, &o),
                    "'b.weight' has shape [2, 2] in the file but the model expects [5, 2]");
    assert_untouched(wide, "a.weight", v0);
    cg_st_close(f);

    /* extra tensors a caller expects (a checkpoint's optimizer state, a
     * tokenizer) are named, not accepted blindly; long lists are cut */
    cg_st_writer *w = cg_st_writer_new();
    ck_assert(cg_module_write(src, w, NULL));
    ck_assert(cg_st_add_u8(w, "tokenizer.spm", 3, "abc"));
    for (int i = 0; i < 20; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "optim.t%d", i);
        ck_assert(cg_st_add_f32(w, nm, cg_module_get_param(src, "b.bias")));
    }
    ck_assert(cg_st_writer_save(w, path));
    cg_st_writer_free(w);
    f = cg_st_open(path);
    assert_ok(f);
    CG_ASSERT_FAILS(cg_module_load(same, f, NULL),
                    "21 unexpected tensors in the file: "
                    "'tokenizer.spm', 'optim.t0', 'optim.t1', 'optim.t2', 'optim.t3', 'optim.t4', "
                    "'optim.t5', 'optim.t6' ... and 13 more");
    const char *const ign[] = {"optim.*", "tokenizer.spm"};
    o = (cg_load_options){.n_ignore = 2, .ignore = ign, .keys = &keys};
    ck_assert_msg(cg_module_load_ex(same, f, &o), "%s", cg_last_error());
    ck_assert_int_eq(keys.n_missing + keys.n_unexpected, 0);
    cg_load_keys_free(&keys);
    const char *const ign1[] = {"optim.*"};
    o = (cg_load_options){.n_ignore = 1, .ignore = ign1};
    CG_ASSERT_FAILS(cg_module_load_ex(same, f, &o),
                    "1 unexpected tensor in the file: 'tokenizer.spm'");
    /* a name without '*' is one tensor's, not a prefix */
    const char *const ign2[] = {"optim.*", "tokenizer.sp"};
    o = (cg_load_options){.n_ignore = 2, .ignore = ign2};
    CG_ASSERT_FAILS(cg_module_load_ex(same, f, &o),
                    "1 unexpected tensor in the file: 'tokenizer.spm'");
    cg_st_close(f);

    cg_module_free(src);
    cg_module_free(fewer);
    cg_module_free(more);
    cg_module_free(both);
    cg_module_free(same);
    cg_module_free(wide);
    unlink(path);
}
END_TEST

/* ====================================================== forward values */
START_TEST(test_linear_forward)
{
    cg_rng r = cg_rng_new(4);
    cg_linear *l = cg_linear_new(5, 3, true, NULL);
    randomize(CG_MODULE(l), 9, 1.0f);
    cg_tensor *x = cg_randn(&r, CG_SHAPE(2, 4, 5));
    cg_tensor *y = cg_linear_forward(l, x);
    assert_ok(y);
    ck_assert_int_eq(y->ndim, 3);
    ck_assert_int_eq(y->shape[2], 3);
    float *xv = cg_test_values(x);
    double ref[32];
    float reff[32];
    naive_linear(xv, 8, l, ref);
    to_float(ref, reff, 24);
    CG_ASSERT_TENSOR(y, reff, 1e-5, 1e-5);
    cg_release(y);

    /* a transposed (non-contiguous) input gives the same */
    cg_tensor *xt_store = cg_randn(&r, CG_SHAPE(5, 3));
    cg_tensor *xt = cg_view_transpose(xt_store, 0, 1); /* [3, 5] */
    float *xtv = cg_test_values(xt);
    naive_linear(xtv, 3, l, ref);
    to_float(ref, reff, 9);
    y = cg_linear_forward(l, xt);
    CG_ASSERT_TENSOR(y, reff, 1e-5, 1e-5);
    cg_release(y);

    /* 1-D input */
    cg_tensor *x1 = cg_view_select(x, 0, 1);
    cg_tensor *x11 = cg_view_select(x1, 0, 2);
    y = cg_linear_forward(l, x11);
    assert_ok(y);
    ck_assert_int_eq(y->ndim, 1);
    naive_linear(xv + (4 + 2) * 5, 1, l, ref);
    to_float(ref, reff, 3);
    CG_ASSERT_TENSOR(y, reff, 1e-5, 1e-5);
    cg_release(y);

    /* no bias */
    cg_linear *nb = cg_linear_new(5, 2, false, NULL);
    randomize(CG_MODULE(nb), 3, 1.0f);
    y = cg_linear_forward(nb, x);
    naive_linear(xv, 8, nb, ref);
    to_float(ref, reff, 16);
    CG_ASSERT_TENSOR(y, reff, 1e-5, 1e-5);
    cg_release(y);

    /* functional form with a tied weight (the output head of the zoo) */
    cg_embed *emb = cg_embed_new(4, 5, NULL);
    cg_linear tied = {.in_features = 5, .out_features = 4, .weight = emb->weight};
    y = cg_linear_fn(x, emb->weight, NULL);
    naive_linear(xv, 8, &tied, ref);
    to_float(ref, reff, 32);
    CG_ASSERT_TENSOR(y, reff, 1e-5, 1e-5);
    cg_release(y);
    CG_ASSERT_FAILS(cg_linear_fn(x, emb->weight, l->bias), "bias [3]");
    cg_module_free(CG_MODULE(emb));

    CG_ASSERT_FAILS(cg_linear_forward(l, xt_store), "in_features 5");
    ck_assert_ptr_null(cg_linear_forward(l, NULL));
    free(xv);
    free(xtv);
    cg_release_all(5, x, xt_store, xt, x1, x11);
    cg_module_free(CG_MODULE(l));
    cg_module_free(CG_MODULE(nb));
}
END_TEST

START_TEST(test_embedding_forward)
{
    cg_embed *e = cg_embed_new(10, 3, NULL);
    float *w = cg_test_values(e->weight);
    const int64_t ids[6] = {0, 9, 3, 3, 7, 1};
    cg_tensor *y = cg_embed_forward(e, cg_test_ids_nd(CG_SHAPE(2, 3), ids));
    assert_ok(y);
    ck_assert_int_eq(y->ndim, 3);
    ck_assert_int_eq(y->shape[0], 2);
    ck_assert_int_eq(y->shape[1], 3);
    ck_assert_int_eq(y->shape[2], 3);
    float expect[18];
    for (int i = 0; i < 6; i++)
        for (int c = 0; c < 3; c++)
            expect[i * 3 + c] = w[ids[i] * 3 + c];
    CG_ASSERT_TENSOR(y, expect, 0, 0);
    cg_release(y);

    const int64_t bad[4] = {1, 2, 10, 0};
    CG_ASSERT_FAILS(cg_embed_forward(e, cg_test_ids(4, bad)), "embedding: index_select: id 10");
    ck_assert(strstr(cg_last_error(), "[0, 10)") != NULL);
    ck_assert(strstr(cg_last_error(), "position 2") != NULL);
    const int64_t neg[2] = {-1, 0};
    CG_ASSERT_FAILS(cg_embed_forward(e, cg_test_ids_nd(CG_SHAPE(1, 2), neg)), "id -1");
    /* int32 ids: the bits of int64's (nn.Embedding takes both); another
     * dtype refused by name, never read as ids */
    cg_tensor *t32 = cg_to(cg_test_ids(4, ids), CG_I32);
    cg_tensor *y32 = cg_embed_forward(e, t32);
    ck_assert(y32 != NULL);
    CG_ASSERT_TENSOR(y32, expect, 0, 0);
    cg_tensor *tf = cg_ones(CG_SHAPE(2));
    CG_ASSERT_REFUSED(cg_embed_forward(e, tf) == NULL,
                      "Embedding: argument 'ids' is float32, expected int64 or int32");
    cg_release_all(3, t32, y32, tf);
    free(w);
    cg_module_free(CG_MODULE(e));
}
END_TEST

START_TEST(test_norm_forward)
{
    cg_rng r = cg_rng_new(8);
    for (int kind = 0; kind < 2; kind++) {
        cg_norm *n = cg_norm_new((cg_norm_kind)kind, 7);
        randomize(CG_MODULE(n), 21, 1.0f);
        cg_tensor *x = cg_randn(&r, CG_SHAPE(3, 7));
        cg_tensor *xs = cg_muls(x, 3.0f);
        cg_tensor *xx = cg_adds(xs, 0.5f);
        cg_tensor *y = cg_norm_forward(n, xx);
        assert_ok(y);
        float *xv = cg_test_values(xx), *w = cg_test_values(n->weight);
        float *b = n->bias ? cg_test_values(n->bias) : NULL;
        float expect[21];
        for (int i = 0; i < 3; i++) {
            double mean = 0, ms = 0, var = 0;
            for (int j = 0; j < 7; j++) {
                mean += xv[i * 7 + j] / 7.0;
                ms += (double)xv[i * 7 + j] * xv[i * 7 + j] / 7.0;
            }
            for (int j = 0; j < 7; j++)
                var += (xv[i * 7 + j] - mean) * (xv[i * 7 + j] - mean) / 7.0;
            for (int j = 0; j < 7; j++) {
                double v = kind == CG_NORM_LAYERNORM
                               ? (xv[i * 7 + j] - mean) / sqrt(var + 1e-5) * w[j] + b[j]
                               : xv[i * 7 + j] / sqrt(ms + 1e-5) * w[j];
                expect[i * 7 + j] = (float)v;
            }
        }
        CG_ASSERT_TENSOR(y, expect, 1e-5, 1e-5);
        cg_tensor *x6 = cg_randn(&r, CG_SHAPE(2, 6));
        CG_ASSERT_FAILS(cg_norm_forward(n, x6), "dim 7");
        cg_release(x6);
        free(xv);
        free(w);
        free(b);
        cg_release_all(4, x, xs, xx, y);
        cg_module_free(CG_MODULE(n));
    }
}
END_TEST

/* cg_norm_new_opts: nn.LayerNorm(bias=False) keeps its weight alone,
 * elementwise_affine=False neither, for both kinds; each is the default
 * module with a zero bias or a unit weight, through cg_norm_add_forward too,
 * and its gradients check; eps is the one given; a bad eps is refused. */
START_TEST(test_norm_options)
{
    cg_rng r = cg_rng_new(81);
    for (int kind = 0; kind < 2; kind++) {
        for (int v = 0; v < 2; v++) {
            cg_norm_opts o = cg_norm_opts_default();
            o.eps = 1e-2f;
            if (v == 0)
                o.bias = false;
            else
                o.elementwise_affine = false;
            cg_norm *n = cg_norm_new_opts((cg_norm_kind)kind, 6, &o);
            assert_ok(n);
            ck_assert(n->bias == NULL && (n->weight != NULL) == (v == 0));
            ck_assert_int_eq(cg_module_num_params(CG_MODULE(n)), v == 0 ? 6 : 0);
            randomize(CG_MODULE(n), 5, 1.0f);
            /* the default module with the same weight (or ones), bias 0 */
            cg_norm *full = cg_norm_new((cg_norm_kind)kind, 6);
            full->eps = 1e-2f;
            cg_no_grad_begin();
            ck_assert(!n->weight || cg_copy_(full->weight, n->weight));
            cg_no_grad_end();
            cg_tensor *x = randn_leaf(&r, CG_SHAPE(3, 6)), *y = randn_leaf(&r, CG_SHAPE(3, 6));
            cg_tensor *a = cg_norm_forward(n, x), *b = cg_norm_forward(full, x);
            float *bv = cg_test_values(b);
            CG_ASSERT_TENSOR(a, bv, 1e-6, 1e-6);
            free(bv);
            cg_tensor *a2 = cg_norm_add_forward(n, x, y), *b2 = cg_norm_add_forward(full, x, y);
            bv = cg_test_values(b2);
            CG_ASSERT_TENSOR(a2, bv, 1e-6, 1e-6);
            free(bv);
            fctx c = {.m = CG_MODULE(n), .kind = K_NORM};
            gradcheck_module(&c, 1, &x, 1e-3, 1e-2);
            cg_release_all(6, x, y, a, b, a2, b2);
            cg_module_free(CG_MODULE(full));
            cg_module_free(CG_MODULE(n));
        }
    }
    /* eps: the one given, against a hand computation of one row */
    cg_norm_opts o = cg_norm_opts_default();
    o.eps = 0.5f;
    o.elementwise_affine = false;
    cg_norm *n = cg_norm_new_opts(CG_NORM_RMSNORM, 2, &o);
    cg_tensor *x = cg_from_data(CG_SHAPE(1, 2), (const float[]){1.0f, 2.0f});
    cg_tensor *y = cg_norm_forward(n, x);
    const double rs = 1 / sqrt((1.0 + 4.0) / 2 + 0.5);
    CG_ASSERT_TENSOR(y, ((const float[]){(float)rs, (float)(2 * rs)}), 1e-6, 1e-6);
    cg_release_all(2, x, y);
    cg_module_free(CG_MODULE(n));
    const float bad[] = {-1e-5f, NAN, INFINITY};
    for (int i = 0; i < 3; i++) {
        o.eps = bad[i];
        CG_ASSERT_FAILS(cg_norm_new_opts(CG_NORM_LAYERNORM, 4, &o), "LayerNorm: eps must be");
    }
    /* the default options are PyTorch's, and NULL means them */
    o = cg_norm_opts_default();
    ck_assert(o.eps == 1e-5f && o.elementwise_affine && o.bias);
    n = cg_norm_new_opts(CG_NORM_LAYERNORM, 3, NULL);
    ck_assert(n->weight && n->bias && n->eps == 1e-5f);
    cg_module_free(CG_MODULE(n));
}
END_TEST

START_TEST(test_dropout_train_eval)
{
    cg_drop *d = cg_drop_new(0.5f, NULL);
    cg_tensor *x = cg_full(CG_SHAPE(4000), 3.0f);
    cg_tensor *y = cg_drop_forward(d, x);
    float *v = cg_test_values(y);
    int zeros = 0;
    for (int i = 0; i < 4000; i++) {
        ck_assert(v[i] == 0.0f || v[i] == 6.0f);
        zeros += v[i] == 0.0f;
    }
    ck_assert_msg(zeros > 1800 && zeros < 2200, "%d zeros", zeros);
    free(v);
    /* the next call draws a different mask */
    cg_tensor *y2 = cg_drop_forward(d, x);
    float *v2 = cg_test_values(y2), *v1 = cg_test_values(y);
    ck_assert(memcmp(v1, v2, 4000 * sizeof(float)) != 0);
    free(v1);
    free(v2);
    /* reseeding reproduces the first mask */
    d->own_rng = cg_rng_new(0);
    cg_tensor *y3 = cg_drop_forward(d, x);
    v1 = cg_test_values(y);
    CG_ASSERT_TENSOR(y3, v1, 0, 0);
    free(v1);
    /* eval: identity */
    cg_module_train(CG_MODULE(d), false);
    cg_tensor *ye = cg_drop_forward(d, x);
    float *xv = cg_test_values(x);
    CG_ASSERT_TENSOR(ye, xv, 0, 0);
    free(xv);
    cg_release_all(5, x, y, y2, y3, ye);
    cg_module_free(CG_MODULE(d));

    /* a borrowed generator is used (and advanced) */
    cg_rng shared = cg_rng_new(5);
    cg_drop *d2 = cg_drop_new(0.25f, &shared);
    ck_assert_ptr_eq(d2->rng, &shared);
    cg_tensor *o = cg_ones(CG_SHAPE(10));
    uint64_t before = shared.counter;
    cg_tensor *z = cg_drop_forward(d2, o);
    assert_ok(z);
    ck_assert(shared.counter != before);
    cg_release_all(2, o, z);
    cg_module_free(CG_MODULE(d2));

    /* p = 1, as nn.Dropout(1.0) and F.dropout(x, 1.0) take it (the module
     * refused it, cg_dropout took it): zeros in training, the gradient
     * zero too; the identity in eval */
    cg_drop *d1 = cg_drop_new(1.0f, NULL);
    ck_assert_msg(d1 != NULL, "%s", cg_last_error());
    cg_tensor *w = cg_requires_grad(cg_full(CG_SHAPE(6), 3.0f), true);
    cg_tensor *zy = cg_drop_forward(d1, w), *zs = cg_sum_all(zy);
    ck_assert_msg(zs && cg_backward(zs, NULL, false), "%s", cg_last_error());
    CG_ASSERT_TENSOR(zy, ((const float[]){0, 0, 0, 0, 0, 0}), 0, 0);
    CG_ASSERT_TENSOR(cg_grad(w), ((const float[]){0, 0, 0, 0, 0, 0}), 0, 0);
    cg_module_train(CG_MODULE(d1), false);
    cg_tensor *ze = cg_drop_forward(d1, w);
    CG_ASSERT_TENSOR(ze, ((const float[]){3, 3, 3, 3, 3, 3}), 0, 0);
    cg_release_all(4, w, zy, zs, ze);
    cg_module_free(CG_MODULE(d1));
}
END_TEST

START_TEST(test_posenc)
{
    /* odd d against PyTorch's sinusoidal_pe(7, 5) */
    cg_tensor *pe = cg_sinusoidal_pe(7, 5);
    CG_ASSERT_TENSOR(pe, ref_pe_7_5, 0, 0);
    cg_release(pe);
    /* even d against the formula */
    pe = cg_sinusoidal_pe(50, 8);
    float expect[400];
    for (int p = 0; p < 50; p++)
        for (int i = 0; i < 4; i++) {
            double ang = p / pow(10000.0, 2.0 * i / 8.0);
            expect[p * 8 + 2 * i] = (float)sin(ang);
            expect[p * 8 + 2 * i + 1] = (float)cos(ang);
        }
    CG_ASSERT_TENSOR(pe, expect, 0, 0);
    cg_release(pe);

    cg_posenc *p = cg_posenc_new(50, 8);
    cg_tensor *x = cg_zeros(CG_SHAPE(2, 3, 8));
    cg_tensor *y = cg_posenc_forward(p, x);
    float e2[48];
    for (int b = 0; b < 2; b++)
        memcpy(e2 + b * 24, expect, 24 * sizeof(float));
    CG_ASSERT_TENSOR(y, e2, 0, 0);
    cg_tensor *rows = cg_posenc_rows(p, 10, 2);
    CG_ASSERT_TENSOR(rows, expect + 80, 0, 0);
    cg_release_all(3, x, y, rows);
    x = cg_zeros(CG_SHAPE(1, 51, 8));
    CG_ASSERT_FAILS(cg_posenc_forward(p, x), "exceeds max_len 50");
    CG_ASSERT_FAILS(cg_posenc_rows(p, 49, 2), "max_len 50");
    cg_release(x);
    /* max_len positions exactly: the last rows are there */
    x = cg_zeros(CG_SHAPE(1, 50, 8));
    y = cg_posenc_forward(p, x);
    ck_assert_msg(y != NULL, "T = max_len refused: %s", cg_last_error());
    CG_ASSERT_TENSOR(y, expect, 0, 0);
    rows = cg_posenc_rows(p, 48, 2);
    ck_assert_msg(rows != NULL, "rows [48, 50) refused: %s", cg_last_error());
    CG_ASSERT_TENSOR(rows, expect + 384, 0, 0);
    cg_release_all(3, x, y, rows);
    cg_module_free(CG_MODULE(p));
}
END_TEST

START_TEST(test_ff_forward)
{
    cg_ff *f = cg_ff_new(6, 5, CG_ACT_GELU, NULL);
    fill_formula(CG_MODULE(f));
    cg_tensor *x = formula_input(CG_SHAPE(2, 3, 6), 0.9, 0.3, false);
    cg_tensor *y = cg_ff_forward(f, x);
    CG_ASSERT_TENSOR(y, ref_ff_gelu, 1e-5, 1e-4);
    cg_release(y);
    /* relu against loops */
    f->act = CG_ACT_RELU;
    y = cg_ff_forward(f, x);
    float *xv = cg_test_values(x);
    double h[30], o[36];
    float hf[30], of[36];
    naive_linear(xv, 6, f->fc1, h);
    for (int i = 0; i < 30; i++)
        hf[i] = h[i] > 0 ? (float)h[i] : 0.0f;
    naive_linear(hf, 6, f->fc2, o);
    to_float(o, of, 36);
    CG_ASSERT_TENSOR(y, of, 1e-5, 1e-4);
    free(xv);
    cg_release_all(2, x, y);
    cg_module_free(CG_MODULE(f));
}
END_TEST

START_TEST(test_mha_forward_naive)
{
    /* self-attention, d=6 H=2, causal + key padding + a [H,1,Tk] mask */
    cg_rng r = cg_rng_new(17);
    cg_mha *m = cg_mha_new(6, 2, NULL);
    randomize(CG_MODULE(m), 4, 0.5f);
    const int64_t B = 2, T = 4;
    cg_tensor *x = cg_randn(&r, CG_SHAPE(B, T, 6));
    float *xv = cg_test_values(x);
    const uint8_t pad[8] = {0, 0, 0, 0, 0, 0, 0, 1};
    const float mh[8] = {0, 0, 0, 0, 0, 1, 0, 0}; /* head 1 may not see key 1 */
    const uint8_t mb[8] = {0, 0, 0, 0, 0, 1, 0, 0};
    cg_tensor *mask = cg_test_mask(CG_SHAPE(1, 2, 1, 4), mb); /* [1, H, 1, Tk] */
    const cg_tensor *tpad = cg_test_mask(CG_SHAPE(2, 4), pad);
    double ref[48], wref[64];
    float reff[48], wf[64];
    struct {
        bool causal;
        const uint8_t *pad;
        cg_tensor *mask;
    } cases[4] = {{false, NULL, NULL}, {true, NULL, NULL}, {false, pad, NULL}, {true, pad, mask}};
    const cg_tensor *tpads[4] = {NULL, NULL, tpad, tpad};
    for (int c = 0; c < 4; c++) {
        cg_tensor *w = NULL;
        cg_tensor *y = cg_mha_forward(m, x, x, cases[c].causal, tpads[c], cases[c].mask, &w);
        assert_ok(y);
        naive_mha(m, xv, xv, B, T, T, cases[c].causal, cases[c].pad, cases[c].mask ? mh : NULL, ref,
                  wref);
        to_float(ref, reff, 48);
        to_float(wref, wf, 64);
        CG_ASSERT_TENSOR(y, reff, 1e-5, 1e-4);
        CG_ASSERT_TENSOR(w, wf, 1e-6, 1e-4);
        ck_assert(!w->requires_grad && w->node == NULL);
        cg_release_all(2, y, w);
    }
    /* T = 1, H = 1 */
    cg_mha *m1 = cg_mha_new(6, 1, NULL);
    randomize(CG_MODULE(m1), 5, 0.5f);
    cg_tensor *x1 = cg_randn(&r, CG_SHAPE(3, 1, 6));
    float *x1v = cg_test_values(x1);
    cg_tensor *y1 = cg_mha_forward(m1, x1, x1, true, NULL, NULL, NULL);
    naive_mha(m1, x1v, x1v, 3, 1, 1, true, NULL, NULL, ref, NULL);
    to_float(ref, reff, 18);
    CG_ASSERT_TENSOR(y1, reff, 1e-5, 1e-4);
    free(x1v);
    cg_release_all(2, x1, y1);
    cg_module_free(CG_MODULE(m1));

    /* errors */
    cg_tensor *bad = cg_zeros(CG_SHAPE(2, 3, 1, 4));
    CG_ASSERT_FAILS(cg_mha_forward(m, x, x, false, NULL, bad, NULL),
                    "each dim its size or 1, [B, H, Tq, Tk] = [2, 2, 4, 4]");
    /* masks a new user gets wrong (issue 31): a short padding mask, a mask of
     * the wrong batch, padding given as floats; refused by name, never read
     * past their end */
    cg_tensor *short_pad = cg_test_mask(CG_SHAPE(1, 4), NULL);
    CG_ASSERT_FAILS(cg_mha_forward(m, x, x, false, short_pad, NULL, NULL),
                    "argument 'key_pad' has shape [1, 4], expected [B, Tk] = [2, 4]");
    cg_tensor *wrong_b = cg_test_mask(CG_SHAPE(3, 4, 4), NULL);
    CG_ASSERT_FAILS(cg_mha_forward(m, x, x, true, NULL, wrong_b, NULL),
                    "argument 'mask' has shape [3, 4, 4]");
    cg_tensor *fpad = cg_zeros(CG_SHAPE(2, 4));
    CG_ASSERT_FAILS(cg_mha_forward(m, x, x, false, fpad, NULL, NULL),
                    "argument 'key_pad' is float32, expected bool");
    cg_release(fpad);
    cg_tensor *x5 = cg_zeros(CG_SHAPE(2, 4, 5));
    CG_ASSERT_FAILS(cg_mha_forward(m, x5, x5, false, NULL, NULL, NULL), "xq [B,Tq,6]");
    cg_tensor *xb = cg_zeros(CG_SHAPE(3, 4, 6));
    CG_ASSERT_FAILS(cg_mha_forward(m, x, xb, false, NULL, NULL, NULL), "[3, 4, 6]");
    free(xv);
    cg_release_all(4, x, bad, x5, xb);
    cg_module_free(CG_MODULE(m));
}
END_TEST

START_TEST(test_mha_forward_torch)
{
    /* cross-attention d=10 H=5 with source padding, against PyTorch */
    cg_mha *m = cg_mha_new(10, 5, NULL);
    fill_formula(CG_MODULE(m));
    cg_tensor *xq = formula_input(CG_SHAPE(2, 3, 10), 0.9, 0.3, false);
    cg_tensor *xkv = formula_input(CG_SHAPE(2, 4, 10), 0.7, 0.1, true);
    const uint8_t src_pad[8] = {0, 0, 0, 0, 0, 0, 1, 1};
    cg_module_keep_attention_weights(CG_MODULE(m), true);
    cg_tensor *w = NULL;
    cg_tensor *y =
        cg_mha_forward(m, xq, xkv, false, cg_test_mask(CG_SHAPE(2, 4), src_pad), NULL, &w);
    CG_ASSERT_TENSOR(y, ref_mha_cross, 1e-5, 1e-4);
    CG_ASSERT_TENSOR(w, ref_mha_cross_w, 1e-6, 1e-4);
    CG_ASSERT_TENSOR(m->weights, ref_mha_cross_w, 1e-6, 1e-4);
    ck_assert_int_eq(m->weights->ndim, 4);
    ck_assert_int_eq(m->weights->shape[1], 5);
    cg_module_keep_attention_weights(CG_MODULE(m), false);
    ck_assert_ptr_null(m->weights);
    cg_release_all(4, xq, xkv, y, w);
    cg_module_free(CG_MODULE(m));
}
END_TEST

/* Encoder/decoder layers, stack and LM block against models.py (dropout 0,
 * B=2, T=3, S=4, d=6, H=2, d_ff=5, parameters from fill_formula). */
START_TEST(test_transformer_torch)
{
    cg_tensor *x = formula_input(CG_SHAPE(2, 3, 6), 0.9, 0.3, false);
    cg_tensor *mem = formula_input(CG_SHAPE(2, 4, 6), 0.7, 0.1, true);
    const uint8_t src_pad[8] = {0, 0, 0, 0, 0, 0, 1, 1};
    const uint8_t tgt_pad[6] = {0, 0, 0, 0, 0, 1};
    const cg_tensor *tp = cg_test_mask(CG_SHAPE(2, 3), tgt_pad);
    const cg_tensor *sp = cg_test_mask(CG_SHAPE(2, 4), src_pad);
    cg_attn_mask tgt_pad_only = {.key_pad = tp};
    cg_attn_mask causal = {.causal = true};
    cg_attn_mask tgt = {.causal = true, .key_pad = tp};
    cg_attn_mask src = {.key_pad = sp};

    cg_tf_config c = small_cfg(CG_NORM_LAYERNORM, CG_ACT_RELU, false);
    cg_enc_layer *e = cg_enc_layer_new(&c, NULL);
    fill_formula(CG_MODULE(e));
    cg_tensor *y = cg_enc_layer_forward(e, x, &tgt_pad_only);
    CG_ASSERT_TENSOR(y, ref_enc_post_ln_relu, 1e-5, 1e-4);
    cg_release(y);
    cg_module_free(CG_MODULE(e));

    c = small_cfg(CG_NORM_RMSNORM, CG_ACT_GELU, true);
    e = cg_enc_layer_new(&c, NULL);
    fill_formula(CG_MODULE(e));
    y = cg_enc_layer_forward(e, x, &causal);
    CG_ASSERT_TENSOR(y, ref_enc_pre_rms_gelu, 1e-5, 1e-4);
    cg_release(y);
    cg_module_free(CG_MODULE(e));

    c = small_cfg(CG_NORM_LAYERNORM, CG_ACT_GELU, true);
    cg_dec_layer *d = cg_dec_layer_new(&c, NULL);
    fill_formula(CG_MODULE(d));
    y = cg_dec_layer_forward(d, x, mem, &tgt, &src);
    CG_ASSERT_TENSOR(y, ref_dec_pre_ln_gelu, 1e-5, 1e-4);
    cg_release(y);
    cg_module_free(CG_MODULE(d));

    c = small_cfg(CG_NORM_RMSNORM, CG_ACT_RELU, false);
    d = cg_dec_layer_new(&c, NULL);
    fill_formula(CG_MODULE(d));
    y = cg_dec_layer_forward(d, x, mem, &tgt, &src);
    CG_ASSERT_TENSOR(y, ref_dec_post_rms_relu, 1e-5, 1e-4);
    cg_release(y);
    cg_module_free(CG_MODULE(d));

    c = small_cfg(CG_NORM_LAYERNORM, CG_ACT_GELU, true);
    cg_enc_stack *s = cg_enc_stack_new(2, &c, NULL);
    fill_formula(CG_MODULE(s));
    y = cg_enc_stack_forward(s, mem, &src);
    CG_ASSERT_TENSOR(y, ref_enc_stack_pre, 1e-5, 1e-4);
    cg_release(y);
    cg_module_free(CG_MODULE(s));

    cg_lm_block *b = cg_lm_block_new(&c, NULL);
    fill_formula(CG_MODULE(b));
    y = cg_lm_block_forward(b, x, &causal);
    CG_ASSERT_TENSOR(y, ref_lm_block, 1e-5, 1e-4);
    cg_release(y);
    cg_module_free(CG_MODULE(b));
    cg_release_all(2, x, mem);
}
END_TEST

/* Dropout inside a layer follows train/eval mode. */
START_TEST(test_transformer_dropout_modes)
{
    cg_tf_config c = small_cfg(CG_NORM_LAYERNORM, CG_ACT_GELU, true);
    cg_enc_layer *plain = cg_enc_layer_new(&c, NULL);
    c.dropout = 0.5f;
    cg_rng dr = cg_rng_new(99);
    c.dropout_rng = &dr;
    cg_enc_layer *drop = cg_enc_layer_new(&c, NULL); /* same init (seed 0) */
    ck_assert_ptr_eq(drop->rng, &dr);
    cg_rng r = cg_rng_new(1);
    cg_tensor *x = cg_randn(&r, CG_SHAPE(2, 3, 6));
    cg_tensor *ref = cg_enc_layer_forward(plain, x, NULL);
    float *rv = cg_test_values(ref);
    cg_tensor *tr = cg_enc_layer_forward(drop, x, NULL);
    float *tv = cg_test_values(tr);
    double diff = 0;
    for (int i = 0; i < 36; i++)
        diff += fabs(tv[i] - rv[i]);
    ck_assert_msg(diff > 1e-3, "dropout had no effect in train mode");
    ck_assert(dr.counter != 0);
    cg_module_train(CG_MODULE(drop), false);
    cg_tensor *ev = cg_enc_layer_forward(drop, x, NULL);
    CG_ASSERT_TENSOR(ev, rv, 0, 0);
    /* eval without a graph (the products' kernels alone, the residual made
     * by fc2's and o_proj's write-out): no dropout either */
    cg_no_grad_begin();
    cg_tensor *eg = cg_enc_layer_forward(drop, x, NULL);
    cg_tensor *pg = cg_enc_layer_forward(plain, x, NULL);
    cg_no_grad_end();
    float *pv = cg_test_values(pg);
    CG_ASSERT_TENSOR(eg, pv, 0, 0);
    free(pv);
    free(rv);
    free(tv);
    cg_release_all(6, x, ref, tr, ev, eg, pg);
    cg_module_free(CG_MODULE(plain));
    cg_module_free(CG_MODULE(drop));

    /* a decoder's cached steps in eval (one position at a time, no graph):
     * an LM block with dropout 0.5 decodes as the same block without */
    c = small_cfg(CG_NORM_LAYERNORM, CG_ACT_GELU, true);
    cg_lm_block *bp = cg_lm_block_new(&c, NULL);
    c.dropout = 0.5f;
    cg_lm_block *bd = cg_lm_block_new(&c, NULL); /* same init (seed 0) */
    cg_module_train(CG_MODULE(bd), false);
    cg_kv_cache *kp = cg_kv_cache_new(1), *kd = cg_kv_cache_new(1);
    x = cg_randn(&r, CG_SHAPE(2, 3, 6));
    cg_no_grad_begin();
    for (int64_t t = 0; t < 3; t++) {
        cg_tensor *xt = cg_view_narrow(x, 1, t, 1);
        cg_tensor *yp = cg_lm_blocks_forward_cached(&bp, 1, xt, kp);
        cg_tensor *yd = cg_lm_blocks_forward_cached(&bd, 1, xt, kd);
        ck_assert_msg(yp && yd, "cached step %lld: %s", (long long)t, cg_last_error());
        float *want = cg_test_values(yp);
        CG_ASSERT_TENSOR(yd, want, 0, 0);
        free(want);
        cg_release_all(3, xt, yp, yd);
    }
    ck_assert_int_eq(kp->len, 3);
    /* a prefill of the three positions at once counts three */
    cg_kv_cache *kq = cg_kv_cache_new(1);
    cg_tensor *yq = cg_lm_blocks_forward_cached(&bd, 1, x, kq);
    ck_assert_msg(yq != NULL, "prefill: %s", cg_last_error());
    ck_assert_int_eq(kq->len, 3);
    ck_assert_int_eq(cg_kv_cache_len(kq), 3);
    cg_no_grad_end();
    cg_release_all(2, x, yq);
    cg_kv_cache_free(kp);
    cg_kv_cache_free(kd);
    cg_kv_cache_free(kq);
    cg_module_free(CG_MODULE(bp));
    cg_module_free(CG_MODULE(bd));

    /* post-norm: norm(x + dropout(sub(x))), the dropout in train mode only */
    c = small_cfg(CG_NORM_LAYERNORM, CG_ACT_GELU, false);
    plain = cg_enc_layer_new(&c, NULL);
    c.dropout = 0.5f;
    dr = cg_rng_new(99);
    c.dropout_rng = &dr;
    drop = cg_enc_layer_new(&c, NULL);
    x = cg_randn(&r, CG_SHAPE(2, 3, 6));
    ref = cg_enc_layer_forward(plain, x, NULL);
    tr = cg_enc_layer_forward(drop, x, NULL);
    rv = cg_test_values(ref);
    tv = cg_test_values(tr);
    diff = 0;
    for (int i = 0; i < 36; i++)
        diff += fabs(tv[i] - rv[i]);
    ck_assert_msg(diff > 1e-3, "post-norm: dropout had no effect in train mode");
    cg_module_train(CG_MODULE(drop), false);
    ev = cg_enc_layer_forward(drop, x, NULL);
    CG_ASSERT_TENSOR(ev, rv, 0, 0);
    free(rv);
    free(tv);
    cg_release_all(4, x, ref, tr, ev);
    cg_module_free(CG_MODULE(plain));
    cg_module_free(CG_MODULE(drop));
}
END_TEST

/* cg_residual through Linear, FeedForward and MultiHeadAttention: res +
 * dropout(module(x)) made by the last product is, output and every
 * gradient, bit for bit the module's output then cg_dropout and cg_add
 * (the residual x itself, or none; p 0 and 0.4; fp32 and bf16); with a
 * forward hook on the module the hook sees the module's own output, and
 * with a LoRA adapter on the last Linear the adapter's delta is in it. */
typedef struct {
    cg_tensor *seen; /* a copy of the output the hook saw */
    int calls;
} seen_out;

static bool see_output(void *ctx, cg_module *m, int n_in, cg_tensor *const *in, cg_tensor **out)
{
    seen_out *s = ctx;
    s->calls++;
    cg_release(s->seen);
    s->seen = cg_k_clone(*out);
    return s->seen != NULL;
}

static const cg_attn_mask causal_mask = {.causal = true};

static cg_tensor *sub_plain(cg_module *m, int kind, cg_tensor *x)
{
    switch (kind) {
    case 0: return cg_linear_forward((cg_linear *)m, x);
    case 1: return cg_ff_forward((cg_ff *)m, x);
    default: return cg_mha_forward_masked((cg_mha *)m, x, x, &causal_mask, NULL);
    }
}

static cg_tensor *sub_fused(cg_module *m, int kind, cg_tensor *x, const cg_residual *r)
{
    switch (kind) {
    case 0: return cg_linear_forward_residual((cg_linear *)m, x, r);
    case 1: return cg_ff_forward_residual((cg_ff *)m, x, r);
    default: return cg_mha_forward_residual((cg_mha *)m, x, x, &causal_mask, NULL, r);
    }
}

/* The output and the gradients of x and of every parameter (in order),
 * concatenated, for y = fused or unfused r after the module */
static float *run_residual(cg_module *m, int kind, cg_tensor *x, bool with_res, float p, bool fused,
                           int64_t *n)
{
    cg_module_zero_grad(m);
    cg_zero_grad(x);
    cg_rng dr = cg_rng_new(7);
    const cg_residual r = {with_res ? x : NULL, p, &dr, true};
    cg_tensor *y = NULL;
    if (fused) {
        y = sub_fused(m, kind, x, &r);
    } else {
        cg_tensor *h = sub_plain(m, kind, x);
        y = cg_residual_apply(&r, h);
        cg_release(h);
    }
    assert_ok(y);
    cg_tensor *g = cg_full(y->ndim, y->shape, 0.25f);
    cg_data(g)[5] = -3.0f;
    ck_assert(cg_backward(y, g, false));
    cg_param_list l = {0};
    ck_assert(cg_module_params(m, &l));
    int64_t total = cg_numel(y) + cg_numel(x);
    for (int k = 0; k < l.n; k++)
        total += cg_numel(l.items[k].tensor);
    float *v = malloc(sizeof(float) * (size_t)total), *at = v;
    cg_copy_to(y, at);
    at += cg_numel(y);
    cg_copy_to(x->grad, at);
    at += cg_numel(x);
    for (int k = 0; k < l.n; k++) {
        if (l.items[k].tensor->grad) /* (an adapter freezes its layer's own) */
            cg_copy_to(l.items[k].tensor->grad, at);
        else
            memset(at, 0, sizeof(float) * (size_t)cg_numel(l.items[k].tensor));
        at += cg_numel(l.items[k].tensor);
    }
    cg_param_list_free(&l);
    cg_release_all(2, y, g);
    *n = total;
    return v;
}

START_TEST(test_residual_fused)
{
    cg_rng r = cg_rng_new(61);
    for (int v = 0; v < 3 * 3 * 2 * 2 * 2; v++) {
        const int kind = v % 3, extra = v / 3 % 3, bf16 = v / 9 % 2, with_res = v / 18 % 2;
        const float p = v / 36 % 2 ? 0.4f : 0.0f;
        cg_set_matmul_precision(bf16 ? CG_PRECISION_BF16 : CG_PRECISION_FP32);
        cg_module *m = kind == 0   ? CG_MODULE(cg_linear_new(6, 6, true, &r))
                       : kind == 1 ? CG_MODULE(cg_ff_new(6, 5, CG_ACT_GELU, &r))
                                   : CG_MODULE(cg_mha_new(6, 2, &r));
        cg_linear *last = kind == 0   ? (cg_linear *)m
                          : kind == 1 ? ((cg_ff *)m)->fc2
                                      : ((cg_mha *)m)->o_proj;
        seen_out seen = {NULL, 0};
        if (extra == 1) /* a hook on the module: it sees the module's own output */
            ck_assert_int_ne(cg_module_register_forward_hook(m, see_output, &seen, NULL).id, 0);
        if (extra == 2) { /* an adapter on the last product (a hook on it) */
            cg_rng lr = cg_rng_new(3);
            cg_lora *a = cg_lora_attach(last, 2, 4.0f, 0.0f, &lr);
            assert_ok(a);
            randomize(CG_MODULE(a->lora_B), 9, 0.5f);
        }
        cg_tensor *x = randn_leaf(&r, CG_SHAPE(2, 3, 6));
        int64_t n0, n1;
        float *want = run_residual(m, kind, x, with_res, p, false, &n0);
        cg_tensor *own = seen.seen ? cg_retain(seen.seen) : NULL;
        float *got = run_residual(m, kind, x, with_res, p, true, &n1);
        ck_assert_int_eq(n0, n1);
        ck_assert_msg(!memcmp(want, got, sizeof(float) * (size_t)n0),
                      "module %d, %s, %s, residual %d, p %g", kind,
                      extra == 0   ? "plain"
                      : extra == 1 ? "a hook"
                                   : "an adapter",
                      bf16 ? "bf16" : "fp32", with_res, (double)p);
        /* without a graph (inference: the kernel alone, bf16 on the
         * weights' packed copies): the same output, fused or not */
        cg_no_grad_begin();
        cg_rng d0 = cg_rng_new(7), d1 = cg_rng_new(7);
        const cg_residual r0 = {with_res ? x : NULL, p, &d0, true},
                          r1 = {with_res ? x : NULL, p, &d1, true};
        cg_tensor *h = sub_plain(m, kind, x), *y0 = cg_residual_apply(&r0, h);
        cg_tensor *y1 = sub_fused(m, kind, x, &r1);
        cg_no_grad_end();
        assert_ok(y0);
        assert_ok(y1);
        ck_assert_msg(!memcmp(cg_data(y0), cg_data(y1), sizeof(float) * 36),
                      "no graph: module %d, extra %d, %s, residual %d, p %g", kind, extra,
                      bf16 ? "bf16" : "fp32", with_res, (double)p);
        cg_release_all(3, h, y0, y1);
        if (extra == 1) { /* the same output each time, the module's own */
            ck_assert_int_eq(seen.calls, 4);
            ck_assert(own && seen.seen && own != seen.seen && cg_same_shape(own, seen.seen));
            ck_assert(!memcmp(cg_data(own), cg_data(seen.seen), sizeof(float) * 36));
        }
        free(want);
        free(got);
        cg_release_all(3, x, own, seen.seen);
        cg_module_free(m);
    }
    cg_set_matmul_precision(CG_PRECISION_FP32);
    /* r NULL: the module's output; NULL arguments refused */
    cg_linear *l = cg_linear_new(4, 3, true, &r);
    cg_tensor *x = cg_randn(&r, CG_SHAPE(2, 4));
    cg_tensor *a = cg_linear_forward(l, x), *b = cg_linear_forward_residual(l, x, NULL);
    ck_assert(b && !memcmp(cg_data(a), cg_data(b), sizeof(float) * 6));
    CG_ASSERT_REFUSED(cg_linear_forward_residual(l, NULL, NULL) == NULL,
                      "cg_linear_forward_residual");
    /* a residual of another shape: refused both ways, fused or not */
    cg_tensor *row = cg_randn(&r, CG_SHAPE(1, 3));
    cg_rng dr = cg_rng_new(1);
    const cg_residual bad = {row, 0.0f, &dr, true};
    CG_ASSERT_REFUSED(cg_linear_forward_residual(l, x, &bad) == NULL, "residual [1, 3]");
    CG_ASSERT_REFUSED(cg_residual_apply(&bad, a) == NULL,
                      "residual: res [1, 3] does not match the sublayer's output [2, 3]");
    cg_release(row);
    /* a residual of another dtype: refused both ways too, the layer with a
     * LoRA adapter (whose hook takes the unfused way) as without one (the
     * unfused way added a bfloat16 res that the fused op refuses) */
    cg_tensor *res16 = cg_k_to(a, CG_BF16);
    const cg_residual r16 = {res16, 0.0f, NULL, false};
    CG_ASSERT_REFUSED(cg_linear_forward_residual(l, x, &r16) == NULL,
                      "argument 'res' is bfloat16, expected float32");
    CG_ASSERT_REFUSED(cg_residual_apply(&r16, a) == NULL,
                      "residual: argument 'res' is bfloat16, expected float32");
    ck_assert_ptr_nonnull(cg_lora_attach(l, 2, 4.0f, 0.0f, &r));
    CG_ASSERT_REFUSED(cg_linear_forward_residual(l, x, &r16) == NULL,
                      "residual: argument 'res' is bfloat16, expected float32");
    cg_release(res16);
    CG_ASSERT_REFUSED(cg_ff_forward_residual(NULL, x, NULL) == NULL, "cg_ff_forward_residual");
    CG_ASSERT_REFUSED(cg_mha_forward_residual(NULL, x, x, NULL, NULL, NULL) == NULL,
                      "cg_mha_forward_residual");
    cg_release_all(3, x, a, b);
    cg_module_free(CG_MODULE(l));
}
END_TEST

/* FeedForward with a hook on fc1 (a LoRA adapter is one): the hook sees
 * fc1's own output, and the activation still follows it, the bits of the
 * fused act(fc1(x)) without the hook; each activation, with a graph and
 * without. */
START_TEST(test_ff_hook_on_fc1)
{
    const cg_act acts[] = {CG_ACT_RELU, CG_ACT_GELU, CG_ACT_GELU_ERF};
    cg_rng r = cg_rng_new(23);
    cg_tensor *x = cg_randn(&r, CG_SHAPE(2, 3, 6));
    for (int a = 0; a < 3; a++)
        for (int grad = 0; grad < 2; grad++) {
            cg_ff *f = cg_ff_new(6, 5, acts[a], NULL);
            if (!grad)
                cg_no_grad_begin();
            cg_tensor *want = cg_ff_forward(f, x);
            cg_tensor *h = cg_linear_forward(f->fc1, x);
            seen_out seen = {0};
            ck_assert_int_ne(
                cg_module_register_forward_hook(CG_MODULE(f->fc1), see_output, &seen, NULL).id, 0);
            cg_tensor *got = cg_ff_forward(f, x);
            if (!grad)
                cg_no_grad_end();
            ck_assert_msg(want && h && got, "%s: %s", cg_act_name(acts[a]), cg_last_error());
            ck_assert_int_eq(seen.calls, 1);
            float *hv = cg_test_values(h), *wv = cg_test_values(want);
            CG_ASSERT_TENSOR(seen.seen, hv, 0, 0);
            CG_ASSERT_TENSOR(got, wv, 0, 0);
            free(hv);
            free(wv);
            cg_release_all(4, want, h, got, seen.seen);
            cg_module_free(CG_MODULE(f));
        }
    cg_release(x);
}
END_TEST

/* ============================================================ gradchecks */
/* A linear layer of no inputs (x [N,0], weight [out,0], as
 * torch.nn.functional.linear takes them): y is zero without a bias and the
 * bias rows with one, in fp32 and under bf16 autocast; the bias's gradient
 * is the column sums of g, the others empty. */
START_TEST(test_linear_no_inputs)
{
    cg_rng r = cg_rng_new(63);
    const float bias[3] = {0.5f, -1.25f, 2.0f}, zero[6] = {0};
    for (int prec = 0; prec < 2; prec++) {
        if (prec && !cg_gemm_path_available(cg_bf16_auto_path()))
            continue;
        cg_precision was = cg_autocast_begin(prec ? CG_PRECISION_BF16 : CG_PRECISION_FP32);
        for (int with_bias = 0; with_bias < 2; with_bias++) {
            cg_tensor *x = cg_zeros(CG_SHAPE(2, 0)), *w = cg_zeros(CG_SHAPE(3, 0));
            cg_tensor *b = with_bias ? cg_from_array(CG_F32, CG_SHAPE(3), bias) : NULL;
            cg_requires_grad(x, true);
            cg_requires_grad(w, true);
            if (b)
                cg_requires_grad(b, true);
            /* y's memory first holds NaN: the result must not read it */
            cg_tensor *junk = cg_full(CG_SHAPE(2, 3), NAN);
            cg_release(junk);
            cg_tensor *y = cg_linear_fn(x, w, b);
            ck_assert_msg(y != NULL, "%s", cg_last_error());
            ck_assert(y->ndim == 2 && y->shape[0] == 2 && y->shape[1] == 3);
            const float rows[6] = {bias[0], bias[1], bias[2], bias[0], bias[1], bias[2]};
            CG_ASSERT_TENSOR(y, with_bias ? rows : zero, 0.0, 0.0);
            cg_tensor *g = cg_randn(&r, CG_SHAPE(2, 3));
            ck_assert(cg_backward(y, g, false));
            if (b) {
                float *gv = cg_test_values(g), want[3];
                for (int j = 0; j < 3; j++)
                    want[j] = gv[j] + gv[3 + j];
                CG_ASSERT_TENSOR(cg_grad(b), want, 1e-6, 1e-6);
                free(gv);
            }
            ck_assert(!cg_grad(x) || cg_numel(cg_grad(x)) == 0);
            ck_assert(!cg_grad(w) || cg_numel(cg_grad(w)) == 0);
            cg_release_all(5, x, w, b, y, g);
        }
        cg_autocast_end(was);
    }
}
END_TEST

START_TEST(test_grad_linear)
{
    cg_rng r = cg_rng_new(31);
    cg_linear *l = cg_linear_new(3, 4, true, NULL);
    randomize(CG_MODULE(l), 1, 0.7f);
    fctx c = {.m = CG_MODULE(l), .kind = K_LINEAR};
    cg_tensor *x = randn_leaf(&r, CG_SHAPE(2, 2, 3));
    gradcheck_module(&c, 1, &x, 1e-3, 1e-2);
    /* non-contiguous (transposed) input, no bias */
    cg_linear *nb = cg_linear_new(3, 2, false, NULL);
    randomize(CG_MODULE(nb), 2, 0.7f);
    c.m = CG_MODULE(nb);
    cg_tensor *store = cg_randn(&r, CG_SHAPE(3, 5));
    cg_tensor *xt = cg_view_transpose(store, 0, 1);
    cg_requires_grad(xt, true);
    gradcheck_module(&c, 1, &xt, 1e-3, 1e-2);
    cg_release_all(3, x, store, xt);
    cg_module_free(CG_MODULE(l));
    cg_module_free(CG_MODULE(nb));
}
END_TEST

START_TEST(test_grad_embedding)
{
    cg_embed *e = cg_embed_new(5, 3, NULL);
    const int64_t ids[6] = {4, 0, 4, 2, 2, 4}; /* repeated ids accumulate */
    fctx c = {.m = CG_MODULE(e), .kind = K_EMBED, .ids = ids, .ids_ndim = 2, .ids_shape = {2, 3}};
    gradcheck_module(&c, 0, NULL, 1e-3, 1e-2);
    cg_module_free(CG_MODULE(e));
}
END_TEST

START_TEST(test_grad_norms)
{
    cg_rng r = cg_rng_new(32);
    for (int kind = 0; kind < 2; kind++) {
        cg_norm *n = cg_norm_new((cg_norm_kind)kind, 5);
        randomize(CG_MODULE(n), 3, 1.0f);
        fctx c = {.m = CG_MODULE(n), .kind = K_NORM};
        cg_tensor *x = randn_leaf(&r, CG_SHAPE(2, 3, 5));
        gradcheck_module(&c, 1, &x, 1e-3, 1e-2);
        cg_tensor *x1 = randn_leaf(&r, CG_SHAPE(1, 5)); /* one row */
        gradcheck_module(&c, 1, &x1, 1e-3, 1e-2);
        cg_release_all(2, x, x1);
        cg_module_free(CG_MODULE(n));
    }
}
END_TEST

/* norm(x + y): the gradcheck, and the loss and every gradient (x, y, weight,
 * bias) bit for bit those of cg_norm_forward(n, cg_add(x, y)) */
START_TEST(test_grad_norm_add)
{
    cg_rng r = cg_rng_new(34);
    for (int kind = 0; kind < 2; kind++) {
        cg_norm *n = cg_norm_new((cg_norm_kind)kind, 5);
        randomize(CG_MODULE(n), 3, 1.0f);
        fctx c = {.m = CG_MODULE(n), .kind = K_NORM_ADD};
        cg_tensor *xy[2] = {randn_leaf(&r, CG_SHAPE(2, 3, 5)), randn_leaf(&r, CG_SHAPE(2, 3, 5))};
        gradcheck_module(&c, 2, xy, 1e-3, 1e-2);

        cg_param_list l = {0};
        ck_assert(cg_module_params(CG_MODULE(n), &l));
        cg_tensor *g = cg_randn(&r, CG_SHAPE(2, 3, 5));
        float *grads[2][4] = {{0}}, *outs[2];
        for (int fused = 0; fused < 2; fused++) {
            cg_zero_grad(xy[0]);
            cg_zero_grad(xy[1]);
            for (int i = 0; i < l.n; i++)
                cg_zero_grad(l.items[i].tensor);
            cg_tensor *s = fused ? NULL : cg_add(xy[0], xy[1]);
            cg_tensor *y = fused ? cg_norm_add_forward(n, xy[0], xy[1]) : cg_norm_forward(n, s);
            assert_ok(y);
            ck_assert(cg_backward(y, g, false));
            outs[fused] = cg_test_values(y);
            grads[fused][0] = cg_test_values(cg_grad(xy[0]));
            grads[fused][1] = cg_test_values(cg_grad(xy[1]));
            for (int i = 0; i < l.n; i++)
                grads[fused][2 + i] = cg_test_values(cg_grad(l.items[i].tensor));
            cg_release_all(2, s, y);
        }
        ck_assert(memcmp(outs[0], outs[1], 30 * sizeof(float)) == 0);
        for (int j = 0; j < 2 + l.n; j++) {
            ck_assert_msg(memcmp(grads[0][j], grads[1][j], (j < 2 ? 30 : 5) * sizeof(float)) == 0,
                          "%s: gradient %d differs", n->base.type, j);
            free(grads[0][j]);
            free(grads[1][j]);
        }
        free(outs[0]);
        free(outs[1]);
        cg_tensor *x4 = randn_leaf(&r, CG_SHAPE(2, 3, 4)), *y1 = randn_leaf(&r, CG_SHAPE(1, 5));
        CG_ASSERT_FAILS(cg_norm_add_forward(n, x4, x4), "dim 5");
        CG_ASSERT_FAILS(cg_norm_add_forward(n, xy[0], y1), "same shape");
        cg_param_list_free(&l);
        cg_release_all(5, xy[0], xy[1], g, x4, y1);
        cg_module_free(CG_MODULE(n));
    }
}
END_TEST

START_TEST(test_grad_dropout_posenc)
{
    cg_rng r = cg_rng_new(33);
    cg_drop *d = cg_drop_new(0.3f, NULL);
    fctx c = {.m = CG_MODULE(d), .kind = K_DROP, .rng = &d->own_rng, .rng0 = d->own_rng};
    cg_tensor *x = randn_leaf(&r, CG_SHAPE(3, 4));
    gradcheck_module(&c, 1, &x, 1e-3, 1e-2);
    cg_module_train(CG_MODULE(d), false);
    gradcheck_module(&c, 1, &x, 1e-3, 1e-2);
    cg_module_free(CG_MODULE(d));

    cg_posenc *p = cg_posenc_new(10, 5);
    fctx c2 = {.m = CG_MODULE(p), .kind = K_POSENC};
    cg_tensor *x2 = randn_leaf(&r, CG_SHAPE(2, 3, 5));
    gradcheck_module(&c2, 1, &x2, 1e-3, 1e-2);
    cg_module_free(CG_MODULE(p));
    cg_release_all(2, x, x2);
}
END_TEST

START_TEST(test_grad_ff)
{
    cg_rng r = cg_rng_new(34);
    for (int act = 0; act < 2; act++) {
        cg_ff *f = cg_ff_new(4, 6, (cg_act)act, NULL);
        randomize(CG_MODULE(f), 7 + act, 0.8f);
        fctx c = {.m = CG_MODULE(f), .kind = K_FF};
        cg_tensor *x = randn_leaf(&r, CG_SHAPE(2, 2, 4));
        gradcheck_module(&c, 1, &x, 1e-3, 1e-2);
        cg_release(x);
        cg_module_free(CG_MODULE(f));
    }
}
END_TEST

/* FeedForward with ReLU (fc1 and the ReLU in one op, the ReLU in place
 * without a graph): output and gradients bit for bit those of fc2(relu(fc1
 * x)) built from the separate ops, with a graph and without, fp32 and bf16. */
START_TEST(test_ff_relu_fused)
{
    cg_rng r = cg_rng_new(36);
    cg_ff *f = cg_ff_new(8, 20, CG_ACT_RELU, NULL);
    randomize(CG_MODULE(f), 9, 0.8f);
    cg_param_list l = {0};
    ck_assert(cg_module_params(CG_MODULE(f), &l));
    cg_tensor *x = randn_leaf(&r, CG_SHAPE(3, 70, 8)); /* 70 rows: bf16 inference packs */
    for (int prec = 0; prec < 2; prec++) {
        cg_set_matmul_precision(prec ? CG_PRECISION_BF16 : CG_PRECISION_FP32);
        for (int grad = 0; grad < 2; grad++) {
            float *out[2], *gr[2][5] = {{0}};
            for (int fused = 0; fused < 2; fused++) {
                if (!grad)
                    cg_no_grad_begin();
                cg_zero_grad(x);
                for (int i = 0; i < l.n; i++)
                    cg_zero_grad(l.items[i].tensor);
                cg_tensor *h = NULL, *a = NULL, *y;
                if (fused) {
                    y = cg_ff_forward(f, x);
                } else {
                    h = cg_linear_forward(f->fc1, x);
                    a = cg_relu(h);
                    y = cg_linear_forward(f->fc2, a);
                }
                assert_ok(y);
                if (!grad)
                    cg_no_grad_end();
                out[fused] = cg_test_values(y);
                if (grad) {
                    cg_tensor *s = cg_sum_all(y);
                    ck_assert(cg_backward(s, NULL, false));
                    cg_release(s);
                    gr[fused][0] = cg_test_values(cg_grad(x));
                    for (int i = 0; i < l.n; i++)
                        gr[fused][1 + i] = cg_test_values(cg_grad(l.items[i].tensor));
                }
                cg_release_all(3, h, a, y);
            }
            ck_assert_msg(memcmp(out[0], out[1], 3 * 70 * 8 * sizeof(float)) == 0,
                          "precision %d, grad %d: outputs differ", prec, grad);
            for (int i = 0; grad && i < 1 + l.n; i++) {
                int64_t n = i ? cg_numel(l.items[i - 1].tensor) : cg_numel(x);
                ck_assert_msg(memcmp(gr[0][i], gr[1][i], (size_t)n * sizeof(float)) == 0,
                              "precision %d: gradient %d differs", prec, i);
            }
            for (int k = 0; k < 2; k++) {
                free(out[k]);
                for (int i = 0; i < 5; i++)
                    free(gr[k][i]);
            }
        }
    }
    cg_set_matmul_precision(CG_PRECISION_FP32);
    cg_param_list_free(&l);
    cg_release(x);
    cg_module_free(CG_MODULE(f));
}
END_TEST

/* Multi-task: one trunk, two heads, one backward per loss. Without
 * retain_graph the first backward frees the trunk's part of the graph, and
 * the second is refused (as PyTorch refuses it) with the heads' and the
 * trunk's gradients left as the first backward left them: it once returned
 * true having given the trunk none of loss 2's gradient. With retain_graph
 * on the first, the trunk's gradient is that of backward(l1 + l2). */
START_TEST(test_multitask_two_backwards)
{
    cg_rng r = cg_rng_new(1);
    cg_linear *trunk = cg_linear_new(4, 8, true, &r), *h1 = cg_linear_new(8, 1, true, &r),
              *h2 = cg_linear_new(8, 1, true, &r);
    cg_tensor *x = cg_randn(&r, CG_SHAPE(16, 4)), *t1 = cg_randn(&r, CG_SHAPE(16, 1)),
              *t2 = cg_randn(&r, CG_SHAPE(16, 1));
    float g[3][32];
    for (int mode = 0; mode < 3; mode++) { /* no retain_graph, retain_graph, one backward */
        cg_module_zero_grad(CG_MODULE(trunk));
        cg_module_zero_grad(CG_MODULE(h2));
        cg_scope *s = cg_scope_begin();
        cg_tensor *f = cg_relu(cg_linear_forward(trunk, x));
        cg_tensor *l1 = cg_mse_loss(cg_linear_forward(h1, f), t1, CG_REDUCTION_MEAN);
        cg_tensor *l2 = cg_mse_loss(cg_linear_forward(h2, f), t2, CG_REDUCTION_MEAN);
        if (mode < 2) {
            ck_assert(cg_backward(l1, NULL, mode == 1));
            cg_copy_to(cg_grad(trunk->weight), g[mode]);
            if (mode == 0) {
                CG_ASSERT_REFUSED(!cg_backward(l2, NULL, false), "already freed");
                float now[32];
                cg_copy_to(cg_grad(trunk->weight), now);
                ck_assert(memcmp(now, g[0], sizeof now) == 0);
                ck_assert_ptr_null(cg_grad(h2->weight));
            } else {
                ck_assert_msg(cg_backward(l2, NULL, false), "%s", cg_last_error());
            }
        } else {
            ck_assert(cg_backward(cg_add(l1, l2), NULL, false));
        }
        cg_copy_to(cg_grad(trunk->weight), g[mode]);
        cg_scope_end(s);
    }
    CG_ASSERT_CLOSE(g[1], g[2], 32, 1e-6, 1e-5);
    cg_release_all(3, x, t1, t2);
    cg_module_free(CG_MODULE(trunk));
    cg_module_free(CG_MODULE(h1));
    cg_module_free(CG_MODULE(h2));
}
END_TEST

/* MHA: self and cross, masks, odd sizes (d=6 H=2, d=10 H=5, H=1, T=1). */
START_TEST(test_grad_mha)
{
    cg_rng r = cg_rng_new(35);
    const uint8_t pad3[6] = {0, 0, 1, 0, 0, 0}; /* B=2, Tk=3: batch 0 key 2 padded */
    const uint8_t mh[6] = {0, 1, 0, 0, 0, 0};   /* [1,H=2,1,Tk=3]: head 0 skips key 1 */
    cg_tensor *hmask = cg_test_mask(CG_SHAPE(1, 2, 1, 3), mh);
    struct {
        int64_t d, H, B, Tq, Tk;
        bool cross, causal;
        const uint8_t *pad;
        cg_tensor *mask;
    } cases[] = {
        {6, 2, 2, 3, 3, false, false, NULL, NULL}, {6, 2, 2, 3, 3, false, true, NULL, NULL},
        {6, 2, 2, 3, 3, false, true, pad3, hmask}, {6, 2, 2, 2, 3, true, false, pad3, NULL},
        {10, 5, 1, 2, 3, true, false, NULL, NULL}, {4, 1, 2, 1, 1, false, true, NULL, NULL},
        {4, 1, 1, 1, 3, true, false, NULL, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cg_mha *m = cg_mha_new(cases[i].d, cases[i].H, NULL);
        randomize(CG_MODULE(m), 40 + i, 0.6f);
        fctx c = {.m = CG_MODULE(m),
                  .kind = cases[i].cross ? K_MHA_CROSS : K_MHA_SELF,
                  .causal = cases[i].causal,
                  .key_pad = cases[i].pad
                                 ? cg_test_mask(CG_SHAPE(cases[i].B, cases[i].Tk), cases[i].pad)
                                 : NULL,
                  .mask = cases[i].mask};
        cg_tensor *in[2];
        in[0] = randn_leaf(&r, CG_SHAPE(cases[i].B, cases[i].Tq, cases[i].d));
        in[1] = randn_leaf(&r, CG_SHAPE(cases[i].B, cases[i].Tk, cases[i].d));
        gradcheck_module(&c, cases[i].cross ? 2 : 1, in, 1e-3, 1e-2);
        cg_release_all(2, in[0], in[1]);
        cg_module_free(CG_MODULE(m));
    }
}
END_TEST

/* A float attn_mask that requires grad (a learnable relative-position or
 * ALiBi bias) gets its gradient, as PyTorch's does, in every shape the
 * mask takes and combined with causal and key-padding masks (-inf where
 * they mask; a [Tq, Tk] bias is expanded over a padding mask's batch):
 * through cg_scaled_dot_product_attention, cg_mha_forward, and encoder and
 * decoder layers with recomputation off and on (where the bias is an input
 * of the checkpointed block, not a copy). It was detached: backward
 * succeeded and the bias got no gradient; and a [Tq, Tk] float mask with a
 * padding mask was refused (masked_fill could not broadcast the padding
 * mask's batch over it). */
static cg_tensor *sdpa_fn(void *ctx, cg_tensor *const *in)
{
    (void)ctx;
    return cg_scaled_dot_product_attention(in[0], in[1], in[2], in[3], NULL);
}

static cg_tensor *sdpa_nomask_fn(void *ctx, cg_tensor *const *in)
{
    (void)ctx;
    return cg_scaled_dot_product_attention(in[0], in[1], in[2], NULL, NULL);
}

/* Without a mask the function hands q, k and v to the fused kernel (the
 * composed path takes a mask): its result and weights against softmax(q
 * k^T / sqrt(dh)) v in double, on transposed q and k as well, and its
 * gradient by gradcheck. */
START_TEST(test_sdpa_without_mask)
{
    cg_rng r = cg_rng_new(61);
    enum { B = 2, H = 2, TQ = 3, TK = 5, DH = 4 };
    for (int layout = 0; layout < 2; layout++) {
        cg_tensor *q = layout ? cg_test_randn_layout(&r, CG_SHAPE(B, H, TQ, DH), 1)
                              : cg_randn(&r, CG_SHAPE(B, H, TQ, DH));
        cg_tensor *k = layout ? cg_test_randn_layout(&r, CG_SHAPE(B, H, TK, DH), 1)
                              : cg_randn(&r, CG_SHAPE(B, H, TK, DH));
        cg_tensor *v = cg_randn(&r, CG_SHAPE(B, H, TK, DH)), *w = NULL;
        ck_assert(q && k && v);
        cg_tensor *out = cg_scaled_dot_product_attention(q, k, v, NULL, &w);
        ck_assert_msg(out && w, "%s", cg_last_error());
        ck_assert_int_eq(w->ndim, 4);
        ck_assert_int_eq(w->shape[3], TK);
        float *qv = cg_test_values(q), *kv = cg_test_values(k), *vv = cg_test_values(v);
        float want[B * H * TQ * DH], wantw[B * H * TQ * TK];
        for (int bh = 0; bh < B * H; bh++)
            for (int i = 0; i < TQ; i++) {
                double s[TK], mx = -INFINITY, sum = 0.0;
                for (int j = 0; j < TK; j++) {
                    s[j] = 0.0;
                    for (int c = 0; c < DH; c++)
                        s[j] += (double)qv[(bh * TQ + i) * DH + c] * kv[(bh * TK + j) * DH + c];
                    s[j] /= sqrt((double)DH);
                    mx = s[j] > mx ? s[j] : mx;
                }
                for (int j = 0; j < TK; j++)
                    sum += (s[j] = exp(s[j] - mx));
                for (int j = 0; j < TK; j++)
                    wantw[(bh * TQ + i) * TK + j] = (float)(s[j] / sum);
                for (int c = 0; c < DH; c++) {
                    double o = 0.0;
                    for (int j = 0; j < TK; j++)
                        o += s[j] / sum * vv[(bh * TK + j) * DH + c];
                    want[(bh * TQ + i) * DH + c] = (float)o;
                }
            }
        CG_ASSERT_TENSOR(out, want, 1e-6, 1e-5);
        CG_ASSERT_TENSOR(w, wantw, 1e-6, 1e-5);
        free(qv), free(kv), free(vv);
        cg_release_all(5, q, k, v, out, w);
    }
    cg_tensor *in[3] = {randn_leaf(&r, CG_SHAPE(1, 2, 3, 4)), randn_leaf(&r, CG_SHAPE(1, 2, 4, 4)),
                        randn_leaf(&r, CG_SHAPE(1, 2, 4, 4))};
    cg_gradcheck_report rep;
    ck_assert_msg(cg_gradcheck(sdpa_nomask_fn, NULL, 3, in, NULL, &rep), "%s", rep.message);
    cg_release_all(3, in[0], in[1], in[2]);
}
END_TEST

/* Shapes a user gets wrong at the attention's other doors, each one line
 * naming what was expected: a bool key_pad of the wrong shape, cached
 * attention's queries of the wrong width or batch, its new keys of
 * another batch, a reorder to no rows, the key_pad of new queries past
 * position 0, a positional encoding's width. */
START_TEST(test_attention_shape_refusals)
{
    cg_rng r = cg_rng_new(62);
    cg_tensor *kp = cg_test_mask(CG_SHAPE(2, 5), NULL), *mask = NULL;
    CG_ASSERT_REFUSED(!cg_attention_mask(2, 2, 4, 4, false, kp, NULL, &mask),
                      "argument 'key_pad' has shape [2, 5], expected [B, Tk] = [2, 4]");
    ck_assert_ptr_null(mask);
    /* a 1-d mask broadcasts in NumPy's sense, but is not taken: the
     * message says which shapes are (it said "or a shape that broadcasts
     * to [B, H, Tq, Tk]", which [4] does) */
    cg_tensor *m1 = cg_test_mask(CG_SHAPE(4), NULL);
    CG_ASSERT_REFUSED(!cg_attention_mask(2, 2, 4, 4, false, NULL, m1, &mask),
                      "argument 'mask' has shape [4], expected [Tq, Tk], [B, Tq, Tk] or "
                      "[B, H, Tq, Tk], each dim its size or 1, [B, H, Tq, Tk] = [2, 2, 4, 4]");
    ck_assert_ptr_null(mask);
    cg_mha *m = cg_mha_new(4, 2, &r);
    cg_mha_kv kv = {0};
    cg_tensor *wide = cg_randn(&r, CG_SHAPE(2, 1, 6)), *x2 = cg_randn(&r, CG_SHAPE(2, 2, 4));
    cg_tensor *x3 = cg_randn(&r, CG_SHAPE(3, 1, 4));
    CG_ASSERT_FAILS(cg_mha_forward_cached(m, wide, wide, true, NULL, &kv),
                    "expected xq [B,n,4] and xkv [B,m,4] or NULL; got [2, 1, 6]");
    ck_assert_int_eq(kv.len, 0);
    cg_tensor *y = cg_mha_forward_cached(m, x2, x2, true, NULL, &kv);
    ck_assert_msg(y != NULL, "%s", cg_last_error());
    CG_ASSERT_FAILS(cg_mha_forward_cached(m, x3, NULL, true, NULL, &kv),
                    "3 queries for a cache of 2 rows");
    /* new keys of another batch, and a reorder to no rows: the cache as it was */
    CG_ASSERT_FAILS(cg_mha_forward_cached(m, x3, x3, true, NULL, &kv),
                    "new keys [3, 2, 1, 2] do not match the cached [2, 2, 16, 2]");
    CG_ASSERT_REFUSED(!cg_mha_kv_reorder(&kv, cg_test_ids(0, NULL)),
                      "argument 'rows' has shape [0], expected [n] with n >= 1");
    ck_assert(kv.len == 2 && kv.k->shape[0] == 2 && kv.v->shape[0] == 2);
    /* two new queries after two cached: key_pad over all 4 keys */
    cg_tensor *short_pad = cg_test_mask(CG_SHAPE(2, 3), NULL);
    CG_ASSERT_FAILS(cg_mha_forward_cached(m, x2, x2, true, short_pad, &kv),
                    "'key_pad' (bool [2, 3]) is not bool [B, Tk] = [2, 4]");
    cg_posenc *pe = cg_posenc_new(8, 4);
    CG_ASSERT_FAILS(cg_posenc_forward(pe, wide), "PositionalEncoding: input [2, 1, 6] must be "
                                                 "[..., T, 4]");
    cg_mha_kv_free(&kv);
    cg_release_all(4, wide, x2, x3, y); /* kp, m1, short_pad: the harness's */
    cg_module_free(CG_MODULE(m));
    cg_module_free(CG_MODULE(pe));
}
END_TEST

START_TEST(test_grad_attention_float_mask)
{
    cg_rng r = cg_rng_new(38);
    /* the functional form: q [2,2,3,4], k and v [2,2,4,4] */
    const int64_t mshape[4][4] = {{3, 4}, {2, 3, 4}, {1, 2, 3, 4}, {2, 1, 1, 4}};
    const int mnd[4] = {2, 3, 4, 4};
    for (int i = 0; i < 4; i++) {
        cg_tensor *in[4] = {
            randn_leaf(&r, CG_SHAPE(2, 2, 3, 4)), randn_leaf(&r, CG_SHAPE(2, 2, 4, 4)),
            randn_leaf(&r, CG_SHAPE(2, 2, 4, 4)), randn_leaf(&r, mnd[i], mshape[i])};
        cg_gradcheck_report rep;
        ck_assert_msg(cg_gradcheck(sdpa_fn, NULL, 4, in, NULL, &rep), "mask %d: %s", i,
                      rep.message);
        cg_tensor *y = sdpa_fn(NULL, in), *l = cg_sum_all(y);
        ck_assert(cg_backward(l, NULL, false));
        ck_assert_ptr_nonnull(cg_grad(in[3]));
        ck_assert(cg_same_shape(cg_grad(in[3]), in[3]));
        cg_release_all(6, in[0], in[1], in[2], in[3], y, l);
    }
    /* the module: d=6 H=2, B=2, T=3 */
    const uint8_t pad[6] = {0, 0, 1, 0, 0, 0};
    struct {
        bool causal, pad;
        int ndim;
        int64_t shape[4];
    } cases[] = {
        {false, false, 2, {3, 3}},  {true, false, 2, {3, 3}},       {false, true, 2, {3, 3}},
        {true, true, 3, {2, 3, 3}}, {false, true, 4, {1, 2, 3, 3}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cg_mha *m = cg_mha_new(6, 2, NULL);
        randomize(CG_MODULE(m), 45 + i, 0.6f);
        fctx c = {.m = CG_MODULE(m),
                  .kind = K_MHA_BIAS,
                  .causal = cases[i].causal,
                  .key_pad = cases[i].pad ? cg_test_mask(CG_SHAPE(2, 3), pad) : NULL};
        cg_tensor *in[2] = {randn_leaf(&r, CG_SHAPE(2, 3, 6)),
                            randn_leaf(&r, cases[i].ndim, cases[i].shape)};
        gradcheck_module(&c, 2, in, 1e-3, 1e-2);
        cg_release_all(2, in[0], in[1]);
        cg_module_free(CG_MODULE(m));
    }
    /* an encoder layer (a self-attention bias [3, 3]) and a decoder layer
     * (biases [2, 3, 3] and [3, 4] on its self- and cross-attention),
     * recomputation off and on: the same gradients, bit for bit */
    const uint8_t spad[8] = {0, 0, 0, 1, 0, 0, 0, 0}; /* B=2, S=4 */
    const int64_t shp[2][4][3] = {{{2, 3, 6}, {3, 3}}, {{2, 3, 6}, {2, 4, 6}, {2, 3, 3}, {3, 4}}};
    const int shnd[2][4] = {{3, 2}, {3, 3, 3, 2}};
    for (int dec = 0; dec < 2; dec++) {
        cg_tf_config cfg = small_cfg(CG_NORM_LAYERNORM, CG_ACT_GELU, dec == 0);
        const int n = dec ? 4 : 2;
        float *g[2][4];
        for (int rc = 0; rc < 2; rc++) {
            cg_module *mod = dec ? CG_MODULE(cg_dec_layer_new(&cfg, NULL))
                                 : CG_MODULE(cg_enc_layer_new(&cfg, NULL));
            randomize(mod, 51 + dec, 0.5f);
            if (dec)
                ((cg_dec_layer *)mod)->recompute = rc;
            else
                ((cg_enc_layer *)mod)->recompute = rc;
            fctx c = {.m = mod,
                      .kind = dec ? K_DEC_BIAS : K_ENC_BIAS,
                      .sm = {.causal = true, .key_pad = cg_test_mask(CG_SHAPE(2, 3), pad)},
                      .cm = {.key_pad = cg_test_mask(CG_SHAPE(2, 4), spad)}};
            cg_rng r2 = cg_rng_new(39);
            cg_tensor *in[4];
            for (int k = 0; k < n; k++)
                in[k] = randn_leaf(&r2, shnd[dec][k], shp[dec][k]);
            gradcheck_module(&c, n, in, 2e-3, 2e-2);
            cg_tensor *y = fwd(&c, in), *l = cg_sum_all(y);
            ck_assert(cg_backward(l, NULL, false));
            for (int k = 0; k < n; k++) {
                g[rc][k] = cg_test_values(cg_grad(in[k]));
                ck_assert(memcmp(g[rc][k], g[0][k], sizeof(float) * (size_t)cg_numel(in[k])) == 0);
            }
            for (int k = 0; k < n; k++)
                cg_release(in[k]);
            cg_release_all(2, y, l);
            cg_module_free(mod);
        }
        for (int k = 0; k < 2 * n; k++)
            free(g[k / n][k % n]);
    }
}
END_TEST

/* The float mask's gradient against PyTorch 1.13's nn.MultiheadAttention
 * (batch_first, the same weights, attn_mask = the bias, key_padding_mask),
 * computed once and pasted as the reference values above: cross-attention
 * d=10 H=5 as in test_mha_forward_torch, a learnable bias [3, 4] of
 * 0.4 cos(0.6 j + 0.5), loss sum(y * y). */
static const float ref_mha_bias_grad[12] = {
    -0.566811204f, -0.305659711f, 0.848587513f,  0.0238845348f, -0.931748152f, -0.345810354f,
    0.762184322f,  0.515374839f,  -0.191402435f, -0.730893552f, 0.797365189f,  0.124931037f};

START_TEST(test_mha_mask_grad_torch)
{
    cg_mha *m = cg_mha_new(10, 5, NULL);
    fill_formula(CG_MODULE(m));
    cg_tensor *xq = formula_input(CG_SHAPE(2, 3, 10), 0.9, 0.3, false);
    cg_tensor *xkv = formula_input(CG_SHAPE(2, 4, 10), 0.7, 0.1, true);
    cg_tensor *bias = formula_input(CG_SHAPE(3, 4), 0.6, 0.5, true);
    ck_assert(cg_k_muls_(bias, 0.4f));
    cg_requires_grad(bias, true);
    const uint8_t src_pad[8] = {0, 0, 0, 0, 0, 0, 1, 1};
    cg_tensor *y =
        cg_mha_forward(m, xq, xkv, false, cg_test_mask(CG_SHAPE(2, 4), src_pad), bias, NULL);
    cg_tensor *yy = cg_mul(y, y), *l = cg_sum_all(yy);
    ck_assert_msg(cg_backward(l, NULL, false), "%s", cg_last_error());
    CG_ASSERT_TENSOR(cg_grad(bias), ref_mha_bias_grad, 1e-5, 1e-4);
    cg_release_all(6, xq, xkv, bias, y, yy, l);
    cg_module_free(CG_MODULE(m));
}
END_TEST

/* The q/k hook: doubling q equals doubling q_proj; the hook sees the split
 * heads; a hook built from differentiable ops passes gradcheck; a bad hook
 * result is an error. */
static int g_hook_calls;
static cg_tensor *double_q(void *ctx, cg_tensor *x, bool is_key)
{
    const int64_t *dh = ctx;
    ck_assert_int_eq(x->ndim, 4);
    ck_assert_int_eq(x->shape[3], *dh);
    g_hook_calls++;
    return is_key ? cg_retain(x) : cg_muls(x, 2.0f);
}
static cg_tensor *rotate_k(void *ctx, cg_tensor *x, bool is_key)
{
    (void)ctx; /* k -> sin(k) + k: any differentiable transform */
    if (!is_key)
        return cg_retain(x);
    cg_tensor *s = cg_sin(x);
    cg_tensor *y = cg_add(s, x);
    cg_release(s);
    return y;
}
static cg_tensor *bad_hook(void *ctx, cg_tensor *x, bool is_key)
{
    (void)ctx, (void)is_key;
    return cg_transpose(x, 2, 3);
}

START_TEST(test_mha_qk_hook)
{
    cg_rng r = cg_rng_new(77);
    cg_mha *a = cg_mha_new(8, 2, &r), *b = cg_mha_new(8, 2, NULL);
    cg_param_list la = {0}, lb = {0};
    ck_assert(cg_module_params(CG_MODULE(a), &la) && cg_module_params(CG_MODULE(b), &lb));
    cg_no_grad_begin(); /* a weight copy, as under torch.no_grad() */
    for (int i = 0; i < la.n; i++)
        ck_assert(cg_copy_(lb.items[i].tensor, la.items[i].tensor));
    cg_no_grad_end();
    cg_k_muls_(b->q_proj->weight, 2.0f);
    cg_k_muls_(b->q_proj->bias, 2.0f);
    int64_t dh = 4;
    a->qk_hook = double_q;
    a->qk_hook_ctx = &dh;
    cg_tensor *x = cg_randn(&r, CG_SHAPE(2, 5, 8));
    cg_tensor *ya = cg_mha_forward(a, x, x, true, NULL, NULL, NULL);
    cg_tensor *yb = cg_mha_forward(b, x, x, true, NULL, NULL, NULL);
    ck_assert_int_eq(g_hook_calls, 2);
    float *vb = cg_test_values(yb);
    CG_ASSERT_TENSOR(ya, vb, 1e-5, 1e-4);
    free(vb);
    cg_release_all(2, ya, yb);
    /* gradcheck through a hook (self- and cross-attention) */
    a->qk_hook = rotate_k;
    fctx c = {.m = CG_MODULE(a), .kind = K_MHA_SELF, .causal = true};
    cg_tensor *in[2] = {randn_leaf(&r, CG_SHAPE(2, 3, 8)), randn_leaf(&r, CG_SHAPE(2, 4, 8))};
    gradcheck_module(&c, 1, in, 1e-3, 1e-2);
    c.kind = K_MHA_CROSS;
    c.causal = false;
    gradcheck_module(&c, 2, in, 1e-3, 1e-2);
    /* a hook returning the wrong shape */
    a->qk_hook = bad_hook;
    CG_ASSERT_FAILS(cg_mha_forward(a, x, x, false, NULL, NULL, NULL),
                    "q/k hook returned [2, 2, 4, 5]");
    /* cached decoding cannot tell the hook the cached keys' positions: refused */
    cg_mha_kv kv = {0};
    a->qk_hook = rotate_k;
    CG_ASSERT_FAILS(cg_mha_forward_cached(a, x, x, true, NULL, &kv), "q/k hook");
    ck_assert_int_eq(kv.len, 0);
    cg_mha_kv_free(&kv);
    cg_release_all(3, x, in[0], in[1]);
    cg_param_list_free(&la);
    cg_param_list_free(&lb);
    cg_module_free(CG_MODULE(a));
    cg_module_free(CG_MODULE(b));
}
END_TEST

START_TEST(test_grad_enc_layer)
{
    cg_rng r = cg_rng_new(36);
    const uint8_t pad[6] = {0, 0, 0, 0, 1, 1};
    for (int v = 0; v < 8; v++) { /* v & 4: bias=False */
        bool nf = v & 1;
        cg_tf_config cfg = small_cfg(v & 2 ? CG_NORM_RMSNORM : CG_NORM_LAYERNORM,
                                     v & 2 ? CG_ACT_RELU : CG_ACT_GELU, nf);
        cfg.no_bias = v & 4;
        cg_enc_layer *e = cg_enc_layer_new(&cfg, NULL);
        randomize(CG_MODULE(e), 50 + v, 0.5f);
        fctx c = {.m = CG_MODULE(e),
                  .kind = K_ENC,
                  .sm = {.causal = (v & 3) == 1,
                         .key_pad = (v & 3) >= 2 ? cg_test_mask(CG_SHAPE(2, 3), pad) : NULL}};
        cg_tensor *x = randn_leaf(&r, CG_SHAPE(2, 3, 6));
        gradcheck_module(&c, 1, &x, 2e-3, 2e-2);
        cg_release(x);
        cg_module_free(CG_MODULE(e));
    }
}
END_TEST

START_TEST(test_grad_dec_layer)
{
    cg_rng r = cg_rng_new(37);
    const uint8_t tpad[4] = {0, 0, 0, 1};       /* B=2, T=2 */
    const uint8_t spad[6] = {0, 1, 1, 0, 0, 0}; /* B=2, S=3 */
    for (int v = 0; v < 8; v++) {               /* v & 4: bias=False */
        bool nf = v & 1;
        cg_tf_config cfg = small_cfg(v & 2 ? CG_NORM_LAYERNORM : CG_NORM_RMSNORM,
                                     v & 2 ? CG_ACT_GELU : CG_ACT_RELU, nf);
        cfg.no_bias = v & 4;
        cg_dec_layer *d = cg_dec_layer_new(&cfg, NULL);
        randomize(CG_MODULE(d), 60 + v, 0.5f);
        fctx c = {.m = CG_MODULE(d),
                  .kind = K_DEC,
                  .sm = {.causal = true,
                         .key_pad = (v & 3) >= 2 ? cg_test_mask(CG_SHAPE(2, 2), tpad) : NULL},
                  .cm = {.key_pad = (v & 3) >= 1 ? cg_test_mask(CG_SHAPE(2, 3), spad) : NULL}};
        cg_tensor *in[2] = {randn_leaf(&r, CG_SHAPE(2, 2, 6)), randn_leaf(&r, CG_SHAPE(2, 3, 6))};
        gradcheck_module(&c, 2, in, 2e-3, 2e-2);
        cg_release_all(2, in[0], in[1]);
        cg_module_free(CG_MODULE(d));
    }
}
END_TEST

START_TEST(test_grad_block_and_stacks)
{
    cg_rng r = cg_rng_new(38);
    cg_tf_config cfg = small_cfg(CG_NORM_LAYERNORM, CG_ACT_GELU, true);
    cg_tensor *x = randn_leaf(&r, CG_SHAPE(1, 3, 6));
    for (int nb = 0; nb < 2; nb++) { /* with biases, and bias=False */
        cfg.no_bias = nb;
        cg_lm_block *b = cg_lm_block_new(&cfg, NULL);
        randomize(CG_MODULE(b), 70, 0.5f);
        fctx c = {.m = CG_MODULE(b), .kind = K_BLOCK, .sm = {.causal = true}};
        gradcheck_module(&c, 1, &x, 2e-3, 2e-2);
        cg_module_free(CG_MODULE(b));
    }

    /* a pre-norm encoder stack with ln_f, and a post-norm decoder stack */
    cg_tf_config ec = small_cfg(CG_NORM_RMSNORM, CG_ACT_GELU, true);
    cg_enc_stack *es = cg_enc_stack_new(2, &ec, NULL);
    randomize(CG_MODULE(es), 71, 0.5f);
    const uint8_t spad[3] = {0, 0, 1};
    const cg_tensor *spt = cg_test_mask(CG_SHAPE(1, 3), spad);
    fctx c2 = {.m = CG_MODULE(es), .kind = K_ENC_STACK, .sm = {.key_pad = spt}};
    cg_tensor *src = randn_leaf(&r, CG_SHAPE(1, 3, 6));
    gradcheck_module(&c2, 1, &src, 2e-3, 2e-2);
    cg_module_free(CG_MODULE(es));

    cg_tf_config dc = small_cfg(CG_NORM_LAYERNORM, CG_ACT_GELU, false);
    dc.no_bias = true; /* bias=False: no Linear or LayerNorm bias */
    cg_dec_stack *ds = cg_dec_stack_new(2, &dc, NULL);
    randomize(CG_MODULE(ds), 72, 0.5f);
    fctx c3 = {
        .m = CG_MODULE(ds), .kind = K_DEC_STACK, .sm = {.causal = true}, .cm = {.key_pad = spt}};
    cg_tensor *in[2] = {x, src};
    gradcheck_module(&c3, 2, in, 2e-3, 2e-2);
    cg_module_free(CG_MODULE(ds));
    cg_release_all(2, x, src);
}
END_TEST

/* Dropout inside a layer in train mode: the mask is replayed each call by
 * resetting the generator, so finite differences see the same function. */
START_TEST(test_grad_layer_with_dropout)
{
    for (int pre = 0; pre < 2; pre++) { /* the dropout (and pre-norm's add) in the product */
        cg_rng r = cg_rng_new(39);
        cg_rng dr = cg_rng_new(5);
        cg_tf_config cfg = small_cfg(CG_NORM_LAYERNORM, CG_ACT_GELU, pre);
        cfg.dropout = 0.25f;
        cfg.dropout_rng = &dr;
        cg_enc_layer *e = cg_enc_layer_new(&cfg, NULL);
        randomize(CG_MODULE(e), 80, 0.5f);
        fctx c = {.m = CG_MODULE(e), .kind = K_ENC, .sm = {.causal = true}, .rng = &dr, .rng0 = dr};
        cg_tensor *x = randn_leaf(&r, CG_SHAPE(2, 2, 6));
        gradcheck_module(&c, 1, &x, 2e-3, 2e-2);
        cg_release(x);
        cg_module_free(CG_MODULE(e));
    }
}
END_TEST

/* A linear layer's refusal names the three shapes, the rule, and what
 * breaks it (a PyTorch user's W_ih given the state instead of the input
 * read only the rule before), in cg_affine, and in cg_linear_fn with and
 * without a graph. */
START_TEST(test_linear_refusal_says_why)
{
    cg_tensor *x = cg_zeros(CG_SHAPE(16, 32)), *w = cg_zeros(CG_SHAPE(192, 64));
    cg_tensor *w3 = cg_zeros(CG_SHAPE(2, 192, 32)), *b = cg_zeros(CG_SHAPE(64));
    cg_tensor *s = cg_scalar(1.0f), *w1 = cg_zeros(CG_SHAPE(192, 1)),
              *x4 = cg_zeros(CG_SHAPE(4, 64));
    CG_ASSERT_FAILS(cg_affine(x, w, NULL),
                    "linear: input [16, 32], weight [192, 64], bias none: need x [..., in], weight "
                    "[out, in], bias [out] (x ends in 32, the weight's in is 64)");
    for (int grad = 0; grad < 2; grad++) {
        if (!grad)
            cg_no_grad_begin();
        CG_ASSERT_FAILS(cg_linear_fn(x, w, NULL), "(x ends in 32, the weight's in is 64)");
        if (!grad)
            cg_no_grad_end();
    }
    CG_ASSERT_FAILS(cg_affine(x, w3, NULL), "(the weight has 3 dims)");
    CG_ASSERT_FAILS(cg_linear_fn(x, w3, NULL), "(the weight has 3 dims)");
    CG_ASSERT_FAILS(cg_affine(s, w1, NULL), "(x is a scalar)");
    CG_ASSERT_FAILS(cg_linear_fn(x4, w, b), "(the bias is not [192])");
    cg_release_all(7, x, w, w3, b, s, w1, x4);
}
END_TEST

/* A GRU written from ops one time step at a time, as examples/gru.c
 * builds it (torch.nn.GRU's cell, gate order r, z, n): the input
 * projection of every step in one product, each step's slice of it
 * (cg_select, whose backward adds into the projection's gradient), the
 * gates as views of the thirds of [B, 3H]. The forward against the
 * equations in double, and the gradcheck over the input, h0 and the four
 * parameters through three steps (the state, W_hh and b_hh used at each). */
enum { GRU_B = 2, GRU_T = 3, GRU_E = 3, GRU_H = 4 };

static cg_tensor *gru_cell_ops(cg_tensor *gi, cg_tensor *h, cg_tensor *w_hh, cg_tensor *b_hh)
{
    const int64_t H = GRU_H;
    cg_tensor *gh = cg_affine(h, w_hh, b_hh);
    cg_tensor *rz = cg_sigmoid(cg_add(cg_narrow(gi, -1, 0, 2 * H), cg_narrow(gh, -1, 0, 2 * H)));
    cg_tensor *r = cg_narrow(rz, -1, 0, H), *z = cg_narrow(rz, -1, H, H);
    cg_tensor *n =
        cg_tanh(cg_add(cg_narrow(gi, -1, 2 * H, H), cg_mul(r, cg_narrow(gh, -1, 2 * H, H))));
    return cg_add(n, cg_mul(z, cg_sub(h, n)));
}

/* in: x [B, T, E], h0 [B, H], w_ih [3H, E], w_hh [3H, H], b_ih [3H],
 * b_hh [3H] -> every step's state, [B, T, H] */
static cg_tensor *gru_ops_fn(void *ctx, cg_tensor *const *in)
{
    (void)ctx;
    cg_scope *s = cg_scope_begin();
    cg_tensor *gi = cg_affine(in[0], in[2], in[4]), *h = in[1], *hs[GRU_T];
    for (int t = 0; t < GRU_T; t++)
        hs[t] = h = gru_cell_ops(cg_select(gi, 1, t), h, in[3], in[5]);
    cg_tensor *out = cg_keep(cg_stack(hs, GRU_T, 1));
    cg_scope_end(s);
    return out;
}

static double sigmoid_d(double v) { return 1.0 / (1.0 + exp(-v)); }

START_TEST(test_grad_gru_from_ops)
{
    cg_rng r = cg_rng_new(44);
    const int64_t B = GRU_B, T = GRU_T, E = GRU_E, H = GRU_H;
    cg_tensor *in[6] = {randn_leaf(&r, CG_SHAPE(B, T, E)),  randn_leaf(&r, CG_SHAPE(B, H)),
                        randn_leaf(&r, CG_SHAPE(3 * H, E)), randn_leaf(&r, CG_SHAPE(3 * H, H)),
                        randn_leaf(&r, CG_SHAPE(3 * H)),    randn_leaf(&r, CG_SHAPE(3 * H))};
    cg_tensor *y = gru_ops_fn(NULL, in);
    ck_assert_msg(y && y->ndim == 3 && y->shape[0] == B && y->shape[1] == T && y->shape[2] == H,
                  "%s", cg_last_error());
    float *v[6], *got = cg_test_values(y);
    for (int i = 0; i < 6; i++)
        v[i] = cg_test_values(in[i]);
    const float *x = v[0], *wi = v[2], *wh = v[3], *bi = v[4], *bh = v[5];
    for (int64_t b = 0; b < B; b++) {
        double h[GRU_H], hn[GRU_H];
        for (int64_t j = 0; j < H; j++)
            h[j] = v[1][b * H + j];
        for (int64_t t = 0; t < T; t++) {
            double gi[3 * GRU_H], gh[3 * GRU_H];
            for (int64_t o = 0; o < 3 * H; o++) {
                gi[o] = bi[o], gh[o] = bh[o];
                for (int64_t k = 0; k < E; k++)
                    gi[o] += (double)wi[o * E + k] * x[(b * T + t) * E + k];
                for (int64_t k = 0; k < H; k++)
                    gh[o] += (double)wh[o * H + k] * h[k];
            }
            for (int64_t j = 0; j < H; j++) {
                double rr = sigmoid_d(gi[j] + gh[j]), zz = sigmoid_d(gi[H + j] + gh[H + j]);
                double nn = tanh(gi[2 * H + j] + rr * gh[2 * H + j]);
                hn[j] = (1 - zz) * nn + zz * h[j];
            }
            for (int64_t j = 0; j < H; j++) {
                h[j] = hn[j];
                double g = got[(b * T + t) * H + j];
                ck_assert_msg(fabs(g - h[j]) <= 1e-5 * (1 + fabs(h[j])),
                              "b %lld t %lld j %lld: %g, expected %g", (long long)b, (long long)t,
                              (long long)j, g, h[j]);
            }
        }
    }
    cg_gradcheck_report rep;
    ck_assert_msg(cg_gradcheck(gru_ops_fn, NULL, 6, in, NULL, &rep), "%s", rep.message);
    ck_assert_int_gt(rep.checked, 0);
    for (int i = 0; i < 6; i++) {
        free(v[i]);
        cg_release(in[i]);
    }
    free(got);
    cg_release(y);
}
END_TEST

/* ============================================================== suite */
static Suite *nn_suite(void)
{
    Suite *s = suite_create("nn");
    TCase *reg = tcase_create("registry");
    tcase_add_test(reg, test_names_basic);
    tcase_add_test(reg, test_names_transformer);
    tcase_add_test(reg, test_registry_lookup_and_errors);
    tcase_add_test(reg, test_act_norm_tables);
    tcase_add_test(reg, test_stacks_draw_order);
    tcase_add_test(reg, test_shared_modules);
    tcase_add_test(reg, test_zero_grad_and_train_mode);
    tcase_add_test(reg, test_init);
    tcase_add_test(reg, test_init_skip);
    tcase_add_test(reg, test_reset_parameters);
    tcase_add_test(reg, test_init_bad_arguments);
    tcase_add_test(reg, test_save_load);
    tcase_add_test(reg, test_load_strict);
    tcase_add_test(reg, test_kept_weights_follow_changes);
    suite_add_tcase(s, reg);

    TCase *fw = tcase_create("forward");
    tcase_add_test(fw, test_linear_forward);
    tcase_add_test(fw, test_embedding_forward);
    tcase_add_test(fw, test_norm_forward);
    tcase_add_test(fw, test_norm_options);
    tcase_add_test(fw, test_dropout_train_eval);
    tcase_add_test(fw, test_posenc);
    tcase_add_test(fw, test_ff_forward);
    tcase_add_test(fw, test_mha_forward_naive);
    tcase_add_test(fw, test_mha_forward_torch);
    tcase_add_test(fw, test_transformer_torch);
    tcase_add_test(fw, test_transformer_dropout_modes);
    tcase_add_test(fw, test_residual_fused);
    tcase_add_test(fw, test_ff_hook_on_fc1);
    suite_add_tcase(s, fw);

    TCase *gr = tcase_create("gradcheck");
    tcase_set_timeout(gr, 300);
    tcase_add_test(gr, test_grad_linear);
    tcase_add_test(gr, test_linear_no_inputs);
    tcase_add_test(gr, test_grad_embedding);
    tcase_add_test(gr, test_grad_norms);
    tcase_add_test(gr, test_grad_norm_add);
    tcase_add_test(gr, test_ff_relu_fused);
    tcase_add_test(gr, test_grad_dropout_posenc);
    tcase_add_test(gr, test_grad_ff);
    tcase_add_test(gr, test_multitask_two_backwards);
    tcase_add_test(gr, test_grad_mha);
    tcase_add_test(gr, test_grad_attention_float_mask);
    tcase_add_test(gr, test_sdpa_without_mask);
    tcase_add_test(gr, test_attention_shape_refusals);
    tcase_add_test(gr, test_mha_mask_grad_torch);
    tcase_add_test(gr, test_mha_qk_hook);
    tcase_add_test(gr, test_grad_enc_layer);
    tcase_add_test(gr, test_grad_dec_layer);
    tcase_add_test(gr, test_grad_block_and_stacks);
    tcase_add_test(gr, test_grad_layer_with_dropout);
    tcase_add_test(gr, test_grad_gru_from_ops);
    tcase_add_test(gr, test_linear_refusal_says_why);
    suite_add_tcase(s, gr);
    return s;
}

int main(void)
{
    Suite *s[] = {nn_suite()};
    return cg_test_run(s, 1);
}
