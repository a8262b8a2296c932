// maxpool3d family, three regimes for kernel 3, stride 2, padding 1, dilation 3 (the task's values;
// a generic kernel takes any other values at run time). The running max always starts at -inf and
// padding is never loaded (skipped, or an explicit -inf): all-negative and huge-negative inputs stay
// exact. Along each axis the taps of output o are 2*o - 1 + {0, 3, 6}, so the middle tap 2*o + 2
// is always inside the input.
//
// REGIME 0 (planes): one output plane (n, c, od) per grid row, THREADS * ITEMS outputs of that plane
//   per block, each output scanning its 27 taps with scalar loads (ITEMS independent outputs per
//   thread, strided by THREADS so warps stay coalesced).
// REGIME 1 (spans): each thread owns OW_PER_THREAD consecutive outputs of one row (n, c, od, oh)
//   (neighbouring threads: neighbouring groups, flat over rows and planes, so no block is half
//   idle on a short plane). For each of the 9 (kd, kh) input rows it loads the contiguous span
//   w = 2*ow0 - 1 .. 2*ow0 + 2*OW_PER_THREAD + 3 with vector loads aligned down from the span's
//   start, max-reduces the 9 rows per w position first, then the 3 w taps of each output; stores
//   are vectorised where aligned. Fast path (every group but those at the W edges, W even): the
//   misalignment is the same for all 9 rows (row offsets are multiples of the vector width), so one
//   warp-uniform switch picks an unrolled pattern of 9 * CHUNKS float4 (W % 4 == 0) or float2 loads
//   with no branch between them (a d or h outside the input is replaced by the middle one: max is
//   idempotent). Edge groups and odd W: row by row, the misalignment picks float4 chunks, and a
//   chunk not wholly inside its row is loaded element by element, -inf outside the row, so no load
//   leaves the row (buffers may be only 4-byte aligned). ITEMS: groups per thread, in turn.
// REGIME 2 (tile): one block per band of BAND output rows of a plane (the whole plane when OH <=
//   BAND). Stage 1 reads the band's input rows of the 3 planes d = 2*od - 1 + {0, 3, 6} as one
//   contiguous range each (rows are contiguous), with float4 (float2, float) loads where W and the
//   pointer allow, coalesced across the block, and stores their max over kd into a shared tile
//   framed by -inf (a column left and right, rows above/below the input): a d outside the input is
//   replaced by the middle plane, so no load or tap needs a bounds check. Stage 2 reads each
//   output's 9 (kh, kw) taps from the tile (stride-2 columns: 2-way bank conflicts), coalesced
//   stores. ITEMS: loads and outputs in flight per thread. A tile over 48 KB of shared memory
//   shrinks the band; a row too wide for any band falls back to regime 0.
// Why regime 2 is the default: regime 0 loads every input element about 2.8 times (27 taps per
//   output, 9.7 input elements per output at 64^3) with stride-2 scalar loads that use half of
//   each line they touch; regime 1 cuts the load instructions about 3x, but the vector loads of
//   neighbouring threads overlap (span 2*OWP + 5 for a stride of 2*OWP) and lie 8*OWP bytes apart,
//   so they touch as many L1 lines or more. The tile reads each input row of a band once per block
//   in fully coalesced vector loads (the 3 planes of an output plane: 1.4x the input through L2,
//   the inherent reuse across od, which stays in L2 as neighbouring blocks share planes), turns the
//   27 taps into 9 shared loads without a bounds test, and writes whole output rows contiguously.
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#define REGIME 2            // knob: 0 1 2
#define THREADS 256         // knob: 64 128 256 512
#define ITEMS 4             // knob: 1 2 4 8
#define MIN_BLOCKS 0        // knob: 0 2 4 8
#define OW_PER_THREAD 4     // knob: 2 4 8
#define BAND 32             // knob: 4 16 32 64
// Knob constraints (evo_fsr/knobs.py): a block covers at most 2048 outputs of a plane in regime 0
// (a 64x64 input gives 30x30 = 900) and at most 2048 loads or outputs in flight in regime 2, and
// the blocks asked to be resident fit an SM's 2048 threads.
// constraint: THREADS * ITEMS <= 2048
// constraint: THREADS * MIN_BLOCKS <= 2048

