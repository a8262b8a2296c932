// prefix_sum family: single-pass scan with decoupled look-back (Merrill & Garland).
// Block b scans tile b (tile index = blockIdx.x, as CUB does: blocks are dispatched in increasing
// blockIdx order, so a tile only ever waits on tiles whose blocks have already started: no
// deadlock). It loads THREADS * ITEMS elements in a blocked arrangement (thread t holds elements
// t * ITEMS .. t * ITEMS + ITEMS - 1 of the tile; see LOAD below) and scans them with
// cub::BlockScan. Its first warp publishes the tile's aggregate, looks back over the status words
// of the preceding tiles WINDOW at a time (summing aggregates until it meets an inclusive prefix),
// publishes the tile's inclusive prefix and hands the exclusive prefix to the block scan (prefix
// callback). y is written from the blocked arrangement the same way, mirrored.
// x is read once and y written once; there is no memset and no second kernel.
//
// LOAD 0: cub::BlockLoad / BlockStore, WARP_TRANSPOSE (scalar warp-striped accesses, coalesced,
// staged through shared memory). LOAD 1: each thread reads its ITEMS consecutive elements
// directly (float4 when x is 16-byte aligned; not coalesced across a warp), no staging. LOAD 2:
// each warp moves its own 32 * ITEMS elements of the tile with coalesced float4 accesses (lane l
// takes float4 l, l + 32, ... of the warp's segment) into shared memory, and each thread then
// reads its ITEMS elements back as float4s; y goes the mirror way (blocked float4s into shared
// memory, then coalesced float4 stores). Only a warp touches its segment: __syncwarp, no block
// barrier. The float4 slots of a segment are XOR-swizzled within 128-byte rows, so that both the
// striped and the blocked float4 accesses of shared memory are free of bank conflicts, with no
// padding (shared memory: exactly the tile). For LOAD 1 and 2, float4 global accesses are used
// per pointer (x, y 16-byte aligned, chosen on the host) on full tiles; the last partial tile and
// a misaligned pointer use scalar accesses (guarded on the partial tile; for LOAD 2 still
// warp-striped and coalesced, through the same shared layout).
// LOAD 3: the tile stays in shared memory (plain order) and is scanned there, so that few registers
// hold it while its block waits on the look-back and more blocks fit an SM (more tiles in flight:
// on an H200, 4, 5 and 6 resident blocks of LOAD 2 read 1.06x, 1.12x and 1.18x torch.cumsum, and
// LOAD 3, 32 registers and 8 blocks of 256 threads, 1.23x with CACHE 1 and 1.25x with CACHE 0). A
// full tile with a 16-byte aligned x arrives by one bulk copy of the tensor memory accelerator
// (cp.async.bulk, completing on a shared-memory mbarrier), issued by thread 0 first thing; each
// warp then sums its segment of the tile in rounds of 32 float4s (lane l: float4 l of a round,
// conflict-free), the block's warp totals and the look-back give each warp its prefix, and a
// second pass over the rounds scans them in place (a float4 scanned in the lane, a shuffle scan
// across the warp, a carry from round to round). A full tile with a 16-byte aligned y leaves by
// one bulk store. Partial tiles and misaligned pointers load and store coalesced scalars.
// CACHE 1: streaming cache hints, x read with ld.global.cs and y written with st.global.cs
// (__ldcs / __stcs; LOAD 3's bulk copies carry an L2 evict-first policy instead; for LOAD 0
// through small iterators handed to cub's BlockLoad / BlockStore, so the knob acts on every
// LOAD); CACHE 0: plain accesses (x through the read-only path, as the compiler picks for a const
// __restrict__ pointer).
//
// WINDOW: status words read per look-back round, WINDOW / 32 a lane (nearest tiles first, the
// warp's loads issued together). Wider windows were slower on an H100 (2^26: 83% and 81% of a copy
// at 64 and 128 against 85% at 32): the wait is for late-landing tiles, not for rounds.
// EARLY_LOOKBACK 1 (LOAD 3 only; the other LOADs ignore it): one more warp a block does the
// look-back from the block's start, during the tile's bulk load (scan_early below). Traced on an
// H100 at 2^26 floats (scripts/probe_scan.py, trace:), a tile of EARLY_LOOKBACK 0 lived 19.5 us: 5.4 us
// loading, 10.5 us in the look-back (3 rounds and 2 re-polls of ~2 us L2 round trips under
// load), 2 us storing; with the look-back left out the same tiles streamed at 98% of a copy, so
// the look-back's wait, not the data movement, is what keeps the kernel at 85%: a tile cannot end
// before every earlier tile has landed, and loads landed 2.6 to 10.7 us after issue (p10-p90).
// Started early, with a 1 us backoff and 32 KB tiles (the defaults), the look-back overlaps the
// load: 1.21x / 1.26x / 1.27x torch.cumsum at 2^24 / 2^26 / 1e8+7 against 1.19x / 1.23x / 1.23x.
// BACKOFF_NS: a look-back warp whose window is not yet all published sleeps that long (__nanosleep)
// before reading it again (0: it spins), so that waiting blocks poll the L2 less (CUB backs off
// the same way). MIN_BLOCKS: blocks per SM asked of the compiler (__launch_bounds__), which caps
// the registers a thread may take; 0 leaves them to the compiler (with THREADS 256 and LOAD 2,
// nvcc 13 then takes 40 registers: 6 blocks an SM; __launch_bounds__(256, 1) would let it take 72).
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
#include <iterator>

