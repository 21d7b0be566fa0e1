// Stand-in: the CUDA runtime's declarations python/uvm/_torch_ext.cpp uses
// (tests/python/check_torch_ext.py), so that the check needs no toolkit.
#pragma once
typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
typedef enum cudaError { cudaSuccess = 0, cudaErrorNotReady = 600 } cudaError_t;
#define cudaEventDisableTiming 0x02
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaGetLastError(void);
cudaError_t cudaDeviceSynchronize(void);