static_assert(THREADS * ITEMS <= 2048, "knob constraint: THREADS * ITEMS <= 2048");
static_assert(THREADS * MIN_BLOCKS <= 2048, "knob constraint: THREADS * MIN_BLOCKS <= 2048");
static_assert(THREADS % 32 == 0 && THREADS >= 32 && THREADS <= 1024, "THREADS: a warp multiple <= 1024");
static_assert(ITEMS >= 1, "ITEMS must be positive");
static_assert(REGIME >= 0 && REGIME <= 2, "REGIME: 0 (planes), 1 (spans) or 2 (tile)");
static_assert(OW_PER_THREAD >= 1 && OW_PER_THREAD <= 16, "OW_PER_THREAD: 1..16");
static_assert(BAND >= 1, "BAND must be positive");

#if MIN_BLOCKS > 0
#define BOUNDS __launch_bounds__(THREADS, MIN_BLOCKS)
#else
#define BOUNDS __launch_bounds__(THREADS)
#endif

#define MAX_GRID_Y 65535
#define TILE_SMEM_MAX (48 * 1024)   // shared bytes a regime 2 block may take (no opt-in needed)
#define TILE_OFF 4                  // tile column of w = 0 (column 3 is the -inf left border)

// Input and output extents, shared by every regime's launch parameters.
struct Shape {
    int D, H, W, OD, OH, OW;
};

struct Geometry : Shape {
    long long planes;        // N * C * OD
};

// n / d for 0 <= n < 2^31 and 1 <= d < 2^31 with a multiply-high: l = ceil(log2 d),
// mul = floor(2^32 * (2^l - d) / d) + 1, n / d = (umulhi(n, mul) + n) >> l (the sum fits: n < 2^31).
struct FastDiv {
    unsigned mul;
    int shift;
    int d;
};

static FastDiv make_fastdiv(int d) {
    FastDiv f;
    f.d = d;
    int l = 0;
    while ((1LL << l) < d) ++l;
    f.shift = l;
    f.mul = (unsigned)((((1ULL << l) - (unsigned long long)d) << 32) / (unsigned long long)d + 1ULL);
    return f;
}

__device__ __forceinline__ int fdiv(int n, const FastDiv& f) {
    return (int)((__umulhi((unsigned)n, f.mul) + (unsigned)n) >> f.shift);
}

// ---------------------------------------------------------------------------------------------
// The maximum over output (od, oh, ow)'s window of plane xc, taps outside the input skipped.
// Regime 0 passes its constants (kernel 3, stride 2, padding 1, dilation 3), so the loops unroll;
// the generic kernel passes run-time values.
__device__ __forceinline__ float window_max(const float* __restrict__ xc, const Geometry& g, int od, int oh, int ow,
                                            int ks, int st, int pad, int dil) {
    const long long in_plane = (long long)g.H * g.W;
    float m = -INFINITY;
#pragma unroll
    for (int kd = 0; kd < ks; ++kd) {
        const int d = od * st - pad + kd * dil;
        if (d < 0 || d >= g.D) continue;
#pragma unroll
        for (int kh = 0; kh < ks; ++kh) {
            const int h = oh * st - pad + kh * dil;
            if (h < 0 || h >= g.H) continue;
            const float* xrow = xc + (long long)d * in_plane + (long long)h * g.W;
#pragma unroll
            for (int kw = 0; kw < ks; ++kw) {
                const int w = ow * st - pad + kw * dil;
                if (w >= 0 && w < g.W) m = fmaxf(m, __ldg(xrow + w));
            }
        }
    }
    return m;
}

// Plane p = (n, c, od) of the output: od and the input volume of (n, c).
__device__ __forceinline__ const float* plane_input(const float* __restrict__ x, const Geometry& g, long long p,
                                                    int& od) {
    const long long nc = p / g.OD;
    od = (int)(p - nc * g.OD);
    return x + nc * ((long long)g.H * g.W * g.D);
}

