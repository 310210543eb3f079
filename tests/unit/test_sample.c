/* Token selection (src/model/sample.c): kvp_argmax against the definition it replaced — the
 * first index i with logits[i] > every earlier one — on ties, NaNs, signed zeros and lengths
 * that end inside and outside a vector. */
#include "harness.h"
#include "kvprobe/kvprobe.h"

static int32_t argmax_ref(const float *x, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

int main(void) {
    TEST("argmax: the first largest logit, as a scalar scan finds it, on every length 1..200") {
        static float x[200];
        uint32_t rng = 7;
        int bad = 0;
        for (int n = 1; n <= 200; n++) {
            for (int i = 0; i < n; i++) {
                rng = rng * 1664525u + 1013904223u;
                x[i] = (float)((int)(rng >> 24) % 9) - 4.0f; /* few values: many ties */
            }
            for (int at = 0; at < n; at += 7) { /* the maximum at every kind of position */
                float keep = x[at];
                x[at] = 100.0f;
                bad += kvp_argmax(x, n) != argmax_ref(x, n);
                x[at] = keep;
            }
            bad += kvp_argmax(x, n) != argmax_ref(x, n);
        }
        CHECK(bad == 0, "%d lengths / positions differ", bad);
    }
    TEST("argmax: NaN never wins unless first; +0 and -0 tie (the first wins); -inf rows") {
        float a[40];
        for (int i = 0; i < 40; i++) a[i] = -1.0f;
        a[5] = NAN, a[17] = 2.0f, a[33] = NAN;
        CHECK(kvp_argmax(a, 40) == 17, "%d", kvp_argmax(a, 40));
        a[0] = NAN;
        CHECK(kvp_argmax(a, 40) == 0 && argmax_ref(a, 40) == 0, "NaN at 0");
        for (int i = 0; i < 40; i++) a[i] = -INFINITY;
        CHECK(kvp_argmax(a, 40) == 0, "all -inf");
        a[0] = -1.0f, a[20] = -0.0f, a[25] = 0.0f;
        CHECK(kvp_argmax(a, 40) == 20 && argmax_ref(a, 40) == 20, "%d", kvp_argmax(a, 40));
        a[20] = 0.0f, a[25] = -0.0f;
        CHECK(kvp_argmax(a, 40) == 20, "%d", kvp_argmax(a, 40));
        CHECK(kvp_argmax(a, 1) == 0 && kvp_argmax(a, 0) == 0, "n <= 1");
    }
    TEST("argmax_margin: the margin over the largest other logit, as the scalar scan computes it") {
        static float x[300];
        uint32_t rng = 11;
        int bad = 0;
        for (int n = 1; n <= 300; n += 13) {
            for (int i = 0; i < n; i++) {
                rng = rng * 1664525u + 1013904223u;
                x[i] = (float)((int)(rng >> 20) % 2001 - 1000) * 0.01f;
            }
            if (n > 40) x[n / 3] = NAN, x[n / 2] = x[argmax_ref(x, n)]; /* a NaN and a tie for first */
            for (int zero = 0; zero < 2; zero++) {
                if (zero && n > 40) { /* the top three are signed zeros: which one is "second" sets the margin's sign */
                    for (int i = 0; i < n; i++) x[i] = -fabsf(x[i]) - 1.0f;
                    x[1] = -0.0f, x[5] = (n / 13) & 1 ? -0.0f : 0.0f, x[n - 1] = (n / 13) & 1 ? 0.0f : -0.0f;
                }
                int32_t ref = argmax_ref(x, n);
                float second = -INFINITY, margin;
                for (int i = 0; i < n; i++)
                    if (i != ref && x[i] > second) second = x[i];
                float want = x[ref] - second;
                int32_t got = kvp_argmax_margin(x, n, &margin);
                bad += got != ref || memcmp(&margin, &want, sizeof margin) != 0;
            }
        }
        CHECK(bad == 0, "%d cases differ", bad);
    }
    return harness_finish();
}
