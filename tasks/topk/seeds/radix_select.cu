// topk radix-select family: one launch, one CTA or one thread-block cluster (DSMEM histograms).
//
// Keys: each float becomes an order-preserving uint32 (negatives inverted, positives get the sign
// bit set; -0.0 is mapped to +0.0 first so that the two zeros are one key). Finite floats give
// keys >= 0x00800000, and a larger key is a larger value.
//
// Regimes (launch()): N <= SINGLE_MAX runs one CTA of THREADS threads; larger N runs one thread-
// block cluster of CLUSTER CTAs (sm_90), CTA r owning a contiguous chunk of x. CLUSTER 16 is a
// non-portable size (opted into per kernel; it needs 16 SMs of one GPC free at once): where the
// device cannot schedule such a cluster (cudaOccupancyMaxActiveClusters, asked once per device
// and instantiation) the launch takes CLUSTER 8 instead. Twice the CTAs halve each CTA's share of
// the first pass (every key counted) and of the gather. N <= 2^18 (1 MB),
// so a chunk of N/CLUSTER keys usually fits in shared memory: with CACHE, the first pass reads x
// once from global memory (float4 loads, ITEMS vectors in flight per thread, a scalar fallback
// for the vectors that straddle the ends of x, so any 4-byte alignment works), stores the keys in
// shared memory and counts them; the later passes and the gather read shared memory only. A chunk
// larger than CACHE_MAX keys (or CACHE 0) re-reads x from global memory (L2) in every pass.
//
// Radix select: the K-th largest key is found digit by digit from the top, RADIX_BITS per pass
// (4: 8 passes, 8: 4 passes, 11: 11+11+10). A pass counts the digit of every key whose higher
// digits equal the prefix chosen so far, into a shared histogram (AGG 0: one shared atomic per
// key; AGG 1: __match_any_sync groups equal digits of a warp, one atomic per group; ties and the
// crowded top digit of normal data make plain atomics collide). In a cluster each CTA then sums
// the CLUSTER histograms through DSMEM (after one cluster barrier), so every CTA computes the
// same global histogram and the same digit with no broadcast; the histograms are double-buffered
// so that one cluster barrier per pass suffices. A block scan of the bins from the top finds the
// digit d whose bin holds the krem-th remaining key; krem drops by the keys above d. When bin d is
// taken whole (its count == krem) the search stops early at that digit level.
//
// Gather: with the final (prefix, shift), keys above the prefix are "greater" (exactly K - krem
// of them in all) and keys equal to it are "tied" (the first krem of them, in the order CTA rank,
// thread, iteration, are taken: deterministic). Two loops over the chunk: counts, one block scan
// of (greater << 20 | tied) per thread, the per-CTA totals exchanged through DSMEM, then each
// element writes (key << 32 | ~index) into K slots in CTA 0's shared memory. CTA 0 sorts the K
// composites descending with a bitonic network, one per thread (strides < 32 by warp shuffles,
// larger strides through shared memory) and writes values (the key decoded) and indices.
// Composites are distinct (distinct indices), so the output is deterministic.
#include <cuda_runtime.h>
#include <cooperative_groups.h>
#include <cub/block/block_scan.cuh>
#include <stdint.h>

namespace cg = cooperative_groups;

#define THREADS 1024        // knob: 512 1024
#define RADIX_BITS 8        // knob: 4 8 11
#define ITEMS 2             // knob: 1 2 4
#define AGG 0               // knob: 0 1
#define CLUSTER 16          // knob: 2 4 8 16
// Defaults since the seventeenth session: clusters of 16 with plain shared atomics (AGG 0). One
// H100, one evaluate.py process, x of torch.topk on N2^18_K512 / N2^18_K64 / N2^16_K256: the old
// defaults (CLUSTER 8, AGG 1) 2.79x / 2.65x / 4.29x; CLUSTER 16 with AGG 1 3.53x / 3.52x / 4.43x;
// with AGG 0 4.12x / 4.23x / 4.77x (at 16 K keys a CTA the match-any aggregation costs more than
// the collisions it saves); with 512 threads 3.38x / 3.23x / 4.72x; 11-bit digits 1.92x / 1.84x / 2.25x.
#define SINGLE_MAX 32768    // knob: 4096 32768 262144
#define CACHE 1             // knob: 0 1
// Knob constraint (evo_fsr/knobs.py): at 1024 threads a thread has 64 registers; 4 float4 loads
// in flight (16 keys) plus the loop state and digit math would spill.
// constraint: THREADS * ITEMS <= 2048

