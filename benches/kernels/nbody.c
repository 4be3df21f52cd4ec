/* N-body, all pairs with softening, structure of arrays: the C twin of nbody.cl. */
#include <math.h>
#include "common.h"

static int nbody_n;
static double *nbody_state;

void nbody_setup(int n) {
    nbody_n = n;
    free(nbody_state);
    nbody_state = bench_alloc((int64_t)n * 56);
    bench_srand(3);
    for (int i = 0; i < n * 7; i++) nbody_state[i] = bench_rand_double();
}

static void nbody(int n, int steps, double *x, double *y, double *z, double *vx, double *vy, double *vz, double *m) {
    double dt = 0.001;
    for (int step = 0; step < steps; step++) {
        for (int i = 0; i < n; i++) {
            double xi = x[i], yi = y[i], zi = z[i];
            double ax = 0.0, ay = 0.0, az = 0.0;
            for (int j = 0; j < n; j++) {
                double dx = x[j] - xi, dy = y[j] - yi, dz = z[j] - zi;
                double d2 = dx * dx + dy * dy + dz * dz + 0.01;
                double scale = m[j] / (d2 * sqrt(d2));
                ax = ax + dx * scale;
                ay = ay + dy * scale;
                az = az + dz * scale;
            }
            vx[i] = vx[i] + dt * ax;
            vy[i] = vy[i] + dt * ay;
            vz[i] = vz[i] + dt * az;
        }
        for (int i = 0; i < n; i++) {
            x[i] = x[i] + dt * vx[i];
            y[i] = y[i] + dt * vy[i];
            z[i] = z[i] + dt * vz[i];
        }
    }
}

int64_t nbody_run(void) {
    int n = nbody_n;
    double *s = nbody_state;
    nbody(n, 16, s, s + n, s + 2 * n, s + 3 * n, s + 4 * n, s + 5 * n, s + 6 * n);
    return bench_hash_doubles(s, n * 3);
}