// THREADS 128 (16 KB tiles, twice as many) is the default since the twenty-seventh session: on an H200
// it read 1.17x / 1.30x / 1.33x torch.cumsum at 2^24 / 2^26 / 1e8+7 under the verdict against 1.14x /
// 1.31x / 1.32x at 256, and 1.29x / 1.37x / 1.35x against 1.25x / 1.36x / 1.36x timed in-process
// (scripts/probe_inproc.py).
#define THREADS 128         // knob: 128 256 512
#define ITEMS 32            // knob: 4 8 12 16 20 24 28 32
#define SCAN_ALGO 2         // knob: 0 1 2
#define LOAD 3              // knob: 0 1 2 3
#define CACHE 0             // knob: 0 1
#define BACKOFF_NS 1024     // knob: 0 64 256 1024
#define MIN_BLOCKS 0        // knob: 0 4 6 8
#define WINDOW 32           // knob: 32 64 128
#define EARLY_LOOKBACK 1    // knob: 0 1
// SCAN_ALGO: 0 raking, 1 raking with memoized partials, 2 warp scans (cub::BlockScanAlgorithm); LOAD
// 3 scans with its own warp shuffles and ignores it.
// LOAD: 0 cub BLOCK_LOAD_WARP_TRANSPOSE / BLOCK_STORE_WARP_TRANSPOSE (tile staged in shared
// memory); 1 direct blocked loads and stores, float4 where the pointer allows (no staging);
// 2 coalesced float4 warp-striped accesses staged through (swizzled) shared memory; 3 the tile
// resident in shared memory (bulk copies in and out), scanned there.
// CACHE: 0 plain global accesses; 1 streaming hints (ld.global.cs / st.global.cs), every LOAD.
// Knob constraints (evo_fsr/knobs.py): with LOAD 0, 2 or 3 the staged tile stays within 32 KB, so
// that several blocks fit an SM (LOAD 1 stages nothing: any tile); the blocks asked for per SM
// fit its 2048 threads.
// constraint: THREADS * ITEMS * (LOAD != 1) <= 8192
// constraint: (THREADS + 32 * EARLY_LOOKBACK) * MIN_BLOCKS <= 2048

static_assert(THREADS * ITEMS * (LOAD != 1) <= 8192, "knob constraint: THREADS * ITEMS * (LOAD != 1) <= 8192");
static_assert((THREADS + 32 * EARLY_LOOKBACK) * MIN_BLOCKS <= 2048,
              "knob constraint: (THREADS + 32 * EARLY_LOOKBACK) * MIN_BLOCKS <= 2048");
static_assert(EARLY_LOOKBACK == 0 || EARLY_LOOKBACK == 1, "EARLY_LOOKBACK must be 0 or 1");
static_assert(THREADS % 32 == 0 && THREADS >= 32 && THREADS <= 1024, "THREADS: a warp multiple <= 1024");
static_assert(ITEMS >= 4 && ITEMS % 4 == 0, "ITEMS: a multiple of 4 (float4 loads, 16-byte aligned tiles)");
static_assert(SCAN_ALGO >= 0 && SCAN_ALGO <= 2, "SCAN_ALGO must be 0, 1 or 2");
static_assert(LOAD >= 0 && LOAD <= 3, "LOAD must be 0, 1, 2 or 3");
static_assert(BACKOFF_NS >= 0 && MIN_BLOCKS >= 0, "BACKOFF_NS and MIN_BLOCKS: not negative");
static_assert(CACHE == 0 || CACHE == 1, "CACHE must be 0 or 1");
static_assert(WINDOW % 32 == 0 && WINDOW >= 32, "WINDOW: a multiple of 32 status words");

#define TILE (THREADS * ITEMS)
#define FLAG_AGGREGATE 1u
#define FLAG_PREFIX 2u
#define EPOCH_MASK 0x3FFFFFFFu
#if MIN_BLOCKS
#define BOUNDS __launch_bounds__(THREADS, MIN_BLOCKS)
#define EARLY_BOUNDS __launch_bounds__(THREADS + 32, MIN_BLOCKS)
#else
#define BOUNDS __launch_bounds__(THREADS)
#define EARLY_BOUNDS __launch_bounds__(THREADS + 32)
#endif

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

