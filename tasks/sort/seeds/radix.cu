// sort family: LSD radix sort (reduce-then-scan per digit pass) with a one-CTA regime for small N.
//
// Keys. A float's bits u map to an order-preserving uint32: negatives flip every bit, positives
// (and +0.0) set the sign bit; so -0.0 -> 0x7fffffff sorts just before +0.0 -> 0x80000000 (the
// task accepts either order). Only the first pass reads x (converting as it loads); the passes
// between move converted keys; the last pass converts back as it stores into y.
//
// Small regime (N <= SMALL_N, one CTA): x is loaded into shared memory as keys, padded with
// 0xffffffff up to the next power of two P, sorted by a bitonic network (each thread takes
// compare-exchange pairs, one __syncthreads per stage) and the first N are written to y. No
// workspace, one kernel; N = 1 is a network with no stages.
//
// Large regime: PASSES = ceil(32 / RADIX_BITS) digit passes, least significant digit first (the
// last pass's digit may be narrower: 32 = 6+6+6+6+6+2, say). A fixed grid of G = min(tiles,
// SMs * BLOCKS_PER_SM) CTAs splits the TILE = THREADS * ITEMS tiles evenly (CTA b owns tiles
// [tiles*b/G, tiles*(b+1)/G)), and every pass runs three kernels on the stream:
//   upsweep   CTA b counts the digits of its element range in a shared-memory histogram and
//             stores it digit-major: counts[d * G + b];
//   scan      one CTA per digit d scans its row in place: counts[d * G + b] becomes the number
//             of digit-d keys in CTAs before b, and totals[d] the digit's count. (Each downsweep
//             CTA scans the RADIX totals itself: slot of digit d for CTA b = keys of smaller
//             digits + counts[d * G + b].)
//   downsweep CTA b walks its tiles in order. A tile is read warp-striped (warp w owns 32*ITEMS
//             consecutive keys, lane l's item i is key w*32*ITEMS + i*32 + l), so (warp, item,
//             lane) order is input order. Each warp ranks its keys stably, item by item: a key's
//             rank is the warp's running count of its digit plus the lanes below it that hold
//             the same digit (found by __match_any_sync or by ballots, knob MATCH); the highest
//             such lane advances the count. Per digit, the
//             warps' counts become exclusive offsets across warps, and a block scan over digits
//             gives each digit's start in the tile. Keys are written to shared memory in
//             (digit, input order) order, then stored from there with consecutive threads on
//             consecutive slots: slot j of digit d goes to offset[d] + j - start[d], so runs of
//             one digit are written coalesced. offset[d] then advances by the tile's count.
//   Every step keeps input order among equal digits, so each pass is a stable counting sort and
//   LSD is correct. Passes ping-pong between workspace and y; pass p writes y when PASSES-1-p is
//   even, so the last pass always lands in y (pass 0 reads x, which is never written).
// The per-CTA digit counts (G x 2^RADIX_BITS words) and the digit totals cannot live in the
// workspace: for a power-of-two N it is exactly N floats, all of them taken by the ping-pong.
// They live in fixed __device__ arrays (MAX_G x RADIX and RADIX words), each entry used written
// by the upsweep or the scan before it is read (no initialisation, no allocation). Concurrent launches of this kernel on two streams would
// share it; the task's calls are serialised on one stream.
//
// Knobs:
//   RADIX_BITS     digit width: 4..8 -> 8..4 passes (more bits: fewer passes, more scatter runs);
//   THREADS        threads per CTA of the upsweep/downsweep;
//   ITEMS          keys per thread per tile (tile = THREADS * ITEMS);
//   BLOCKS_PER_SM  grid size G = SMs * BLOCKS_PER_SM (capped at MAX_G and the tile count);
//   SMALL_N        the one-CTA bitonic regime's largest N (0: never; also its shared-memory size);
//   MATCH          how a warp finds the lanes sharing a digit: 0 __match_any_sync, 1 a ballot
//                  per digit bit (RADIX_BITS + 1 ballots; CUB's choice for its match ranking);
//   PDL            1: every kernel after the first of a call is launched with programmatic
//                  stream serialization (sm_90), so its launch and CTA setup overlap the previous
//                  kernel's tail; each kernel's first statement is griddepcontrol.wait, which
//                  returns once the previous grid has completed and its writes are visible (no
//                  kernel triggers early), so the ordering is that of plain launches.
#include <cuda_runtime.h>
#include <stdint.h>

