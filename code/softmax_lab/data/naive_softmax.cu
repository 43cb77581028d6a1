// The naive softmax in CUDA C: one thread per output element, on a 2-D grid of 16 x 16 blocks.
//
// Chapter 3's naive Triton kernel, written the way a first CUDA version is (the form of the seed lesson's
// exercise). Thread (row, col) walks its whole row twice, for the max and for the sum, and writes one element:
// each row is read 2N times by its N threads, O(N^2) loads, where the fused kernel reads it once.
//
//   nvcc -O3 -arch=sm_90 naive_softmax.cu -o naive_softmax && ./naive_softmax 1024 1024
//
// prints the shape, the largest error against a float64 softmax computed on the CPU, and the median time of
// 20 launches (CUDA events) as one line of JSON.
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <vector>
#include <cuda_runtime.h>

__global__ void naive_softmax_kernel(const float* __restrict__ in, float* __restrict__ out, int n_rows, int n_cols) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= n_rows || col >= n_cols) return;  // the grid rounds up: these threads have no element
    const float* x = in + (size_t)row * n_cols;
    float m = -INFINITY;                          // -FLT_MAX here would make an all -inf row's shift finite
    for (int i = 0; i < n_cols; ++i) m = fmaxf(m, x[i]);
    float sum = 0.0f;
    for (int i = 0; i < n_cols; ++i) sum += expf(x[i] - m);
    out[(size_t)row * n_cols + col] = expf(x[col] - m) / sum;
}

static void check(cudaError_t err, const char* what) {
    if (err != cudaSuccess) {
        fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(err));
        exit(1);
    }
}

int main(int argc, char** argv) {
    int n_rows = argc > 1 ? atoi(argv[1]) : 1024, n_cols = argc > 2 ? atoi(argv[2]) : 1024;
    size_t n = (size_t)n_rows * n_cols;
    std::vector<float> x(n), y(n);
    srand(0);
    for (size_t i = 0; i < n; ++i) x[i] = 6.0f * rand() / RAND_MAX - 3.0f;
    float *dx, *dy;
    check(cudaMalloc(&dx, n * sizeof(float)), "cudaMalloc");
    check(cudaMalloc(&dy, n * sizeof(float)), "cudaMalloc");
    check(cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice), "copy in");
    check(cudaMemset(dy, 0xff, n * sizeof(float)), "poison");  // NaN everywhere: an unwritten element shows

    dim3 block(16, 16);
    dim3 grid((n_cols + block.x - 1) / block.x, (n_rows + block.y - 1) / block.y);
    naive_softmax_kernel<<<grid, block>>>(dx, dy, n_rows, n_cols);
    check(cudaGetLastError(), "launch");
    check(cudaMemcpy(y.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost), "copy out");

    double worst = 0.0;
    for (int r = 0; r < n_rows; ++r) {
        const float* xr = &x[(size_t)r * n_cols];
        double m = *std::max_element(xr, xr + n_cols), s = 0.0;
        for (int i = 0; i < n_cols; ++i) s += exp((double)xr[i] - m);
        for (int i = 0; i < n_cols; ++i) {
            double err = fabs(exp((double)xr[i] - m) / s - y[(size_t)r * n_cols + i]);
            worst = std::isnan(err) ? INFINITY : std::max(worst, err);
        }
    }

    std::vector<float> ms(20);
    cudaEvent_t start, stop;
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    for (float& t : ms) {
        cudaEventRecord(start);
        naive_softmax_kernel<<<grid, block>>>(dx, dy, n_rows, n_cols);
        cudaEventRecord(stop);
        cudaEventSynchronize(stop);
        cudaEventElapsedTime(&t, start, stop);
    }
    std::sort(ms.begin(), ms.end());
    printf("{\"rows\": %d, \"cols\": %d, \"grid\": [%u, %u], \"block\": [16, 16], \"max_error\": %.3g, "
           "\"median_us\": %.2f}\n", n_rows, n_cols, grid.x, grid.y, worst, ms[ms.size() / 2] * 1000.0);
    cudaFree(dx);
    cudaFree(dy);
    return worst < 1e-6 ? 0 : 2;
}
