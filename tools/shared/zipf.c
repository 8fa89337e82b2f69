/*
 * zipf: the rejection-inversion sampler declared in zipf.h. H is an integral of the hat
 * function h(x) = x^-s; a draw inverts H at a uniform point between H(n + 1/2) and
 * H(3/2) - 1, rounds to the nearest rank k, and accepts k if the point lies within k's own
 * area under h (a squeeze test settles most draws without the exact one). The helpers keep
 * log1p(x)/x and expm1(x)/x accurate near x = 0, which is where s = 1 lands.
 * Not a general random-variate library.
 */
#include "zipf.h"

#include <math.h>

#include "rng.h"

static double
zipf_helper1(double x)
{
    return fabs(x) > 1e-8 ? log1p(x) / x : 1.0 - x * (0.5 - x * (1.0 / 3.0 - x * 0.25));
}

static double
zipf_helper2(double x)
{
    return fabs(x) > 1e-8 ? expm1(x) / x : 1.0 + x * 0.5 * (1.0 + x / 3.0 * (1.0 + x * 0.25));
}

static double
zipf_h_integral(const struct rl_zipf *z, double x)
{
    double lx = log(x);

    return zipf_helper2((1.0 - z->s) * lx) * lx;
}

static double
zipf_h(const struct rl_zipf *z, double x)
{
    return exp(-z->s * log(x));
}

static double
zipf_h_integral_inv(const struct rl_zipf *z, double x)
{
    double t = x * (1.0 - z->s);

    /* Rounding can push t just below -1, where log1p is undefined. */
    if (t < -1.0) {
        t = -1.0;
    }
    return exp(zipf_helper1(t) * x);
}

void
rl_zipf_init(struct rl_zipf *z, uint32_t n, double s)
{
    z->s = s;
    z->n = (double)n;
    z->h_x1 = zipf_h_integral(z, 1.5) - 1.0;
    z->h_n = zipf_h_integral(z, z->n + 0.5);
    z->thresh = 2.0 - zipf_h_integral_inv(z, zipf_h_integral(z, 2.5) - zipf_h(z, 2.0));
}

uint32_t
rl_zipf_sample(const struct rl_zipf *z, uint64_t *rng)
{
    double u, x, k;

    for (;;) {
        u = z->h_n + rl_rng_double(rng) * (z->h_x1 - z->h_n);
        x = zipf_h_integral_inv(z, u);
        k = floor(x + 0.5);
        if (k < 1.0) {
            k = 1.0;
        } else if (k > z->n) {
            k = z->n;
        }
        if (k - x <= z->thresh || u >= zipf_h_integral(z, k + 0.5) - zipf_h(z, k)) {
            return (uint32_t)k - 1;
        }
    }
}
