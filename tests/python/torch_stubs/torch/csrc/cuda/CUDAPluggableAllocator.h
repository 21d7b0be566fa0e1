// Stand-in declarations, written for tests/python/check_torch_ext.py: the
// parts of PyTorch's C++ allocator interface (2.11) that
// python/uvm/_torch_ext.cpp uses, enough to compile that file's syntax and
// its own names for every feature set where PyTorch is not installed (CI).
// Not PyTorch's code; the real interface is checked where PyTorch is (the
// GPU machine: uvm.torch.enable() builds the extension against it).
#pragma once
#include "c10/cuda/CUDACachingAllocator.h"
namespace torch { namespace cuda { namespace CUDAPluggableAllocator {
using namespace c10::cuda::CUDACachingAllocator;
struct CUDAPluggableAllocator : CUDAAllocator {
  CUDAPluggableAllocator(std::function<void *(size_t, int, cudaStream_t)>, std::function<void(void *, size_t, int, cudaStream_t)>) {}
  c10::DataPtr allocate(size_t) override { return {nullptr, nullptr, nullptr, c10::Device(c10::DeviceType::CUDA, 0)}; }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void *raw_alloc(size_t) override { return nullptr; }
  void *raw_alloc_with_stream(size_t, cudaStream_t) override { return nullptr; }
  void raw_delete(void *) override {}
  void setMemoryFraction(double, c10::DeviceIndex) override {}
  double getMemoryFraction(c10::DeviceIndex) override { return 1.0; }
  std::string name() override { return "p"; }
  void enablePeerAccess(c10::DeviceIndex, c10::DeviceIndex) override {}
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex) override { return {}; }
  void resetAccumulatedStats(c10::DeviceIndex) override {}
  void resetPeakStats(c10::DeviceIndex) override {}
  void cacheInfo(c10::DeviceIndex, size_t *) override {}
  ShareableHandle shareIpcHandle(void *) override { return {}; }
  std::shared_ptr<void> getIpcDevPtr(std::string) override { return nullptr; }
  std::shared_ptr<AllocatorState> getCheckpointState(c10::DeviceIndex, c10::cuda::MempoolId_t) override { return nullptr; }
  CheckpointDelta setCheckpointPoolState(c10::DeviceIndex, std::shared_ptr<AllocatorState>) override { return {}; }
  SnapshotInfo snapshot(c10::cuda::MempoolId_t, bool) override { return {}; }
  void recordHistory(bool, CreateContextFn, size_t, RecordContext, bool, const std::vector<std::string> &) override {}
  void set_reset_fn(std::function<void()>) {}
  void set_record_stream_fn(std::function<void(void *, cudaStream_t)>) {}
  void set_begin_allocate_to_pool(std::function<void(int, c10::cuda::MempoolId_t, std::function<bool(cudaStream_t)>)>) {}
  void set_end_allocate_to_pool_fn(std::function<void(int, c10::cuda::MempoolId_t)>) {}
  void set_release_pool(std::function<void(int, c10::cuda::MempoolId_t)>) {}
  void init(int) {}
};
void changeCurrentAllocator(const std::shared_ptr<CUDAAllocator> &);
}}}