static_assert(THREADS * ITEMS <= 2048, "knob constraint: THREADS * ITEMS <= 2048");
static_assert(THREADS == 512 || THREADS == 1024, "THREADS: 512 or 1024 (the sort holds 512 keys, one per thread)");
static_assert(RADIX_BITS >= 1 && RADIX_BITS <= 11, "RADIX_BITS in 1..11");
static_assert(AGG == 0 || AGG == 1, "AGG must be 0 or 1");
static_assert(CLUSTER == 2 || CLUSTER == 4 || CLUSTER == 8 || CLUSTER == 16,
              "CLUSTER: 2, 4 or 8 (portable) or 16 (non-portable, sm_90; 8 where 16 cannot be scheduled)");
static_assert(ITEMS >= 1, "ITEMS must be positive");

#define BINS (1 << RADIX_BITS)
#define BPT ((BINS + THREADS - 1) / THREADS)          // bins summed and scanned per thread
#define NPASS ((32 + RADIX_BITS - 1) / RADIX_BITS)
#define MAXK 512
#define CACHE_MAX 49152                               // keys cached per CTA (192 KB)

__device__ __forceinline__ unsigned to_key(float f) {
    unsigned u = __float_as_uint(f);
    if (u == 0x80000000u) u = 0u;                     // -0.0 == +0.0
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ float from_key(unsigned k) {
    return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// Count digit d into h when take; called by all 32 lanes of a warp (loops are warp-uniform).
__device__ __forceinline__ void count(unsigned* h, unsigned d, bool take) {
#if AGG == 1
    if (__any_sync(0xffffffffu, take)) {
        const unsigned tag = take ? d : 0xffffffffu;
        const unsigned peers = __match_any_sync(0xffffffffu, tag);
        if (take && (int)(threadIdx.x & 31) == __ffs(peers) - 1) atomicAdd(h + d, (unsigned)__popc(peers));
    }
#else
    if (take) atomicAdd(h + d, 1u);
#endif
}

template <int CL>
__device__ __forceinline__ void block_or_cluster_sync() {
    if constexpr (CL > 1) cg::this_cluster().sync();
    else __syncthreads();
}

// The shared variable v of CTA `rank` of the cluster (this CTA's own when CL == 1).
template <int CL, typename T>
__device__ __forceinline__ T* at_rank(T* v, int rank) {
    if constexpr (CL > 1) return cg::this_cluster().map_shared_rank(v, (unsigned)rank);
    else return v;
}

// x: N floats; the CTA of rank r owns the padded positions [r*chunk, (r+1)*chunk) of x seen from
// the 16-byte boundary mis floats before it (padded position p is x[p - mis]; chunk % 4 == 0).
template <int CL, bool CACHED>
__global__ void __launch_bounds__(THREADS, 1)
topk_radix(const float* __restrict__ x, float* __restrict__ values, int* __restrict__ indices,
           int n, int k, int mis, int chunk) {
    extern __shared__ uint4 dyn_keys[];               // CACHED: this chunk's keys
    unsigned* skeys = reinterpret_cast<unsigned*>(dyn_keys);
    __shared__ unsigned hist[2][BINS];
    __shared__ unsigned long long cand[MAXK];
    __shared__ unsigned cta_total;
    __shared__ unsigned sel_digit, sel_krem, sel_count;
    using Scan = cub::BlockScan<unsigned, THREADS>;
    __shared__ typename Scan::TempStorage scan_tmp;

    const int t = threadIdx.x;
    int rank = 0;
    if constexpr (CL > 1) rank = (int)cg::this_cluster().block_rank();
    const long long padded = (long long)n + mis;
    const int p0 = rank * chunk;                                  // first padded position
    const int vlo = max(mis - p0, 0);                             // valid positions [vlo, vhi)
    const int vhi = (int)min((long long)chunk, padded - p0);      // <= vlo: no element here
    const int g0 = p0 - mis;                                      // global index of position 0

    unsigned prefix = 0u, krem = (unsigned)k;
    int shift = 32;
#pragma unroll 1
    for (int pass = 0; pass < NPASS; ++pass) {
        const int prev = shift;
        shift = max(32 - RADIX_BITS * (pass + 1), 0);
        const unsigned mask = (1u << (prev - shift)) - 1u;
        unsigned* h = hist[pass & 1];
        for (int b = t; b < BINS; b += THREADS) h[b] = 0u;
        __syncthreads();
        if (CACHED && pass == 0) {
            // Load, convert, cache and count: vector v covers positions 4v .. 4v+3.
            const int nvec = (max(vhi, 0) + 3) >> 2;
            const float* xa = x - mis;                                // 16-byte aligned
            for (int vb = 0; vb < nvec; vb += THREADS * ITEMS) {
                unsigned kk[ITEMS][4];
                bool ok[ITEMS][4];
#pragma unroll
                for (int i = 0; i < ITEMS; ++i) {
                    const int v = vb + i * THREADS + t, s = 4 * v;
                    if (v < nvec) {
                        if (s >= vlo && s + 4 <= vhi) {
                            const float4 f = __ldg(reinterpret_cast<const float4*>(xa + p0 + s));
                            kk[i][0] = to_key(f.x); kk[i][1] = to_key(f.y);
                            kk[i][2] = to_key(f.z); kk[i][3] = to_key(f.w);
#pragma unroll
                            for (int j = 0; j < 4; ++j) ok[i][j] = true;
                        } else {
#pragma unroll
                            for (int j = 0; j < 4; ++j) {
                                ok[i][j] = s + j >= vlo && s + j < vhi;
                                kk[i][j] = ok[i][j] ? to_key(__ldg(x + g0 + s + j)) : 0u;
                            }
                        }
                        dyn_keys[v] = make_uint4(kk[i][0], kk[i][1], kk[i][2], kk[i][3]);
                    } else {
#pragma unroll
                        for (int j = 0; j < 4; ++j) { ok[i][j] = false; kk[i][j] = 0u; }
                    }
                }
#pragma unroll
                for (int i = 0; i < ITEMS; ++i)
#pragma unroll
                    for (int j = 0; j < 4; ++j) count(h, (kk[i][j] >> shift) & mask, ok[i][j]);
            }
        } else {
            for (int base = vlo; base < vhi; base += THREADS * ITEMS) {
                unsigned kk[ITEMS];
                bool ok[ITEMS];
#pragma unroll
                for (int i = 0; i < ITEMS; ++i) {
                    const int s = base + i * THREADS + t;
                    ok[i] = s < vhi;
                    kk[i] = ok[i] ? (CACHED ? skeys[s] : to_key(__ldg(x + g0 + s))) : 0u;
                }
#pragma unroll
                for (int i = 0; i < ITEMS; ++i) {
                    const bool take = ok[i] && (prev == 32 || (kk[i] >> (prev & 31)) == prefix);
                    count(h, (kk[i] >> shift) & mask, take);
                }
            }
        }
        block_or_cluster_sync<CL>();
        // Global histogram: thread t owns the bins BINS-1-(t*BPT+j), top down.
        unsigned mine[BPT];
        unsigned sum = 0u;
#pragma unroll
        for (int j = 0; j < BPT; ++j) {
            const int r = t * BPT + j;
            unsigned c = 0u;
            if (r < BINS) {
#pragma unroll
                for (int q = 0; q < CL; ++q) c += *at_rank<CL>(h + (BINS - 1 - r), q);
            }
            mine[j] = c;
            sum += c;
        }
        unsigned above;
        Scan(scan_tmp).ExclusiveSum(sum, above);
#pragma unroll
        for (int j = 0; j < BPT; ++j) {
            const int r = t * BPT + j;
            if (r < BINS && above < krem && above + mine[j] >= krem) {
                sel_digit = (unsigned)(BINS - 1 - r);
                sel_krem = krem - above;
                sel_count = mine[j];
            }
            above += mine[j];
        }
        __syncthreads();
        prefix = (prefix << (prev - shift)) | sel_digit;
        krem = sel_krem;
        if (sel_count == krem) break;                 // the whole bin is taken: stop at this level
    }

    // Gather: counts, scan, slots.
    const unsigned G = (unsigned)k - krem;            // keys above the prefix, all CTAs
    unsigned ng = 0u, ne = 0u;
    for (int base = vlo; base < vhi; base += THREADS * ITEMS) {
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
            const int s = base + i * THREADS + t;
            if (s < vhi) {
                const unsigned hi = (CACHED ? skeys[s] : to_key(__ldg(x + g0 + s))) >> shift;
                ng += hi > prefix;
                ne += hi == prefix;
            }
        }
    }
    // One 32-bit scan of (greater << 20 | tied): fewer than K <= 512 keys are greater in all,
    // and at most N <= 2^18 < 2^20 are tied, so neither field overflows in any partial sum.
    unsigned off, agg;
    Scan(scan_tmp).ExclusiveSum((ng << 20) | ne, off, agg);
    if (t == 0) cta_total = agg;
    block_or_cluster_sync<CL>();
    unsigned before = 0u;
    for (int q = 0; q < rank; ++q) before += *at_rank<CL>(&cta_total, q);
    unsigned go = (before >> 20) + (off >> 20);
    unsigned eo = (before & 0xfffffu) + (off & 0xfffffu);
    unsigned long long* slots = at_rank<CL>(cand, 0);
    for (int base = vlo; base < vhi; base += THREADS * ITEMS) {
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
            const int s = base + i * THREADS + t;
            if (s < vhi) {
                const unsigned key = CACHED ? skeys[s] : to_key(__ldg(x + g0 + s));
                const unsigned hi = key >> shift;
                const unsigned long long comp =
                    ((unsigned long long)key << 32) | (0xffffffffu - (unsigned)(g0 + s));
                if (hi > prefix) {
                    slots[go++] = comp;
                } else if (hi == prefix) {
                    if (eo < krem) slots[G + eo] = comp;
                    ++eo;
                }
            }
        }
    }
    block_or_cluster_sync<CL>();                      // slots complete; no DSMEM access after this
    if (rank != 0) return;

    // Bitonic sort (descending) of the K composites padded with zeros to P, one per thread.
    int P = 32;
    while (P < k) P <<= 1;
    unsigned long long v = (t < k) ? cand[t] : 0ull;
    for (int kk = 2; kk <= P; kk <<= 1) {
        for (int j = kk >> 1; j > 0; j >>= 1) {
            unsigned long long o = 0ull;
            if (j >= 32) {
                __syncthreads();
                if (t < P) cand[t] = v;
                __syncthreads();
                if (t < P) o = cand[t ^ j];
            } else if (t < P) {
                o = __shfl_xor_sync(0xffffffffu, v, j);
            }
            if (t < P) {
                const bool keep_max = ((t & j) == 0) == ((t & kk) == 0);
                v = keep_max ? (v > o ? v : o) : (v < o ? v : o);
            }
        }
    }
    if (t < k) {
        values[t] = from_key((unsigned)(v >> 32));
        indices[t] = (int)(0xffffffffu - (unsigned)v);
    }
}

