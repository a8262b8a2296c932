/* A CUDA runtime that launches nothing: it records each kernel launch of a host program built with
 * `nvcc --cudart none`, so that a family's launch() (its regime dispatch, grid and block sizes)
 * runs on a machine without a GPU or a driver. Linked into one executable with the kernel source
 * and a main that defines recorder_on_launch(); no other CUDA library is involved.
 *
 * What it stands in for (CUDA 13 host stubs): the fat binary's registration, the launch
 * configuration push/pop, __cudaGetKernel + __cudaLaunchKernel (and the legacy cudaLaunchKernel),
 * and the few queries the seeds make (device, SM count, occupancy, last error). Every query
 * answers like an H100/H200: 132 SMs, RECORDER_OCCUPANCY blocks per SM. */
#include <stddef.h>
#include <string.h>

typedef struct { unsigned x, y, z; } rec_dim3;

#define RECORDER_SMS 132
#define RECORDER_OCCUPANCY 6
#define RECORDER_MAX_KERNELS 256

/* defined by the program: called once per launch with the kernel's mangled name */
void recorder_on_launch(const char* name, rec_dim3 grid, rec_dim3 block, size_t smem, void* stream, void** args);

static struct { const void* host; const char* name; } kernels[RECORDER_MAX_KERNELS];
static int nkernels;
static rec_dim3 cfg_grid, cfg_block;
static size_t cfg_smem;
static void* cfg_stream;
static void* fatbin_handle[1];

static const char* kernel_name(const void* host) {
    for (int i = 0; i < nkernels; ++i)
        if (kernels[i].host == host) return kernels[i].name;
    return "?";
}

void** __cudaRegisterFatBinary(void* fatCubin) { (void)fatCubin; return fatbin_handle; }
void __cudaRegisterFatBinaryEnd(void** handle) { (void)handle; }
void __cudaUnregisterFatBinary(void** handle) { (void)handle; }
char __cudaInitModule(void** handle) { (void)handle; return 1; }     /* managed variables: none here */

void __cudaRegisterFunction(void** handle, const char* hostFun, char* deviceFun, const char* deviceName,
                            int threadLimit, void* tid, void* bid, void* bDim, void* gDim, int* wSize) {
    (void)handle; (void)deviceName; (void)threadLimit; (void)tid; (void)bid; (void)bDim; (void)gDim; (void)wSize;
    if (nkernels < RECORDER_MAX_KERNELS) {
        kernels[nkernels].host = hostFun;
        kernels[nkernels].name = deviceFun;        /* the mangled device name */
        ++nkernels;
    }
}

unsigned __cudaPushCallConfiguration(rec_dim3 grid, rec_dim3 block, size_t smem, void* stream) {
    cfg_grid = grid; cfg_block = block; cfg_smem = smem; cfg_stream = stream;
    return 0;
}

int __cudaPopCallConfiguration(rec_dim3* grid, rec_dim3* block, size_t* smem, void* stream) {
    *grid = cfg_grid; *block = cfg_block; *smem = cfg_smem;
    memcpy(stream, &cfg_stream, sizeof(void*));
    return 0;
}

int __cudaGetKernel(void** kernel, const void* hostFun) { *kernel = (void*)hostFun; return 0; }

int __cudaLaunchKernel(void* kernel, rec_dim3 grid, rec_dim3 block, void** args, size_t smem, void* stream) {
    recorder_on_launch(kernel_name(kernel), grid, block, smem, stream, args);
    return 0;
}

int __cudaLaunchKernel_ptsz(void* kernel, rec_dim3 grid, rec_dim3 block, void** args, size_t smem, void* stream) {
    return __cudaLaunchKernel(kernel, grid, block, args, smem, stream);
}

int cudaLaunchKernel(const void* func, rec_dim3 grid, rec_dim3 block, void** args, size_t smem, void* stream) {
    return __cudaLaunchKernel((void*)func, grid, block, args, smem, stream);
}

int cudaGetLastError(void) { return 0; }
int cudaPeekAtLastError(void) { return 0; }
int cudaGetDevice(int* device) { *device = 0; return 0; }

int cudaDeviceGetAttribute(int* value, int attr, int device) {
    (void)device;
    *value = attr == 16 ? RECORDER_SMS : 0;        /* 16: cudaDevAttrMultiProcessorCount */
    return 0;
}

int cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* blocks, const void* func, int threads, size_t smem,
                                                          unsigned flags) {
    (void)func; (void)threads; (void)smem; (void)flags;
    *blocks = RECORDER_OCCUPANCY;
    return 0;
}

int cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, const void* func, int threads, size_t smem) {
    return cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(blocks, func, threads, smem, 0);
}