// The look-back loop (one warp): the sum of every tile before `tile`, from the status words of the
// tiles before it, back to the nearest inclusive prefix. `hook()` is called by each lane at the top
// of every round and between polls of an unpublished word (the early look-back publishes its
// tile's aggregate from there as soon as its data warps have it; a no-op otherwise).
struct NoHook {
    __device__ __forceinline__ void operator()() const {}
};

template <typename Hook>
__device__ float look_back(const unsigned long long* status, long long tile, unsigned first_valid, int lane,
                           Hook& hook) {
    float exclusive = 0.0f;
    long long top = tile;                           // window: tiles top-WINDOW .. top-1
    constexpr int M = WINDOW / 32;                  // status words a lane reads per round
    while (true) {
        hook();
        // Lane l reads tiles top-1-l*M .. top-M-l*M (nearest first). The warp polls as one: all
        // its loads are issued together (WINDOW * 8 contiguous bytes) and issued again, together,
        // until every word is published in this call; per-lane polling of single words sent up to
        // 32 requests a poll and, with the early look-back's long waits, flooded the L2.
        unsigned long long word[M];
        while (true) {
            bool published = true;
#pragma unroll
            for (int j = 0; j < M; ++j) {
                const long long t = top - 1 - (long long)lane * M - j;
                word[j] = t >= 0 ? load_word(status + t) : 0ull;
            }
#pragma unroll
            for (int j = 0; j < M; ++j) {
                const long long t = top - 1 - (long long)lane * M - j;
                // hi - first_valid is 0 or 1 for a word of this call; else another epoch, flag 0 or 3
                if (t >= 0 && (unsigned)(word[j] >> 32) - first_valid > 1u) published = false;
            }
            if (__all_sync(0xffffffffu, published)) break;
            hook();
#if BACKOFF_NS
            __nanosleep(BACKOFF_NS);
#endif
        }
        float lane_sum = 0.0f;
        bool lane_prefix = false;                   // this lane met an inclusive prefix
#pragma unroll
        for (int j = 0; j < M; ++j) {
            const long long t = top - 1 - (long long)lane * M - j;
            const unsigned hi = t >= 0 ? (unsigned)(word[j] >> 32) & 3u : FLAG_PREFIX;   // before tile 0: empty prefix
            if (!lane_prefix) lane_sum += t >= 0 ? __uint_as_float((unsigned)word[j]) : 0.0f;   // up to the nearest prefix
            lane_prefix = lane_prefix || hi == FLAG_PREFIX;
        }
        const unsigned prefix_lanes = __ballot_sync(0xffffffffu, lane_prefix);
        const int limit = prefix_lanes ? __ffs(prefix_lanes) - 1 : 31;   // nearest inclusive prefix
        float v = lane <= limit ? lane_sum : 0.0f;
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
        exclusive += v;
        if (prefix_lanes) return exclusive;
        top -= WINDOW;
    }
}

// The last tile, its look-back done: every tile has published (the tiles in its windows it read
// itself, the ones before the inclusive prefix it found had published for that prefix to exist),
// so every block has read G: advance it (lane 0 of the look-back warp).
__device__ __forceinline__ void advance_generation(unsigned long long* words, unsigned generation, int lane) {
    if (blockIdx.x == gridDim.x - 1) {
        __syncwarp();
        if (lane == 0) {
            __threadfence();
            store_word(words, (unsigned long long)(generation + 1u));
        }
    }
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
        if (lane == 0) publish(status + tile, epoch, FLAG_AGGREGATE, aggregate);
        NoHook none;
        const float exclusive = look_back(status, tile, (epoch << 2) | FLAG_AGGREGATE, lane, none);
        if (lane == 0) publish(status + tile, epoch, FLAG_PREFIX, exclusive + aggregate);
        advance_generation(words, generation, lane);
        return exclusive;
    }
};

// Global accesses of x and y (LOAD 1 and 2, and LOAD 0 with CACHE 1 through the iterators
// below): CACHE 1 streams them (ld.global.cs / st.global.cs, evict-first), CACHE 0 leaves the
// choice to the compiler.
template <typename T>
__device__ __forceinline__ T load_x(const T* p) {
#if CACHE
    return __ldcs(p);
#else
    return *p;
#endif
}

template <typename T>
__device__ __forceinline__ void store_y(T* p, const T& value) {
#if CACHE
    __stcs(p, value);
#else
    *p = value;
#endif
}

