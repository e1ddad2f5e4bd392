// The scalar softmax exponentials (vec-exp.h): libm expf, the sum over eight
// double lanes combined in a fixed order.
#include <math.h>

#include "vec-exp.h"

double ggml_exp_sum_ref(int64_t n, float *y, float m) {
    constexpr int LANES = 8;
    double acc[LANES] = {0};
    for (int64_t i = 0; i < n; i++) {
        y[i] = expf(y[i] - m);
        acc[i % LANES] += y[i];
    }
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}
