// Stand-in declarations, written for tests/python/check_torch_ext.py: the
// parts of PyTorch's C++ allocator interface (2.11) that
// python/uvm/_torch_ext.cpp uses, enough to compile that file's syntax and
// its own names for every feature set where PyTorch is not installed (CI).
// Not PyTorch's code; the real interface is checked where PyTorch is (the
// GPU machine: uvm.torch.enable() builds the extension against it).
#pragma once
#include <array>
#include <map>
#include "c10/cuda/CUDAFunctions.h"
namespace c10 { namespace cuda { namespace CUDACachingAllocator {
struct AllocatorState { virtual ~AllocatorState() = default; };
struct BlockInfo { int64_t size = 0, requested_size = 0; bool allocated = false, active = false; std::shared_ptr<GatheredContext> context_when_allocated; };
struct SegmentInfo { int64_t device = 0, address = 0, total_size = 0, requested_size = 0, allocated_size = 0, active_size = 0; cudaStream_t stream = nullptr; bool is_large = false; MempoolId_t owner_private_pool_id; std::vector<BlockInfo> blocks; std::shared_ptr<GatheredContext> context_when_allocated; };
struct SnapshotInfo { std::vector<SegmentInfo> segments; std::vector<std::vector<int>> device_traces; };
struct CheckpointDelta { std::vector<void *> ptrs_freed; std::vector<DataPtr> dataptrs_allocd; };
using CreateContextFn = std::shared_ptr<GatheredContext> (*)();
enum struct RecordContext { NEVER = 0, STATE = 1, ALLOC = 2, ALL = 3 };
struct ShareableHandle { int64_t offset; std::string handle; };
class CUDAAllocator {
public:
  virtual ~CUDAAllocator() = default;
  virtual DataPtr allocate(size_t) = 0;
  virtual DeleterFnPtr raw_deleter() const = 0;
  virtual void *raw_alloc(size_t) = 0;
  virtual void *raw_alloc_with_stream(size_t, cudaStream_t) = 0;
  virtual void raw_delete(void *) = 0;
  virtual void createOrIncrefPool(DeviceIndex, MempoolId_t, std::shared_ptr<CUDAAllocator> = nullptr) {}
  virtual int getPoolUseCount(DeviceIndex, MempoolId_t) { return 0; }
  virtual void setUseOnOOM(DeviceIndex, MempoolId_t, bool) {}
  virtual void setNoSplit(DeviceIndex, MempoolId_t) {}
  virtual void setMemoryFraction(double, DeviceIndex) = 0;
  virtual double getMemoryFraction(DeviceIndex) { return 1.0; }
  virtual std::string name() = 0;
  virtual void enablePeerAccess(DeviceIndex, DeviceIndex) = 0;
  virtual CachingDeviceAllocator::DeviceStats getDeviceStats(DeviceIndex) = 0;
  virtual void resetAccumulatedStats(DeviceIndex) = 0;
  virtual void resetPeakStats(DeviceIndex) = 0;
  virtual void cacheInfo(DeviceIndex, size_t *) = 0;
  virtual bool checkPoolLiveAllocations(DeviceIndex, MempoolId_t, const std::unordered_set<void *> &) { return false; }
  virtual ShareableHandle shareIpcHandle(void *) = 0;
  virtual std::shared_ptr<void> getIpcDevPtr(std::string) = 0;
  virtual std::shared_ptr<AllocatorState> getCheckpointState(DeviceIndex, MempoolId_t) = 0;
  virtual CheckpointDelta setCheckpointPoolState(DeviceIndex, std::shared_ptr<AllocatorState>) = 0;
  virtual SnapshotInfo snapshot(MempoolId_t, bool) = 0;
  virtual void recordHistory(bool, CreateContextFn, size_t, RecordContext, bool, const std::vector<std::string> &) = 0;
};
}}}