#if LOAD == 0 && CACHE
// LOAD 0 with CACHE 1: cub's warp-striped loads and stores go through these (cub reads
// it[i], writes (it + i)[j]), i.e. through load_x / store_y: the same ld.global.cs / st.global.cs
// as LOAD 1 and 2. (cub's own CacheModified iterators emit generic-space ld.cs / st.cs in volatile
// asm.)
struct StreamingX {
    typedef std::random_access_iterator_tag iterator_category;
    typedef float value_type;
    typedef ptrdiff_t difference_type;
    typedef const float* pointer;
    typedef float reference;
    const float* p;
    __device__ __forceinline__ float operator[](ptrdiff_t i) const { return load_x(p + i); }
    __device__ __forceinline__ StreamingX operator+(ptrdiff_t i) const { return StreamingX{p + i}; }
};

struct StreamingY {
    struct Ref {
        float* q;
        __device__ __forceinline__ const Ref& operator=(float value) const { store_y(q, value); return *this; }
    };
    typedef std::random_access_iterator_tag iterator_category;
    typedef float value_type;
    typedef ptrdiff_t difference_type;
    typedef float* pointer;
    typedef Ref reference;
    float* p;
    __device__ __forceinline__ Ref operator[](ptrdiff_t i) const { return Ref{p + i}; }
    __device__ __forceinline__ StreamingY operator+(ptrdiff_t i) const { return StreamingY{p + i}; }
};
#endif

#if LOAD == 2
constexpr int odd_part(int v) { return v % 2 ? v : odd_part(v / 2); }
static constexpr int kOddQ = odd_part(ITEMS / 4);

// Where float4 slot s (0 <= s < 8 * ITEMS) of a warp's segment lives in the warp's staging area:
// a permutation of the 8 slots (128 bytes, all 32 banks) of each row s / 8. The striped accesses
// (float4, lane l: slot l + 32 k, a quarter warp per row; scalar, lane l: float l + 32 m, the warp
// on one row) stay conflict-free under any row-wise XOR. The blocked ones (lane l: slot l * Q + j,
// Q = ITEMS / 4) are conflict-free as they stand for an odd Q; for an even Q the column is XORed
// with (row / odd part of Q) mod 8, which spreads each quarter warp's 8 slots over the 8 columns
// (checked by enumeration for every Q up to 15).
__device__ __forceinline__ int slot(int s) {
    constexpr int Q = ITEMS / 4;
    if (Q % 2 == 1) return s;
    return s ^ (((s >> 3) / kOddQ) & 7);
}

// threadIdx.x, read in volatile asm: a read the compiler cannot merge with the first one.
__device__ __forceinline__ int thread_index_again() {
    unsigned t;
    asm volatile("mov.u32 %0, %%tid.x;" : "=r"(t));
    return (int)t;
}
#endif