// Once per instantiation: the cached kernels may take CACHE_MAX keys of dynamic shared memory, and
// a cluster of 16 (non-portable) is opted into.
template <int CL, bool CACHED>
static cudaError_t configure() {
    static bool configured = false;
    if (configured) return cudaSuccess;
    auto kernel = topk_radix<CL, CACHED>;
    if (CACHED) {
        const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                     CACHE_MAX * (int)sizeof(unsigned));
        if (err != cudaSuccess) return err;
    }
    if (CL > 8) {
        const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
        if (err != cudaSuccess) return err;
    }
    configured = true;
    return cudaSuccess;
}

// The launch of one cluster of CL CTAs of THREADS threads (attr: the caller's storage for the
// cluster-dimension attribute, which config points to).
static cudaLaunchConfig_t cluster_config(int cl, size_t smem, cudaStream_t stream, cudaLaunchAttribute* attr) {
    attr->id = cudaLaunchAttributeClusterDimension;
    attr->val.clusterDim.x = cl;
    attr->val.clusterDim.y = 1;
    attr->val.clusterDim.z = 1;
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(cl, 1, 1);
    config.blockDim = dim3(THREADS, 1, 1);
    config.dynamicSmemBytes = smem;
    config.stream = stream;
    config.attrs = attr;
    config.numAttrs = 1;
    return config;
}