// REGIME 0 (and the fallback of regimes 1 and 2): kernel 3, stride 2, padding 1, dilation 3.
__global__ void BOUNDS maxpool3d_planes(const float* __restrict__ x, float* __restrict__ y, Geometry g) {
    const int plane_size = g.OH * g.OW;
    for (long long p = blockIdx.y; p < g.planes; p += gridDim.y) {
        int od;
        const float* xc = plane_input(x, g, p, od);
        float* yp = y + p * plane_size;
        const int q0 = blockIdx.x * (THREADS * ITEMS) + threadIdx.x;
        float best[ITEMS];
#pragma unroll
        for (int it = 0; it < ITEMS; ++it) {
            best[it] = -INFINITY;
            const int q = q0 + it * THREADS;
            if (q >= plane_size) continue;
            const int oh = q / g.OW;
            best[it] = window_max(xc, g, od, oh, q - oh * g.OW, 3, 2, 1, 3);
        }
#pragma unroll
        for (int it = 0; it < ITEMS; ++it) {
            const int q = q0 + it * THREADS;
            if (q < plane_size) yp[q] = best[it];
        }
    }
}

// Any kernel size, stride, padding and dilation (run-time values), the same grid as regime 0.
__global__ void BOUNDS maxpool3d_generic(const float* __restrict__ x, float* __restrict__ y, Geometry g, int ks,
                                         int st, int pad, int dil) {
    const int plane_size = g.OH * g.OW;
    for (long long p = blockIdx.y; p < g.planes; p += gridDim.y) {
        int od;
        const float* xc = plane_input(x, g, p, od);
        const int q0 = blockIdx.x * (THREADS * ITEMS) + threadIdx.x;
#pragma unroll 1
        for (int it = 0; it < ITEMS; ++it) {
            const int q = q0 + it * THREADS;
            if (q >= plane_size) break;
            const int oh = q / g.OW;
            y[p * plane_size + q] = window_max(xc, g, od, oh, q - oh * g.OW, ks, st, pad, dil);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Vectors of V floats.
template <int V> struct Vec;
template <> struct Vec<1> { typedef float T; };
template <> struct Vec<2> { typedef float2 T; };
template <> struct Vec<4> { typedef float4 T; };

__device__ __forceinline__ float vmax(float a, float b) { return fmaxf(a, b); }
__device__ __forceinline__ float2 vmax(float2 a, float2 b) { return make_float2(fmaxf(a.x, b.x), fmaxf(a.y, b.y)); }
__device__ __forceinline__ float4 vmax(float4 a, float4 b) {
    return make_float4(fmaxf(a.x, b.x), fmaxf(a.y, b.y), fmaxf(a.z, b.z), fmaxf(a.w, b.w));
}

// ---------------------------------------------------------------------------------------------
#if REGIME == 1
#define OWP OW_PER_THREAD
#define SPAN (2 * OWP + 5)   // input positions w = 2*ow0 - 1 .. 2*ow0 + 2*OWP + 3

struct SpanGeometry : Shape {
    int groups_per_row;      // NG = ceil(OW / OWP)
    int groups_per_plane;    // OH * NG
    int total;               // planes * OH * NG (< 2^31, checked at launch)
    FastDiv by_row, by_plane, by_od;
};

// Max of one input row's span into cm[0..SPAN): row points at w = 0 of the row, ws = 2*ow0 - 1 is
// the span's first w, and row + ws lies M floats past a 16-byte boundary.
template <int M>
__device__ __forceinline__ void span_row(const float* __restrict__ row, int ws, int W, float (&cm)[SPAN]) {
    constexpr int CHUNKS = (SPAN + M + 3) / 4;
    const float4* a = reinterpret_cast<const float4*>(row + ws - M);   // 16-byte aligned
#pragma unroll
    for (int j = 0; j < CHUNKS; ++j) {
        const int cw = ws - M + 4 * j;            // w of the chunk's first element
        float v[4];
        if (cw >= 0 && cw + 3 < W) {              // wholly inside the row: one 16-byte load
            const float4 f = __ldg(a + j);
            v[0] = f.x;
            v[1] = f.y;
            v[2] = f.z;
            v[3] = f.w;
        } else {                                  // a W edge: the needed elements inside the row
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int e = 4 * j + i - M;
                const int w = cw + i;
                v[i] = (e >= 0 && e < SPAN && w >= 0 && w < W) ? __ldg(row + w) : -INFINITY;
            }
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int e = 4 * j + i - M;
            if (e >= 0 && e < SPAN) cm[e] = fmaxf(cm[e], v[i]);
        }
    }
}

// The span of all 9 rows when every chunk of every row lies inside its row (all but the groups at the
// W edges): VW-float loads (VW = 4 when W % 4 == 0, 2 when W is even: then every row shares the
// misalignment M), a d or h outside the input replaced by the middle one (max is idempotent), so
// the 9 * CHUNKS loads have no branch between them. False (nothing done) for an edge group.
template <int VW, int M>
__device__ __forceinline__ bool span_rows_inside(const float* __restrict__ xc, long long in_plane, int D, int H,
                                                 int W, int od, int oh, int ws, float (&cm)[SPAN]) {
    typedef typename Vec<VW>::T VT;
    constexpr int CHUNKS = (SPAN + M + VW - 1) / VW;
    if (ws - M < 0 || ws - M + CHUNKS * VW > W) return false;
#pragma unroll
    for (int kd = 0; kd < 3; ++kd) {
        int d = 2 * od - 1 + 3 * kd;
        if (d < 0 || d >= D) d = 2 * od + 2;
#pragma unroll
        for (int kh = 0; kh < 3; ++kh) {
            int h = 2 * oh - 1 + 3 * kh;
            if (h < 0 || h >= H) h = 2 * oh + 2;
            const VT* a = reinterpret_cast<const VT*>(xc + d * in_plane + (long long)h * W + (ws - M));
#pragma unroll
            for (int j = 0; j < CHUNKS; ++j) {
                const VT f = __ldg(a + j);
                const float* v = reinterpret_cast<const float*>(&f);
#pragma unroll
                for (int i = 0; i < VW; ++i) {
                    const int e = VW * j + i - M;
                    if (e >= 0 && e < SPAN) cm[e] = fmaxf(cm[e], v[i]);
                }
            }
        }
    }
    return true;
}

// OWP consecutive outputs at dst, which lies MO floats past a 16-byte boundary: float4 and float2
// stores where aligned, scalars elsewhere.
template <int MO>
__device__ __forceinline__ void store_group(float* dst, const float (&o)[OWP]) {
#pragma unroll
    for (int k = 0; k < OWP; ++k) {
        const int s4 = k - ((MO + k) & 3);
        const bool in4 = s4 >= 0 && s4 + 3 < OWP;
        const int s2 = k - ((MO + k) & 1);
        const bool in2 = !in4 && s2 >= 0 && s2 + 1 < OWP;
        if (in4) {
            if (k == s4)
                *reinterpret_cast<float4*>(dst + k) =
                    make_float4(o[k], o[k + 1 < OWP ? k + 1 : OWP - 1], o[k + 2 < OWP ? k + 2 : OWP - 1],
                                o[k + 3 < OWP ? k + 3 : OWP - 1]);
        } else if (in2) {
            if (k == s2) *reinterpret_cast<float2*>(dst + k) = make_float2(o[k], o[k + 1 < OWP ? k + 1 : OWP - 1]);
        } else {
            dst[k] = o[k];
        }
    }
}

__global__ void BOUNDS maxpool3d_spans(const float* __restrict__ x, float* __restrict__ y, SpanGeometry g) {
    const long long in_plane = (long long)g.H * g.W;
    const long long in_volume = in_plane * g.D;
    const int first = blockIdx.x * (THREADS * ITEMS) + threadIdx.x;
#pragma unroll 1
    for (int it = 0; it < ITEMS; ++it) {
        const int f = first + it * THREADS;
        if (f >= g.total) break;
        const int p = fdiv(f, g.by_plane);
        const int q = f - p * g.groups_per_plane;
        const int oh = fdiv(q, g.by_row);
        const int ow0 = (q - oh * g.groups_per_row) * OWP;
        const int nc = fdiv(p, g.by_od);
        const int od = p - nc * g.OD;
        const float* xc = x + (long long)nc * in_volume;
        const int ws = 2 * ow0 - 1;
        float cm[SPAN];
#pragma unroll
        for (int e = 0; e < SPAN; ++e) cm[e] = -INFINITY;
        // row offsets are multiples of VW, so xc + ws gives every row's misalignment
        const unsigned mis = (unsigned)(reinterpret_cast<uintptr_t>(xc + ws) >> 2);
        bool done = false;
        if (g.W % 4 == 0) {
            switch (mis & 3u) {
                case 0: done = span_rows_inside<4, 0>(xc, in_plane, g.D, g.H, g.W, od, oh, ws, cm); break;
                case 1: done = span_rows_inside<4, 1>(xc, in_plane, g.D, g.H, g.W, od, oh, ws, cm); break;
                case 2: done = span_rows_inside<4, 2>(xc, in_plane, g.D, g.H, g.W, od, oh, ws, cm); break;
                default: done = span_rows_inside<4, 3>(xc, in_plane, g.D, g.H, g.W, od, oh, ws, cm); break;
            }
        } else if (g.W % 2 == 0) {
            if (mis & 1u) done = span_rows_inside<2, 1>(xc, in_plane, g.D, g.H, g.W, od, oh, ws, cm);
            else done = span_rows_inside<2, 0>(xc, in_plane, g.D, g.H, g.W, od, oh, ws, cm);
        }
        if (!done) {   // a W edge, or an odd W: row by row, chunk by chunk
#pragma unroll
            for (int kd = 0; kd < 3; ++kd) {
                const int d = 2 * od - 1 + 3 * kd;
                if (d < 0 || d >= g.D) continue;
#pragma unroll
                for (int kh = 0; kh < 3; ++kh) {
                    const int h = 2 * oh - 1 + 3 * kh;
                    if (h < 0 || h >= g.H) continue;
                    const float* row = xc + d * in_plane + (long long)h * g.W;
                    switch ((unsigned)(reinterpret_cast<uintptr_t>(row + ws) >> 2) & 3u) {
                        case 0: span_row<0>(row, ws, g.W, cm); break;
                        case 1: span_row<1>(row, ws, g.W, cm); break;
                        case 2: span_row<2>(row, ws, g.W, cm); break;
                        default: span_row<3>(row, ws, g.W, cm); break;
                    }
                }
            }
        }
        float o[OWP];
#pragma unroll
        for (int k = 0; k < OWP; ++k) o[k] = fmaxf(fmaxf(cm[2 * k], cm[2 * k + 3]), cm[2 * k + 6]);
        float* dst = y + ((long long)p * g.OH + oh) * g.OW + ow0;
        if (ow0 + OWP <= g.OW) {
            switch ((unsigned)(reinterpret_cast<uintptr_t>(dst) >> 2) & 3u) {
                case 0: store_group<0>(dst, o); break;
                case 1: store_group<1>(dst, o); break;
                case 2: store_group<2>(dst, o); break;
                default: store_group<3>(dst, o); break;
            }
        } else {
#pragma unroll
            for (int k = 0; k < OWP; ++k)
                if (ow0 + k < g.OW) dst[k] = o[k];
        }
    }
}
#endif  // REGIME == 1

// ---------------------------------------------------------------------------------------------
#if REGIME == 2
struct TileGeometry : Shape {
    int rows;                // output rows per band (R)
    int bands;               // bands per plane (NB)
    int pitch;               // tile row pitch in floats (a multiple of 4)
    int blocks;              // planes * NB (< 2^31, checked at launch)
    FastDiv by_chunks;       // chunks (of V floats) per input row: W / V
    FastDiv by_ow, by_bands, by_od;
};

// V: floats per load (4 or 2 when W and x allow, else 1), chosen at launch.
template <int V>
__global__ void BOUNDS maxpool3d_tile(const float* __restrict__ x, float* __restrict__ y, TileGeometry g) {
    typedef typename Vec<V>::T VT;
    extern __shared__ float4 tile4[];
    float* tile = reinterpret_cast<float*>(tile4);
    const int tid = threadIdx.x;
    const int P = g.pitch;
    const long long in_plane = (long long)g.H * g.W;
    const int chunks_per_row = g.W / V;
    for (long long bl = blockIdx.x; bl < g.blocks; bl += gridDim.x) {
        const int b = (int)bl;
        const int p = fdiv(b, g.by_bands);
        const int band = b - p * g.bands;
        const int nc = fdiv(p, g.by_od);
        const int od = p - nc * g.OD;
        const int oh0 = band * g.rows;
        const int rows_out = min(g.rows, g.OH - oh0);
        const int hlo = 2 * oh0 - 1;             // input row of tile row 0
        const int nrows = 2 * rows_out + 5;      // tile rows: h = hlo .. hlo + nrows - 1 (<= H)
        const int hv0 = max(hlo, 0);
        const int hv1 = min(hlo + nrows, g.H);   // input rows [hv0, hv1) exist

        // The 3 planes d = 2*od + 2 + {-3, 0, 3}; the middle one always exists and stands in for
        // one that does not.
        const float* mid = x + ((long long)nc * g.D + (2 * od + 2)) * in_plane + (long long)hv0 * g.W;
        const VT* p0 = reinterpret_cast<const VT*>(2 * od - 1 >= 0 ? mid - 3 * in_plane : mid);
        const VT* p1 = reinterpret_cast<const VT*>(mid);
        const VT* p2 = reinterpret_cast<const VT*>(2 * od + 5 < g.D ? mid + 3 * in_plane : mid);

        // -inf frame: the border columns of every tile row, and whole rows outside [0, H).
        for (int i = tid; i < 2 * nrows; i += THREADS)
            tile[(i >> 1) * P + ((i & 1) ? TILE_OFF + g.W : TILE_OFF - 1)] = -INFINITY;
        const int top = hv0 - hlo;               // 0 or 1 rows above the input
        const int bottom = hlo + nrows - hv1;    // rows below it
        for (int i = tid; i < (top + bottom) * g.W; i += THREADS) {
            const int r = i / g.W;
            const int r_tile = r < top ? r : (hv1 - hlo) + (r - top);
            tile[r_tile * P + TILE_OFF + (i - r * g.W)] = -INFINITY;
        }

        // Stage 1: max over kd of the band's input rows, V floats a load, into the tile.
        float* dst0 = tile + top * P + TILE_OFF;
        const int nchunks = (hv1 - hv0) * chunks_per_row;
        for (int c0 = tid; c0 < nchunks; c0 += THREADS * ITEMS) {
            VT v[ITEMS];
#pragma unroll
            for (int it = 0; it < ITEMS; ++it) {
                const int c = c0 + it * THREADS;
                if (c < nchunks) v[it] = vmax(vmax(__ldg(p0 + c), __ldg(p1 + c)), __ldg(p2 + c));
            }
#pragma unroll
            for (int it = 0; it < ITEMS; ++it) {
                const int c = c0 + it * THREADS;
                if (c < nchunks) {
                    const int r = fdiv(c, g.by_chunks);
                    *reinterpret_cast<VT*>(dst0 + r * P + (c - r * chunks_per_row) * V) = v[it];
                }
            }
        }
        __syncthreads();

        // Stage 2: each output's 9 taps from the tile (rows 2*ohl + 3*kh, columns 2*ow + 3*kw of
        // w = -1 .. W, frame included).
        const int nout = rows_out * g.OW;
        float* yb = y + ((long long)p * g.OH + oh0) * g.OW;
        for (int q0 = tid; q0 < nout; q0 += THREADS * ITEMS) {
            float m[ITEMS];
#pragma unroll
            for (int it = 0; it < ITEMS; ++it) {
                const int q = q0 + it * THREADS;
                m[it] = -INFINITY;
                if (q < nout) {
                    const int ohl = fdiv(q, g.by_ow);
                    const int ow = q - ohl * g.OW;
                    const float* t = tile + 2 * ohl * P + (TILE_OFF - 1) + 2 * ow;
                    float a = fmaxf(fmaxf(t[0], t[3]), t[6]);
                    t += 3 * P;
                    a = fmaxf(a, fmaxf(fmaxf(t[0], t[3]), t[6]));
                    t += 3 * P;
                    m[it] = fmaxf(a, fmaxf(fmaxf(t[0], t[3]), t[6]));
                }
            }
#pragma unroll
            for (int it = 0; it < ITEMS; ++it) {
                const int q = q0 + it * THREADS;
                if (q < nout) yb[q] = m[it];
            }
        }
        __syncthreads();   // the tile is rewritten by this block's next band
    }
}
#endif  // REGIME == 2

// ---------------------------------------------------------------------------------------------
// Regime 0's grid: x over the outputs of a plane, y over the planes.
static int launch_planes(bool fixed, const float* x, float* y, const Geometry& g, int kernel_size, int stride,
                         int padding, int dilation, cudaStream_t stream) {
    const long long plane_size = (long long)g.OH * g.OW;
    const dim3 grid((unsigned)((plane_size + THREADS * ITEMS - 1) / (THREADS * ITEMS)),
                    (unsigned)(g.planes < MAX_GRID_Y ? g.planes : MAX_GRID_Y));
    if (fixed)
        maxpool3d_planes<<<grid, THREADS, 0, stream>>>(x, y, g);
    else
        maxpool3d_generic<<<grid, THREADS, 0, stream>>>(x, y, g, kernel_size, stride, padding, dilation);
    return (int)cudaGetLastError();
}

extern "C" int launch(const float* x, float* y, int N, int C, int D, int H, int W,
                      int kernel_size, int stride, int padding, int dilation, cudaStream_t stream) {
    const int span = dilation * (kernel_size - 1) + 1;
    Geometry g;
    g.D = D;
    g.H = H;
    g.W = W;
    g.OD = (D + 2 * padding - span) / stride + 1;
    g.OH = (H + 2 * padding - span) / stride + 1;
    g.OW = (W + 2 * padding - span) / stride + 1;
    if (N <= 0 || C <= 0 || g.OD <= 0 || g.OH <= 0 || g.OW <= 0) return 0;
    g.planes = (long long)N * C * g.OD;
    const bool fixed = kernel_size == 3 && stride == 2 && padding == 1 && dilation == 3;
    if (!fixed) return launch_planes(false, x, y, g, kernel_size, stride, padding, dilation, stream);
#if REGIME == 1
    {
        SpanGeometry s;
        static_cast<Shape&>(s) = g;
        s.groups_per_row = (g.OW + OWP - 1) / OWP;
        const long long per_plane = (long long)g.OH * s.groups_per_row;
        const long long total = g.planes * per_plane;
        if (total + THREADS * ITEMS < (1LL << 31)) {
            s.groups_per_plane = (int)per_plane;
            s.total = (int)total;
            s.by_row = make_fastdiv(s.groups_per_row);
            s.by_plane = make_fastdiv(s.groups_per_plane);
            s.by_od = make_fastdiv(g.OD);
            const unsigned blocks = (unsigned)((total + THREADS * ITEMS - 1) / (THREADS * ITEMS));
            maxpool3d_spans<<<blocks, THREADS, 0, stream>>>(x, y, s);
            return (int)cudaGetLastError();
        }
    }
#elif REGIME == 2
    {
        TileGeometry t;
        static_cast<Shape&>(t) = g;
        t.pitch = (TILE_OFF + W + 1 + 3) / 4 * 4;
        int rows = g.OH < BAND ? g.OH : BAND;
        const long long fit = ((long long)TILE_SMEM_MAX / (4LL * t.pitch) - 5) / 2;   // rows that fit
        if (rows > fit) rows = (int)(fit > 0 ? fit : 0);
        const long long blocks = rows >= 1 ? g.planes * ((g.OH + rows - 1) / rows) : 0;
        if (rows >= 1 && blocks < (1LL << 31)) {
            t.rows = rows;
            t.bands = (g.OH + rows - 1) / rows;
            t.blocks = (int)blocks;
            t.by_ow = make_fastdiv(g.OW);
            t.by_bands = make_fastdiv(t.bands);
            t.by_od = make_fastdiv(g.OD);
            const size_t smem = (size_t)(2 * rows + 5) * t.pitch * sizeof(float);
            const unsigned grid = (unsigned)t.blocks;
            const uintptr_t addr = reinterpret_cast<uintptr_t>(x);
            if (W % 4 == 0 && addr % 16 == 0) {
                t.by_chunks = make_fastdiv(W / 4);
                maxpool3d_tile<4><<<grid, THREADS, smem, stream>>>(x, y, t);
            } else if (W % 2 == 0 && addr % 8 == 0) {
                t.by_chunks = make_fastdiv(W / 2);
                maxpool3d_tile<2><<<grid, THREADS, smem, stream>>>(x, y, t);
            } else {
                t.by_chunks = make_fastdiv(W);
                maxpool3d_tile<1><<<grid, THREADS, smem, stream>>>(x, y, t);
            }
            return (int)cudaGetLastError();
        }
    }
#endif
    return launch_planes(true, x, y, g, kernel_size, stride, padding, dilation, stream);
}