// VEC_X / VEC_Y: x / y is 16-byte aligned (then so is every thread's run of ITEMS elements of a
// tile and every warp's segment, ITEMS being a multiple of 4); decided on the host, LOAD 1 to 3.
#if LOAD != 3
template <bool VEC_X, bool VEC_Y>
__global__ void BOUNDS
scan_lookback(const float* __restrict__ x, float* __restrict__ y, unsigned long long* __restrict__ words,
              long long n) {
#if LOAD == 0
    __shared__ union {
        typename TileLoad::TempStorage load;
        typename TileStore::TempStorage store;
        typename TileScan::TempStorage scan;
    } tmp;
#elif LOAD == 1
    __shared__ typename TileScan::TempStorage tmp_scan;
#else
    __shared__ float4 stage[TILE / 4];     // warp w: slots w * 8 * ITEMS .. (w + 1) * 8 * ITEMS - 1
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
#if CACHE
    const StreamingX x_in{x + base};
#else
    const float* x_in = x + base;
#endif
    if (valid == TILE)
        TileLoad(tmp.load).Load(x_in, v);
    else
        TileLoad(tmp.load).Load(x_in, v, valid, 0.0f);
    __syncthreads();
    TileScan scan(tmp.scan);
#elif LOAD == 1
    {
        const int first = threadIdx.x * ITEMS;
        const float* src = x + base + first;
        if (valid == TILE) {
            if (VEC_X) {
                const float4* src4 = reinterpret_cast<const float4*>(src);
#pragma unroll
                for (int j = 0; j < ITEMS / 4; ++j) {
                    const float4 q = load_x(src4 + j);
                    v[4 * j] = q.x; v[4 * j + 1] = q.y; v[4 * j + 2] = q.z; v[4 * j + 3] = q.w;
                }
            } else {
#pragma unroll
                for (int i = 0; i < ITEMS; ++i) v[i] = load_x(src + i);
            }
        } else {
#pragma unroll
            for (int i = 0; i < ITEMS; ++i) v[i] = first + i < valid ? load_x(src + i) : 0.0f;
        }
    }
    TileScan scan(tmp_scan);
#else
    {
        // The warp's segment: elements seg_first .. seg_first + 32 * ITEMS - 1 of the tile, i.e.
        // those of its 32 threads in the blocked arrangement; only this warp touches its slots.
        const int lane = threadIdx.x & 31;
        const int seg_first = (threadIdx.x >> 5) * (32 * ITEMS);
        const int seg_valid = valid - seg_first;    // its elements below n (<= 0: none)
        float4* seg = stage + seg_first / 4;
        float* seg_f = reinterpret_cast<float*>(seg);
        if (valid == TILE && VEC_X) {
            const float4* src = reinterpret_cast<const float4*>(x + base + seg_first);
            float4 r[ITEMS / 4];
#pragma unroll
            for (int k = 0; k < ITEMS / 4; ++k) r[k] = load_x(src + lane + 32 * k);
#pragma unroll
            for (int k = 0; k < ITEMS / 4; ++k) seg[slot(lane + 32 * k)] = r[k];
        } else {                                     // scalar, still striped (coalesced)
            const float* src = x + base + seg_first;
            float r[ITEMS];
#pragma unroll
            for (int m = 0; m < ITEMS; ++m) {
                const int e = lane + 32 * m;
                r[m] = (valid == TILE || e < seg_valid) ? load_x(src + e) : 0.0f;
            }
#pragma unroll
            for (int m = 0; m < ITEMS; ++m) {
                const int e = lane + 32 * m;
                seg_f[4 * slot(e >> 2) + (e & 3)] = r[m];
            }
        }
        __syncwarp();
#pragma unroll
        for (int j = 0; j < ITEMS / 4; ++j) {       // blocked: the thread's ITEMS consecutive elements
            const float4 q = seg[slot(lane * (ITEMS / 4) + j)];
            v[4 * j] = q.x; v[4 * j + 1] = q.y; v[4 * j + 2] = q.z; v[4 * j + 3] = q.w;
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
#if CACHE
    const StreamingY y_out{y + base};
#else
    float* y_out = y + base;
#endif
    if (valid == TILE)
        TileStore(tmp.store).Store(y_out, v);
    else
        TileStore(tmp.store).Store(y_out, v, valid);
#elif LOAD == 1
    {
        const int first = threadIdx.x * ITEMS;
        float* dst = y + base + first;
        if (valid == TILE) {
            if (VEC_Y) {
                float4* dst4 = reinterpret_cast<float4*>(dst);
#pragma unroll
                for (int j = 0; j < ITEMS / 4; ++j)
                    store_y(dst4 + j, make_float4(v[4 * j], v[4 * j + 1], v[4 * j + 2], v[4 * j + 3]));
            } else {
#pragma unroll
                for (int i = 0; i < ITEMS; ++i) store_y(dst + i, v[i]);
            }
        } else {
#pragma unroll
            for (int i = 0; i < ITEMS; ++i)
                if (first + i < valid) store_y(dst + i, v[i]);
        }
    }
#else
    {
        // The same segment, from threadIdx.x read again: its addresses are recomputed here rather
        // than kept live across the scan (THREADS 256, ITEMS 24: 48 registers, not 58, in the
        // twelfth session's measurement).
        const int t = thread_index_again();
        const int lane = t & 31;
        const int seg_first = (t >> 5) * (32 * ITEMS);
        const int seg_valid = valid - seg_first;
        float4* seg = stage + seg_first / 4;
        float* seg_f = reinterpret_cast<float*>(seg);
        __syncwarp();                               // the warp's reads of its staged x are done
#pragma unroll
        for (int j = 0; j < ITEMS / 4; ++j)
            seg[slot(lane * (ITEMS / 4) + j)] = make_float4(v[4 * j], v[4 * j + 1], v[4 * j + 2], v[4 * j + 3]);
        __syncwarp();
        if (valid == TILE && VEC_Y) {
            float4* dst = reinterpret_cast<float4*>(y + base + seg_first);
#pragma unroll
            for (int k = 0; k < ITEMS / 4; ++k) store_y(dst + lane + 32 * k, seg[slot(lane + 32 * k)]);
        } else {
            float* dst = y + base + seg_first;
#pragma unroll
            for (int m = 0; m < ITEMS; ++m) {
                const int e = lane + 32 * m;
                if (valid == TILE || e < seg_valid) store_y(dst + e, seg_f[4 * slot(e >> 2) + (e & 3)]);
            }
        }
    }
#endif
}

#else  // LOAD == 3
// Bulk copies between global and shared memory (sm_90 TMA, 1-D: 16-byte aligned addresses, a
// multiple of 16 bytes). A load completes on the block's mbarrier (its byte count expected
// first); a store reads shared memory asynchronously, so its issuer waits for that read before
// the block may end. CACHE 1: both carry an L2 evict-first policy, as ld/st.global.cs do.
__device__ __forceinline__ unsigned shared_address(const void* p) {
    return (unsigned)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ unsigned long long l2_evict_first() {
    unsigned long long policy;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
    return policy;
}

__device__ __forceinline__ void bulk_load(void* dst, const void* src, unsigned bytes, unsigned long long* bar) {
    const unsigned b = shared_address(bar);
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(b) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");   // the init, seen by the copy
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(b), "r"(bytes) : "memory");
#if CACHE
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;"
                 ::"r"(shared_address(dst)), "l"(src), "r"(bytes), "r"(b), "l"(l2_evict_first()) : "memory");
#else
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(shared_address(dst)), "l"(src), "r"(bytes), "r"(b) : "memory");
#endif
}