// Whether a cluster of CL CTAs of this kernel, each with the most dynamic shared memory it may
// take, can be resident on the current device (asked once per device and instantiation: a batch of
// calls must not wait on the host). A refused query reads as "no": the caller takes a smaller size.
template <int CL, bool CACHED>
static bool cluster_schedulable() {
    static int cached_dev = -1;
    static bool cached_ok = false;
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) { cudaGetLastError(); return false; }
    if (dev == cached_dev) return cached_ok;
    bool ok = configure<CL, CACHED>() == cudaSuccess;
    if (ok) {
        cudaLaunchAttribute attr;
        const cudaLaunchConfig_t config = cluster_config(CL, CACHED ? CACHE_MAX * sizeof(unsigned) : 0, 0, &attr);
        int clusters = 0;
        ok = cudaOccupancyMaxActiveClusters(&clusters, topk_radix<CL, CACHED>, &config) == cudaSuccess && clusters >= 1;
    }
    cudaGetLastError();                               // a refusal is not left as the call's error
    cached_dev = dev;
    cached_ok = ok;
    return ok;
}

template <int CL, bool CACHED>
static int run(const float* x, float* values, int* indices, int n, int k, int mis, int chunk,
               cudaStream_t stream) {
    auto kernel = topk_radix<CL, CACHED>;
    const size_t smem = CACHED ? (size_t)chunk * sizeof(unsigned) : 0;
    const cudaError_t cerr = configure<CL, CACHED>();
    if (cerr != cudaSuccess) return (int)cerr;
    if constexpr (CL == 1) {
        kernel<<<1, THREADS, smem, stream>>>(x, values, indices, n, k, mis, chunk);
    } else {
        cudaLaunchAttribute attr;
        const cudaLaunchConfig_t config = cluster_config(CL, smem, stream, &attr);
        const cudaError_t err = cudaLaunchKernelEx(&config, kernel, x, values, indices, n, k, mis, chunk);
        if (err != cudaSuccess) return (int)err;
    }
    return (int)cudaGetLastError();
}

