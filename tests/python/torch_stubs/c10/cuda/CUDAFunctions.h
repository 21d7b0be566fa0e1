// Stand-in declarations, written for tests/python/check_torch_ext.py: the
// parts of PyTorch's C++ allocator interface (2.11) that
// python/uvm/_torch_ext.cpp uses, enough to compile that file's syntax and
// its own names for every feature set where PyTorch is not installed (CI).
// Not PyTorch's code; the real interface is checked where PyTorch is (the
// GPU machine: uvm.torch.enable() builds the extension against it).
#pragma once
#include <cuda_runtime_api.h>
#include <array>
#include <cstdint>
#include <memory>
#include <functional>
#include <unordered_set>
#include <vector>
#include <string>
#include <utility>
#include "c10/util/Exception.h"
namespace c10 {
using DeviceIndex = int8_t;
enum class DeviceType { CPU, CUDA };
struct Device { Device(DeviceType, DeviceIndex) {} };
using DeleterFnPtr = void (*)(void *);
struct DataPtr { DataPtr(void *, void *, DeleterFnPtr, Device) {} };
struct GatheredContext { virtual ~GatheredContext() = default; };
namespace CachingDeviceAllocator {
enum class StatType : uint64_t { AGGREGATE = 0, SMALL_POOL = 1, LARGE_POOL = 2, NUM_TYPES = 3 };
struct Stat { int64_t current = 0, peak = 0, allocated = 0, freed = 0; };
using StatArray = std::array<Stat, 3>;
struct DeviceStats { StatArray allocation, segment, active, inactive_split, allocated_bytes, reserved_bytes, active_bytes, inactive_split_bytes, requested_bytes; int64_t num_ooms = 0; };
}
namespace cuda {
using CaptureId_t = unsigned long long;
using MempoolId_t = std::pair<CaptureId_t, CaptureId_t>;
inline cudaError_t GetDevice(DeviceIndex *d) { *d = 0; return cudaSuccess; }
inline DeviceIndex device_count() { return 1; }
enum class CaptureStatus { None, Active, Invalidated };
inline CaptureStatus currentStreamCaptureStatusMayInitCtx() { return CaptureStatus::None; }
}
}