#define RADIX_BITS 8        // knob: 4 5 6 7 8
#define THREADS 256         // knob: 128 256 512
#define ITEMS 16            // knob: 4 8 12 16
#define BLOCKS_PER_SM 2     // knob: 1 2 4 8
#define SMALL_N 4096        // knob: 0 1024 2048 4096 8192
#define MATCH 1             // knob: 0 1
#define PDL 0               // knob: 0 1
// Knob constraints (evo_fsr/knobs.py): the blocks asked for per SM fit its 2048 threads; the
// downsweep's static shared memory (tile keys + one digit histogram per warp) stays under 44 KiB
// (the 48 KiB static limit less the per-digit arrays).
// constraint: THREADS * BLOCKS_PER_SM <= 2048
// constraint: THREADS * ITEMS * 4 + (THREADS // 32) * 2 ** RADIX_BITS * 4 <= 45056

static_assert(THREADS * BLOCKS_PER_SM <= 2048, "knob constraint: THREADS * BLOCKS_PER_SM <= 2048");
static_assert(THREADS * ITEMS * 4 + (THREADS / 32) * (1 << RADIX_BITS) * 4 <= 45056,
              "knob constraint: THREADS * ITEMS * 4 + (THREADS // 32) * 2 ** RADIX_BITS * 4 <= 45056");
static_assert(RADIX_BITS >= 1 && RADIX_BITS <= 8, "RADIX_BITS must be 1..8");
static_assert(THREADS % 32 == 0 && THREADS >= 32 && THREADS <= 1024, "THREADS: a warp multiple <= 1024");
static_assert(ITEMS >= 1, "ITEMS must be positive");
static_assert(SMALL_N == 0 || (SMALL_N & (SMALL_N - 1)) == 0, "SMALL_N must be 0 or a power of two");
static_assert(SMALL_N * 4 <= 32768, "SMALL_N keys must fit 32 KiB of shared memory");
static_assert(PDL == 0 || PDL == 1, "PDL must be 0 or 1");
static_assert(MATCH == 0 || MATCH == 1, "MATCH must be 0 or 1");

#define RADIX (1 << RADIX_BITS)
#define DIGIT_MASK (RADIX - 1)
#define PASSES ((32 + RADIX_BITS - 1) / RADIX_BITS)
#define NWARPS (THREADS / 32)
#define TILE (THREADS * ITEMS)
#define MAX_G 2048
#define SCAN_THREADS 256
#define SMALL_THREADS 512
#define DIGITS_PER_THREAD ((RADIX + THREADS - 1) / THREADS)

typedef unsigned int u32;

__device__ u32 g_counts[MAX_G * RADIX];
__device__ u32 g_totals[RADIX];

__device__ __forceinline__ u32 to_key(u32 u) { return u ^ ((u >> 31) ? 0xffffffffu : 0x80000000u); }
__device__ __forceinline__ u32 from_key(u32 k) { return k ^ ((k >> 31) ? 0x80000000u : 0xffffffffu); }
__device__ __forceinline__ u32 digit_of(u32 k, int shift) { return (k >> shift) & DIGIT_MASK; }

// The lanes of the warp whose digit equals this lane's (all 32 lanes call it; invalid lanes hold
// d = RADIX and get the invalid lanes). MATCH 0: __match_any_sync; MATCH 1: one ballot for
// validity and one per digit bit, narrowing the mask to lanes agreeing on each.
__device__ __forceinline__ u32 same_digit_lanes(u32 d, bool valid) {
#if MATCH == 0
    (void)valid;
    return __match_any_sync(0xffffffffu, d);
#else
    const u32 v = __ballot_sync(0xffffffffu, valid);
    u32 peers = valid ? v : ~v;
#pragma unroll
    for (int b = 0; b < RADIX_BITS; ++b) {
        const bool bit = (d >> b) & 1u;
        const u32 ones = __ballot_sync(0xffffffffu, bit);
        peers &= bit ? ones : ~ones;
    }
    return peers;
#endif
}

