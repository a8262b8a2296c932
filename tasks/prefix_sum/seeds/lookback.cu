// prefix_sum family: single-pass scan with decoupled look-back (Merrill & Garland).
// Block b scans tile b (tile index = blockIdx.x, as CUB does: blocks are dispatched in increasing
// blockIdx order, so a tile only ever waits on tiles whose blocks have already started: no
// deadlock). It loads THREADS * ITEMS elements in a blocked arrangement (LOAD 0: cub::BlockLoad,
// warp-transposed through shared memory, coalesced; LOAD 1: each thread reads its ITEMS
// consecutive elements directly, as float4 when x is 16-byte aligned, chosen on the host per
// pointer; the last partial tile, and a misaligned x, use guarded / scalar loads), and scans them
// with cub::BlockScan. Its first warp publishes the tile's aggregate, looks back over the status
// words of the preceding tiles 32 at a time (summing aggregates until it meets an inclusive
// prefix), publishes the tile's inclusive prefix and hands the exclusive prefix to the block scan
// (prefix callback). y is written the same way (float4 when y is 16-byte aligned, for LOAD 1).
// x is read once and y written once; there is no memset and no second kernel.
//
// Status words (no per-call clearing): in the task's workspace (N/32 + 1024 floats), rounded up
// to 8 bytes, word 0 holds a generation counter G (low 32 bits) and word 1 + t the status of
// tile t, all written and read as single 64-bit relaxed gpu-scope (strong) accesses. A status
// word is epoch(30) << 34 | flag(2) << 32 | float bits, flag 1 = aggregate, 2 = inclusive prefix,
// 0 and 3 = not published; the call's epoch is G * odd + salt mod 2^30, a bijection, so 2^30
// consecutive calls have distinct epochs. Lane 0 of every block reads G before its block
// publishes anything (its words carry the epoch made from what it read); the last tile
// (blockIdx.x == gridDim.x - 1), once its look-back is done, writes G + 1: by then every tile has
// published (the tiles in its windows it read itself, the ones before the inclusive prefix it
// found had published for that prefix to exist), so every block has read G. Words left by an
// earlier call (any N, any tile size) carry an older epoch and read as "not yet published". The
// epoch lives in device memory, so a CUDA-graph replay gets a new one as well (an epoch chosen on
// the host would be frozen into the graph, and a replay would trust the previous replay's words).
// Garbage passes as a word of this call only if it has exactly this epoch and a flag of 1 or 2
// (zeros and the harness's 0xFF poison have flags 0 and 3). Calls sharing a workspace must be
// stream-ordered (as with any scratch buffer).
#include <cuda_runtime.h>
#include <stdint.h>
#include <cub/block/block_load.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/block/block_store.cuh>

#define THREADS 256         // knob: 128 256 512
#define ITEMS 24            // knob: 4 8 12 16 20 24
#define SCAN_ALGO 0         // knob: 0 1 2
#define LOAD 0              // knob: 0 1
// SCAN_ALGO: 0 raking, 1 raking with memoized partials, 2 warp scans (cub::BlockScanAlgorithm).
// LOAD: 0 cub BLOCK_LOAD_WARP_TRANSPOSE / BLOCK_STORE_WARP_TRANSPOSE (tile staged in shared
// memory); 1 direct blocked loads and stores, float4 where the pointer allows (no staging).
// Knob constraints (evo_fsr/knobs.py): with LOAD 0 the staged tile stays within 24 KB, so that
// several blocks fit an SM (LOAD 1 stages nothing: any tile).
// constraint: THREADS * ITEMS * (1 - LOAD) <= 6144

static_assert(THREADS * ITEMS * (1 - LOAD) <= 6144, "knob constraint: THREADS * ITEMS * (1 - LOAD) <= 6144");
static_assert(THREADS % 32 == 0 && THREADS >= 32 && THREADS <= 1024, "THREADS: a warp multiple <= 1024");
static_assert(ITEMS >= 4 && ITEMS % 4 == 0, "ITEMS: a multiple of 4 (float4 loads, 16-byte aligned tiles)");
static_assert(SCAN_ALGO >= 0 && SCAN_ALGO <= 2, "SCAN_ALGO must be 0, 1 or 2");
static_assert(LOAD == 0 || LOAD == 1, "LOAD must be 0 or 1");

#define TILE (THREADS * ITEMS)
#define FLAG_AGGREGATE 1u
#define FLAG_PREFIX 2u
#define EPOCH_MASK 0x3FFFFFFFu