// Until the bulk load on ``bar`` (its phase 0: the block's only one) has landed.
__device__ __forceinline__ void bulk_load_wait(unsigned long long* bar) {
    asm volatile("{\n\t.reg .pred done;\n"
                 "WAIT_%=:\n\t"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], 0;\n\t"
                 "@!done bra WAIT_%=;\n}" ::"r"(shared_address(bar)) : "memory");
}

__device__ __forceinline__ void bulk_store_and_wait(void* dst, const void* src, unsigned bytes) {
#if CACHE
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group.L2::cache_hint [%0], [%1], %2, %3;"
                 ::"l"(dst), "r"(shared_address(src)), "r"(bytes), "l"(l2_evict_first()) : "memory");
#else
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
                 ::"l"(dst), "r"(shared_address(src)), "r"(bytes) : "memory");
#endif
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");   // shared memory read out
}

// Inclusive and exclusive sums of the 32 lanes' values (shuffles).
__device__ __forceinline__ float warp_inclusive(float v, int lane) {
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
        const float u = __shfl_up_sync(0xffffffffu, v, off);
        if (lane >= off) v += u;
    }
    return v;
}

__device__ __forceinline__ float exclusive_of(float inclusive, int lane) {
    const float before = __shfl_up_sync(0xffffffffu, inclusive, 1);
    return lane == 0 ? 0.0f : before;
}

// Pass 1: the sum of a warp's segment of the resident tile (rounds of 32 float4s, lane l: float4 l
// of a round, conflict-free), the same on every lane.
template <int ROUNDS>
__device__ __forceinline__ float segment_sum(const float4* seg, int lane) {
    float sum = 0.0f;
#pragma unroll
    for (int r = 0; r < ROUNDS; ++r) {
        const float4 q = seg[32 * r + lane];
        sum += (q.x + q.y) + (q.z + q.w);
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    return sum;
}

// Pass 2: the segment scanned in place, starting from `carry` (a float4 scanned in the lane, a
// shuffle scan across the warp, a carry from round to round).
template <int ROUNDS>
__device__ __forceinline__ void segment_scan(float4* seg, int lane, float carry) {
#pragma unroll
    for (int r = 0; r < ROUNDS; ++r) {
        float4 q = seg[32 * r + lane];
        q.y += q.x;
        q.z += q.y;
        q.w += q.z;
        const float inclusive = warp_inclusive(q.w, lane);
        const float add = carry + exclusive_of(inclusive, lane);
        q.x += add; q.y += add; q.z += add; q.w += add;
        seg[32 * r + lane] = q;
        carry += __shfl_sync(0xffffffffu, inclusive, 31);
    }
}

// Named barrier `id` over `count` threads (a multiple of 32): the data warps alone, or the data
// warps with the early look-back warp.
__device__ __forceinline__ void bar_sync(unsigned id, unsigned count) {
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
}

__device__ __forceinline__ void bar_arrive(unsigned id, unsigned count) {
    asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(count) : "memory");
}

// A partial tile or a misaligned x into shared memory: coalesced scalars by the data threads, 0
// past n (a full tile with a 16-byte aligned x arrives by one bulk copy instead).
__device__ __forceinline__ void load_tile_scalars(const float* x, float4* stage, long long base, int valid) {
    float* stage_f = reinterpret_cast<float*>(stage);
    for (int e = threadIdx.x; e < TILE; e += THREADS) stage_f[e] = e < valid ? load_x(x + base + e) : 0.0f;
}

// The tile out of shared memory into y: one bulk store (thread 0, which waits for the store's reads
// of shared memory) when full and y is 16-byte aligned, else coalesced scalars by the data threads.
// `sync()` is a barrier of the data threads.
template <typename Sync>
__device__ __forceinline__ void store_tile(float* y, const float4* stage, long long base, int valid, bool bulk_out,
                                           Sync sync) {
    if (bulk_out) {
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");   // the writes, seen by the copy
        sync();
        if (threadIdx.x == 0) bulk_store_and_wait(y + base, stage, TILE * 4u);
        return;
    }
    sync();
    const float* stage_f = reinterpret_cast<const float*>(stage);
    for (int e = threadIdx.x; e < valid; e += THREADS) store_y(y + base + e, stage_f[e]);
}