// PDL: wait until the grid this one depends on has completed (a no-op for a plain launch).
__device__ __forceinline__ void wait_for_previous_grid() {
#if PDL
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Exclusive scan of one value per thread over a block of NT threads; *total gets the sum.
// warp_sums holds NT/32 words. Ends with the block synchronised (warp_sums free again).
template <int NT>
__device__ __forceinline__ u32 block_exclusive_scan(u32 v, u32* warp_sums, u32* total) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    u32 inclusive = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const u32 t = __shfl_up_sync(0xffffffffu, inclusive, o);
        if (lane >= o) inclusive += t;
    }
    if (lane == 31) warp_sums[warp] = inclusive;
    __syncthreads();
    u32 before = 0, all = 0;
#pragma unroll
    for (int w = 0; w < NT / 32; ++w) {
        const u32 s = warp_sums[w];
        if (w < warp) before += s;
        all += s;
    }
    __syncthreads();
    *total = all;
    return before + inclusive - v;
}

// ---------------------------------------------------------------- small regime: one CTA, bitonic
__global__ void __launch_bounds__(SMALL_THREADS) small_sort(const float* __restrict__ x, float* __restrict__ y, int n) {
    __shared__ u32 s[SMALL_N > 0 ? SMALL_N : 1];
    int p = 1;
    while (p < n) p <<= 1;
    for (int i = threadIdx.x; i < p; i += SMALL_THREADS)
        s[i] = i < n ? to_key(__float_as_uint(x[i])) : 0xffffffffu;
    __syncthreads();
    for (int k = 2; k <= p; k <<= 1) {
        for (int j = k >> 1; j > 0; j >>= 1) {
            for (int q = threadIdx.x; q < (p >> 1); q += SMALL_THREADS) {
                const int i = ((q & ~(j - 1)) << 1) | (q & (j - 1));   // low index of pair q
                const int l = i + j;
                const u32 a = s[i], b = s[l];
                const bool ascending = (i & k) == 0;
                if (ascending ? (a > b) : (a < b)) { s[i] = b; s[l] = a; }
            }
            __syncthreads();
        }
    }
    for (int i = threadIdx.x; i < n; i += SMALL_THREADS) y[i] = __uint_as_float(from_key(s[i]));
}

// ---------------------------------------------------------------- large regime
__device__ __forceinline__ void cta_range(int tiles, int G, long long* begin_tile, long long* end_tile) {
    *begin_tile = (long long)tiles * blockIdx.x / G;
    *end_tile = (long long)tiles * (blockIdx.x + 1) / G;
}

__global__ void __launch_bounds__(THREADS) upsweep(const u32* __restrict__ src, int n, int tiles, int G, int shift,
                                                   int first) {
    __shared__ u32 h[RADIX];
    wait_for_previous_grid();
    for (int d = threadIdx.x; d < RADIX; d += THREADS) h[d] = 0;
    __syncthreads();
    long long t0, t1;
    cta_range(tiles, G, &t0, &t1);
    const long long begin = t0 * TILE;
    const long long end = t1 * TILE < (long long)n ? t1 * TILE : (long long)n;
    for (long long base = begin; base < end; base += TILE) {
        u32 k[ITEMS];
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
            const long long idx = base + i * THREADS + threadIdx.x;
            k[i] = idx < end ? src[idx] : 0u;
        }
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
            const long long idx = base + i * THREADS + threadIdx.x;
            if (idx < end) atomicAdd(&h[digit_of(first ? to_key(k[i]) : k[i], shift)], 1u);
        }
    }
    __syncthreads();
    for (int d = threadIdx.x; d < RADIX; d += THREADS) g_counts[d * G + blockIdx.x] = h[d];
}