static constexpr cub::BlockScanAlgorithm kScanAlgo =
    SCAN_ALGO == 0 ? cub::BLOCK_SCAN_RAKING
                   : (SCAN_ALGO == 1 ? cub::BLOCK_SCAN_RAKING_MEMOIZE : cub::BLOCK_SCAN_WARP_SCANS);

typedef cub::BlockLoad<float, THREADS, ITEMS, cub::BLOCK_LOAD_WARP_TRANSPOSE> TileLoad;
typedef cub::BlockStore<float, THREADS, ITEMS, cub::BLOCK_STORE_WARP_TRANSPOSE> TileStore;
typedef cub::BlockScan<float, THREADS, kScanAlgo> TileScan;

// Strong (relaxed, gpu-scope) 64-bit accesses: never torn, never served from a stale L1 line.
__device__ __forceinline__ unsigned long long load_word(const unsigned long long* p) {
    unsigned long long v;
    asm volatile("ld.relaxed.gpu.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void store_word(unsigned long long* p, unsigned long long v) {
    asm volatile("st.relaxed.gpu.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

// The call's epoch: a bijection of the generation counter mod 2^30, so that 2^30 consecutive
// calls get distinct epochs (a constant byte or float fill of the workspace rarely matches).
__device__ __forceinline__ unsigned epoch_of(unsigned generation) {
    return (generation * 0x9E3779B1u + 0x2545F491u) & EPOCH_MASK;
}

__device__ __forceinline__ void publish(unsigned long long* word, unsigned epoch, unsigned flag, float value) {
    store_word(word, ((unsigned long long)((epoch << 2) | flag) << 32) | (unsigned long long)__float_as_uint(value));
}

// Called by the first warp of the block scan with the tile's aggregate; lane 0's return value
// becomes the tile's exclusive prefix.
struct LookBack {
    unsigned long long* words;      // words[0]: generation counter; words[1 + t]: tile t
    unsigned generation;            // lane 0: G (its low 32 bits) as read at the start of the block

    __device__ float operator()(float aggregate) {
        const int lane = threadIdx.x & 31;
        const long long tile = blockIdx.x;
        generation = __shfl_sync(0xffffffffu, generation, 0);   // long arrived: no wait here
        const unsigned epoch = epoch_of(generation);
        unsigned long long* status = words + 1;
        const unsigned first_valid = (epoch << 2) | FLAG_AGGREGATE;   // hi - first_valid: 0 or 1 when valid
        if (lane == 0) publish(status + tile, epoch, FLAG_AGGREGATE, aggregate);
        float exclusive = 0.0f;
        long long top = tile;                       // window: tiles top-32 .. top-1
        while (true) {
            const long long t = top - 1 - lane;     // lane 0 nearest
            unsigned hi = FLAG_PREFIX;              // before tile 0: an empty inclusive prefix
            unsigned lo = 0u;
            if (t >= 0) {
                unsigned long long word;
                do {                                // until tile t has published in this call
                    word = load_word(status + t);
                    hi = (unsigned)(word >> 32);
                } while (hi - first_valid > 1u);    // another epoch, or flag 0 or 3
                hi &= 3u;
                lo = (unsigned)word;
            }
            const unsigned prefix_lanes = __ballot_sync(0xffffffffu, hi == FLAG_PREFIX);
            const int limit = prefix_lanes ? __ffs(prefix_lanes) - 1 : 31;   // nearest inclusive prefix
            float v = lane <= limit ? __uint_as_float(lo) : 0.0f;
#pragma unroll
            for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
            exclusive += v;
            if (prefix_lanes) break;
            top -= 32;
        }
        if (lane == 0) publish(status + tile, epoch, FLAG_PREFIX, exclusive + aggregate);
        if (blockIdx.x == gridDim.x - 1) {     // the last tile
            // Every tile has published (the tiles in the windows directly, the ones before the
            // inclusive prefix that was found through it), so every block has read G: advance it.
            __syncwarp();
            if (lane == 0) {
                __threadfence();
                store_word(words, (unsigned long long)(generation + 1u));
            }
        }
        return exclusive;
    }
};

// VEC_X / VEC_Y: x / y is 16-byte aligned (then so is every thread's run of ITEMS elements of a
// tile, ITEMS being a multiple of 4); decided on the host, LOAD 1 only.
template <bool VEC_X, bool VEC_Y>
__global__ void __launch_bounds__(THREADS)
scan_lookback(const float* __restrict__ x, float* __restrict__ y, unsigned long long* __restrict__ words,
              long long n) {
#if LOAD == 0
    __shared__ union {
        typename TileLoad::TempStorage load;
        typename TileStore::TempStorage store;
        typename TileScan::TempStorage scan;
    } tmp;
#else
    __shared__ typename TileScan::TempStorage tmp_scan;
#endif
    const long long tile = blockIdx.x;
    // Thread 0 reads G first thing; the value is used (broadcast to warp 0) only at the look-back.
    unsigned generation = 0u;
    if (threadIdx.x == 0) generation = (unsigned)load_word(words);
    const long long base = tile * TILE;
    const int valid = (int)(n - base < TILE ? n - base : TILE);
    float v[ITEMS];
#if LOAD == 0
    if (valid == TILE)
        TileLoad(tmp.load).Load(x + base, v);
    else
        TileLoad(tmp.load).Load(x + base, v, valid, 0.0f);
    __syncthreads();
    TileScan scan(tmp.scan);
#else
    {
        const int first = threadIdx.x * ITEMS;
        const float* src = x + base + first;
        if (valid == TILE) {
            if (VEC_X) {
                const float4* src4 = reinterpret_cast<const float4*>(src);
#pragma unroll
                for (int j = 0; j < ITEMS / 4; ++j) {
                    const float4 q = src4[j];
                    v[4 * j] = q.x; v[4 * j + 1] = q.y; v[4 * j + 2] = q.z; v[4 * j + 3] = q.w;
                }
            } else {
#pragma unroll
                for (int i = 0; i < ITEMS; ++i) v[i] = src[i];
            }
        } else {
#pragma unroll
            for (int i = 0; i < ITEMS; ++i) v[i] = first + i < valid ? src[i] : 0.0f;
        }
    }
    TileScan scan(tmp_scan);
#endif
    if (tile == 0) {
        float aggregate;
        scan.InclusiveSum(v, v, aggregate);
        if (threadIdx.x == 0) {
            publish(words + 1, epoch_of(generation), FLAG_PREFIX, aggregate);
            if (gridDim.x == 1) store_word(words, (unsigned long long)(generation + 1u));   // one tile: nobody else reads G
        }
    } else {
        LookBack op{words, generation};
        scan.InclusiveSum(v, v, op);
    }
#if LOAD == 0
    __syncthreads();
    if (valid == TILE)
        TileStore(tmp.store).Store(y + base, v);
    else
        TileStore(tmp.store).Store(y + base, v, valid);
#else
    {
        const int first = threadIdx.x * ITEMS;
        float* dst = y + base + first;
        if (valid == TILE) {
            if (VEC_Y) {
                float4* dst4 = reinterpret_cast<float4*>(dst);
#pragma unroll
                for (int j = 0; j < ITEMS / 4; ++j)
                    dst4[j] = make_float4(v[4 * j], v[4 * j + 1], v[4 * j + 2], v[4 * j + 3]);
            } else {
#pragma unroll
                for (int i = 0; i < ITEMS; ++i) dst[i] = v[i];
            }
        } else {
#pragma unroll
            for (int i = 0; i < ITEMS; ++i)
                if (first + i < valid) dst[i] = v[i];
        }
    }
#endif
}

extern "C" int launch(const float* x, float* y, float* workspace, int N, cudaStream_t stream) {
    const long long n = N;
    if (n <= 0) return 0;
    const long long tiles = (n + TILE - 1) / TILE;
    // 8-byte aligned words inside the workspace (N/32 + 1024 floats >= 2 * (tiles + 1) + 1).
    uintptr_t at = (uintptr_t)workspace;
    at = (at + 7) & ~(uintptr_t)7;
    unsigned long long* words = reinterpret_cast<unsigned long long*>(at);
    const unsigned blocks = (unsigned)tiles;
#if LOAD == 0
    scan_lookback<false, false><<<blocks, THREADS, 0, stream>>>(x, y, words, n);
#else
    const bool vx = ((uintptr_t)x & 15) == 0, vy = ((uintptr_t)y & 15) == 0;
    if (vx && vy)
        scan_lookback<true, true><<<blocks, THREADS, 0, stream>>>(x, y, words, n);
    else if (vx)
        scan_lookback<true, false><<<blocks, THREADS, 0, stream>>>(x, y, words, n);
    else if (vy)
        scan_lookback<false, true><<<blocks, THREADS, 0, stream>>>(x, y, words, n);
    else
        scan_lookback<false, false><<<blocks, THREADS, 0, stream>>>(x, y, words, n);
#endif
    return (int)cudaGetLastError();
}