struct BlockSync {
    __device__ __forceinline__ void operator()() const { __syncthreads(); }
};

template <bool VEC_X, bool VEC_Y>
__global__ void BOUNDS
scan_resident(const float* __restrict__ x, float* __restrict__ y, unsigned long long* __restrict__ words,
              long long n) {
    constexpr int WARPS = THREADS / 32;
    constexpr int ROUNDS = ITEMS / 4;               // a warp's segment: ROUNDS rounds of 32 float4s
    __shared__ __align__(128) float4 stage[TILE / 4];
    __shared__ float warp_sums[WARPS];             // totals, then the warps' prefixes in the tile
    __shared__ unsigned long long landed;          // the bulk load's mbarrier
    const long long tile = blockIdx.x;
    const long long base = tile * TILE;
    const int valid = (int)(n - base < TILE ? n - base : TILE);
    const bool bulk_in = VEC_X && valid == TILE, bulk_out = VEC_Y && valid == TILE;
    if (bulk_in && threadIdx.x == 0) bulk_load(stage, x + base, TILE * 4u, &landed);
    unsigned generation = 0u;                      // thread 0: G, used at the look-back
    if (threadIdx.x == 0) generation = (unsigned)load_word(words);
    if (!bulk_in) load_tile_scalars(x, stage, base, valid);
    __syncthreads();                               // the scalar loads, or the mbarrier's init
    if (bulk_in) bulk_load_wait(&landed);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float4* seg = stage + warp * (32 * ROUNDS);
    const float sum = segment_sum<ROUNDS>(seg, lane);   // pass 1: the warp's total
    if (lane == 0) warp_sums[warp] = sum;
    __syncthreads();
    if (warp == 0) {                               // the tile's prefix, then each warp's
        const float total = lane < WARPS ? warp_sums[lane] : 0.0f;
        const float inclusive = warp_inclusive(total, lane);
        const float aggregate = __shfl_sync(0xffffffffu, inclusive, 31);
        float before = 0.0f;
        if (tile == 0) {
            if (lane == 0) {
                publish(words + 1, epoch_of(generation), FLAG_PREFIX, aggregate);
                if (gridDim.x == 1) store_word(words, (unsigned long long)(generation + 1u));   // one tile
            }
        } else {
            LookBack op{words, generation};
            before = op(aggregate);                // the same on every lane
        }
        const float warp_before = exclusive_of(inclusive, lane);
        if (lane < WARPS) warp_sums[lane] = before + warp_before;
    }
    __syncthreads();
    segment_scan<ROUNDS>(seg, lane, warp_sums[warp]);   // pass 2
    store_tile(y, stage, base, valid, bulk_out, BlockSync{});
}

#if EARLY_LOOKBACK
// EARLY_LOOKBACK 1: THREADS data threads (warps 0 .. WARPS-1) and one more warp, the look-back warp,
// which starts the look-back at once, while the tile's bulk load is in flight, instead of after it
// lands and is summed. The tile's aggregate reaches it through shared memory (`Handoff`); it
// publishes the aggregate from inside its polling (so that successors can pass this tile as soon
// as its data warps have summed it), then the inclusive prefix once both are known, and hands the
// exclusive prefix back. Barriers: 1 = data warps and the look-back warp (the prefix handed back:
// the look-back warp arrives, the data warps wait); 2 = the data warps alone.
struct Handoff {
    float aggregate;
    int ready;                                     // 1 once `aggregate` is written (reset per block)
    float before;                                  // the tile's exclusive prefix, for the data warps
};

// The look-back warp's hook: lane 0 publishes the tile's aggregate once (as soon as it is ready).
struct PublishAggregate {
    volatile Handoff* box;
    unsigned long long* word;
    unsigned epoch;
    bool done;
    __device__ __forceinline__ void operator()() {
        if ((threadIdx.x & 31) == 0 && !done && box->ready) {
            __threadfence_block();                 // the aggregate, read after the flag
            publish(word, epoch, FLAG_AGGREGATE, box->aggregate);
            done = true;
        }
    }
};

struct DataSync {
    __device__ __forceinline__ void operator()() const { bar_sync(2, THREADS); }
};