// One CTA per digit d: counts[d * G + b] becomes the exclusive prefix over CTAs b' < b of digit d;
// totals[d] gets the digit's count over the whole array.
__global__ void __launch_bounds__(SCAN_THREADS) scan_counts(int G) {
    __shared__ u32 warp_sums[SCAN_THREADS / 32];
    wait_for_previous_grid();
    u32* column = g_counts + blockIdx.x * G;
    u32 carry = 0;
    for (int base = 0; base < G; base += SCAN_THREADS) {
        const int b = base + threadIdx.x;
        const u32 v = b < G ? column[b] : 0u;
        u32 total;
        const u32 before = block_exclusive_scan<SCAN_THREADS>(v, warp_sums, &total);
        if (b < G) column[b] = carry + before;
        carry += total;
    }
    if (threadIdx.x == 0) g_totals[blockIdx.x] = carry;
}

__global__ void __launch_bounds__(THREADS) downsweep(const u32* __restrict__ src, u32* __restrict__ dst, int n,
                                                     int tiles, int G, int shift, int first, int last) {
    __shared__ u32 s_keys[TILE];
    __shared__ u32 s_warp[NWARPS][RADIX];   // per-warp digit counts, then exclusive offsets across warps
    __shared__ u32 s_off[RADIX];            // next global slot of each digit for this CTA
    __shared__ u32 s_start[RADIX];          // start of each digit within the tile
    __shared__ u32 s_cnt[RADIX];            // count of each digit within the tile
    __shared__ u32 s_sums[NWARPS];
    wait_for_previous_grid();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const u32 lanes_below = (1u << lane) - 1u;
    {   // first slot of digit d for this CTA: keys of smaller digits (all CTAs), then of digit d (CTAs before)
        u32 total[DIGITS_PER_THREAD], mine = 0, all;
#pragma unroll
        for (int q = 0; q < DIGITS_PER_THREAD; ++q) {
            const int d = threadIdx.x * DIGITS_PER_THREAD + q;
            total[q] = d < RADIX ? g_totals[d] : 0u;
            mine += total[q];
        }
        u32 run = block_exclusive_scan<THREADS>(mine, s_sums, &all);
#pragma unroll
        for (int q = 0; q < DIGITS_PER_THREAD; ++q) {
            const int d = threadIdx.x * DIGITS_PER_THREAD + q;
            if (d < RADIX) s_off[d] = run + g_counts[d * G + blockIdx.x];
            run += total[q];
        }
    }
    long long t0, t1;
    cta_range(tiles, G, &t0, &t1);
    for (long long tile = t0; tile < t1; ++tile) {
        const long long base = tile * TILE;
        const int valid_in_tile = (long long)n - base < TILE ? (int)((long long)n - base) : TILE;
        for (int k = threadIdx.x; k < NWARPS * RADIX; k += THREADS) (&s_warp[0][0])[k] = 0;
        // warp-striped load: warp w owns keys [w*32*ITEMS, (w+1)*32*ITEMS) of the tile
        u32 key[ITEMS], rank[ITEMS];
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
            const int pos = warp * 32 * ITEMS + i * 32 + lane;
            key[i] = pos < valid_in_tile ? src[base + pos] : 0u;
            if (first) key[i] = to_key(key[i]);
        }
        __syncthreads();
        // stable rank within the warp, item by item (item i of every lane precedes item i + 1)
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
            const bool valid = warp * 32 * ITEMS + i * 32 + lane < valid_in_tile;
            const u32 d = valid ? digit_of(key[i], shift) : (u32)RADIX;   // RADIX: matches no digit
            const u32 peers = same_digit_lanes(d, valid);
            u32 count = 0;
            if (valid) count = s_warp[warp][d];
            rank[i] = count + __popc(peers & lanes_below);
            __syncwarp();
            if (valid && lane == 31 - __clz(peers)) s_warp[warp][d] = count + __popc(peers);
            __syncwarp();
        }
        __syncthreads();
        // per digit: warp counts -> exclusive offsets across warps; the tile's count
        u32 mine = 0;
#pragma unroll
        for (int q = 0; q < DIGITS_PER_THREAD; ++q) {
            const int d = threadIdx.x * DIGITS_PER_THREAD + q;
            if (d < RADIX) {
                u32 s = 0;
#pragma unroll
                for (int w = 0; w < NWARPS; ++w) {
                    const u32 c = s_warp[w][d];
                    s_warp[w][d] = s;
                    s += c;
                }
                s_cnt[d] = s;
                mine += s;
            }
        }
        u32 total;
        u32 start = block_exclusive_scan<THREADS>(mine, s_sums, &total);