extern "C" int launch(const float* x, float* values, int* indices, int N, int K, cudaStream_t stream) {
    if (N <= 0 || K <= 0) return 0;
    if (K > N) K = N;
    if (K > MAXK) return (int)cudaErrorInvalidValue;
    const int mis = (int)(((uintptr_t)x >> 2) & 3u);              // floats past a 16-byte boundary
    const long long padded = (long long)N + mis;
    const int cl = N <= SINGLE_MAX ? 1 : CLUSTER;
    const int chunk = (int)((((padded + cl - 1) / cl) + 3) / 4 * 4);
    const bool cached = CACHE && chunk <= CACHE_MAX;
    if (cl == 1)
        return cached ? run<1, true>(x, values, indices, N, K, mis, chunk, stream)
                      : run<1, false>(x, values, indices, N, K, mis, chunk, stream);
    if constexpr (CLUSTER > 8) {                   // non-portable: 8 where 16 cannot be scheduled
        if (!(cached ? cluster_schedulable<CLUSTER, true>() : cluster_schedulable<CLUSTER, false>())) {
            const int chunk8 = (int)((((padded + 7) / 8) + 3) / 4 * 4);
            return CACHE && chunk8 <= CACHE_MAX ? run<8, true>(x, values, indices, N, K, mis, chunk8, stream)
                                                : run<8, false>(x, values, indices, N, K, mis, chunk8, stream);
        }
    }
    return cached ? run<CLUSTER, true>(x, values, indices, N, K, mis, chunk, stream)
                  : run<CLUSTER, false>(x, values, indices, N, K, mis, chunk, stream);
}