template <bool VEC_X, bool VEC_Y>
__global__ void EARLY_BOUNDS
scan_early(const float* __restrict__ x, float* __restrict__ y, unsigned long long* __restrict__ words,
           long long n) {
    constexpr int WARPS = THREADS / 32;
    constexpr int ROUNDS = ITEMS / 4;
    __shared__ __align__(128) float4 stage[TILE / 4];
    __shared__ float warp_sums[WARPS];             // totals, then the warps' prefixes in the tile
    __shared__ unsigned long long landed;
    __shared__ Handoff handoff;
    const long long tile = blockIdx.x;
    const long long base = tile * TILE;
    const int valid = (int)(n - base < TILE ? n - base : TILE);
    const bool bulk_in = VEC_X && valid == TILE, bulk_out = VEC_Y && valid == TILE;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    volatile Handoff* box = &handoff;
    if (bulk_in && threadIdx.x == 0) bulk_load(stage, x + base, TILE * 4u, &landed);
    unsigned generation = 0u;                      // look-back lane 0: G (used at the publishes)
    if (warp == WARPS && lane == 0) {
        generation = (unsigned)load_word(words);
        box->ready = 0;
    }
    if (!bulk_in && warp < WARPS) load_tile_scalars(x, stage, base, valid);
    __syncthreads();                               // the scalar loads, the mbarrier's init, `ready`

    if (warp == WARPS) {                           // the look-back warp
        generation = __shfl_sync(0xffffffffu, generation, 0);
        const unsigned epoch = epoch_of(generation);
        unsigned long long* status = words + 1;
        PublishAggregate hook{box, status + tile, epoch, tile == 0};   // tile 0 publishes its prefix only
        const float exclusive = tile == 0 ? 0.0f
                                          : look_back(status, tile, (epoch << 2) | FLAG_AGGREGATE, lane, hook);
        if (lane == 0) {
            while (!box->ready) {}                 // the data warps' aggregate
            __threadfence_block();
            publish(status + tile, epoch, FLAG_PREFIX, exclusive + box->aggregate);
            box->before = exclusive;
        }
        advance_generation(words, generation, lane);
        __syncwarp();
        bar_arrive(1, THREADS + 32);               // `before` written (bar.arrive orders it)
        return;
    }

    if (bulk_in) bulk_load_wait(&landed);
    float4* seg = stage + warp * (32 * ROUNDS);
    const float sum = segment_sum<ROUNDS>(seg, lane);   // pass 1
    if (lane == 0) warp_sums[warp] = sum;
    bar_sync(2, THREADS);
    if (warp == 0) {
        const float total = lane < WARPS ? warp_sums[lane] : 0.0f;
        const float inclusive = warp_inclusive(total, lane);
        if (lane == 31) {
            box->aggregate = inclusive;
            __threadfence_block();                 // the aggregate before the flag
            box->ready = 1;
        }
        const float warp_before = exclusive_of(inclusive, lane);
        if (lane < WARPS) warp_sums[lane] = warp_before;
    }
    bar_sync(1, THREADS + 32);                     // the look-back warp's exclusive prefix
    segment_scan<ROUNDS>(seg, lane, box->before + warp_sums[warp]);   // pass 2
    store_tile(y, stage, base, valid, bulk_out, DataSync{});
}
#endif
#endif

#if LOAD == 3
#if EARLY_LOOKBACK
#define RESIDENT_KERNEL scan_early
#else
#define RESIDENT_KERNEL scan_resident
#endif
// LOAD 3: the kernel prefers the largest shared-memory carveout (asked once per instantiation; a
// hint the driver may refine), so that its resident tiles, not the L1's share, bound the blocks
// an SM holds.
template <bool VX, bool VY>
static void run(const float* x, float* y, unsigned long long* words, long long n, unsigned blocks,
                cudaStream_t stream) {
    static const bool asked = [] {
        cudaFuncSetAttribute(RESIDENT_KERNEL<VX, VY>, cudaFuncAttributePreferredSharedMemoryCarveout,
                             cudaSharedmemCarveoutMaxShared);
        cudaGetLastError();                         // a refused hint is not the call's error
        return true;
    }();
    (void)asked;
#if EARLY_LOOKBACK
    scan_early<VX, VY><<<blocks, THREADS + 32, 0, stream>>>(x, y, words, n);
#else
    scan_resident<VX, VY><<<blocks, THREADS, 0, stream>>>(x, y, words, n);
#endif
}
#else
template <bool VX, bool VY>
static void run(const float* x, float* y, unsigned long long* words, long long n, unsigned blocks,
                cudaStream_t stream) {
    scan_lookback<VX, VY><<<blocks, THREADS, 0, stream>>>(x, y, words, n);
}
#endif

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
    run<false, false>(x, y, words, n, blocks, stream);
#else
    const bool vx = ((uintptr_t)x & 15) == 0, vy = ((uintptr_t)y & 15) == 0;
    if (vx && vy)
        run<true, true>(x, y, words, n, blocks, stream);
    else if (vx)
        run<true, false>(x, y, words, n, blocks, stream);
    else if (vy)
        run<false, true>(x, y, words, n, blocks, stream);
    else
        run<false, false>(x, y, words, n, blocks, stream);
#endif
    return (int)cudaGetLastError();
}