#pragma unroll
        for (int q = 0; q < DIGITS_PER_THREAD; ++q) {
            const int d = threadIdx.x * DIGITS_PER_THREAD + q;
            if (d < RADIX) {
                s_start[d] = start;
                start += s_cnt[d];
            }
        }
        __syncthreads();
        // keys into shared memory in (digit, input order) order
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
            if (warp * 32 * ITEMS + i * 32 + lane < valid_in_tile) {
                const u32 d = digit_of(key[i], shift);
                s_keys[s_start[d] + s_warp[warp][d] + rank[i]] = key[i];
            }
        }
        __syncthreads();
        // consecutive threads store consecutive slots: runs of one digit are coalesced
        for (int j = threadIdx.x; j < valid_in_tile; j += THREADS) {
            const u32 k = s_keys[j];
            const u32 d = digit_of(k, shift);
            dst[s_off[d] + (u32)j - s_start[d]] = last ? from_key(k) : k;
        }
        __syncthreads();
        for (int d = threadIdx.x; d < RADIX; d += THREADS) s_off[d] += s_cnt[d];
        // the next tile's first __syncthreads (after zeroing s_warp) orders this update before use
    }
}

// Launches kernel<<<grid, block, 0, stream>>>(args...), with programmatic stream serialization
// when PDL and dependent (a kernel after the first of this call).
template <typename... Params, typename... Args>
static void launch_on(void (*kernel)(Params...), int grid, int block, bool dependent, cudaStream_t stream,
                      Args... args) {
#if PDL
    if (dependent) {
        cudaLaunchConfig_t config = {};
        config.gridDim = dim3((unsigned)grid);
        config.blockDim = dim3((unsigned)block);
        config.dynamicSmemBytes = 0;
        config.stream = stream;
        cudaLaunchAttribute attribute[1];
        attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attribute[0].val.programmaticStreamSerializationAllowed = 1;
        config.attrs = attribute;
        config.numAttrs = 1;
        cudaLaunchKernelEx(&config, kernel, ((Params)args)...);
        return;
    }
#endif
    (void)dependent;
    kernel<<<grid, block, 0, stream>>>(((Params)args)...);
}

static int multiprocessors() {
    static int cached_device = -1, cached_sms = 0;
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return 1;
    if (device != cached_device) {
        int sms = 0;
        if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || sms < 1) sms = 1;
        cached_device = device;
        cached_sms = sms;
    }
    return cached_sms;
}

extern "C" int launch(const float* x, float* y, float* workspace, int N, cudaStream_t stream) {
    if (N <= 0) return 0;
    if (N <= SMALL_N) {
        small_sort<<<1, SMALL_THREADS, 0, stream>>>(x, y, N);
        return (int)cudaGetLastError();
    }
    const int tiles = (int)(((long long)N + TILE - 1) / TILE);
    long long g = (long long)multiprocessors() * BLOCKS_PER_SM;
    if (g > MAX_G) g = MAX_G;
    if (g > tiles) g = tiles;
    const int G = (int)g;
    u32* yk = reinterpret_cast<u32*>(y);
    u32* wk = reinterpret_cast<u32*>(workspace);
    const u32* src = reinterpret_cast<const u32*>(x);
    for (int pass = 0; pass < PASSES; ++pass) {
        u32* dst = ((PASSES - 1 - pass) % 2 == 0) ? yk : wk;
        const int shift = pass * RADIX_BITS;
        const int first = pass == 0, last = pass == PASSES - 1;
        launch_on(upsweep, G, THREADS, pass > 0, stream, src, N, tiles, G, shift, first);
        launch_on(scan_counts, RADIX, SCAN_THREADS, true, stream, G);
        launch_on(downsweep, G, THREADS, true, stream, src, dst, N, tiles, G, shift, first, last);
        src = dst;
    }
    return (int)cudaGetLastError();
}
