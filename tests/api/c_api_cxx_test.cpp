// The public header compiles as C++ and its structs are zero-initialisable there too.
#include <gtest/gtest.h>

#include <type_traits>

#include "uvm/uvm.h"

static_assert(std::is_standard_layout<uvm_mem_alloc_params_t>::value, "C layout");
static_assert(std::is_trivially_copyable<uvm_gpu_stats_t>::value, "C layout");

TEST(CApiFromCxx, ZeroInitialisedParamsMeanDefaults) {
    uvm_manager_params_t mp{};
    mp.backend = UVM_BACKEND_SIM;
    uvm_manager_t *mgr = nullptr;
    ASSERT_EQ(uvm_manager_create(&mp, &mgr), UVM_OK);
    uint32_t n = 0;
    ASSERT_EQ(uvm_gpu_count(mgr, &n), UVM_OK);
    EXPECT_EQ(n, 2u);  // the sim default
    uvm_gpu_info_t gi{};
    ASSERT_EQ(uvm_gpu_info(mgr, 0, &gi), UVM_OK);
    EXPECT_EQ(gi.memory_total, 16ull << 30);
    EXPECT_EQ(gi.page_sizes, UVM_PAGE_SIZE_4K | UVM_PAGE_SIZE_64K | UVM_PAGE_SIZE_2M);
    EXPECT_FALSE(gi.cpu_coherent);  // a PCIe platform by default
    EXPECT_EQ(gi.granularity, 2u << 20);
    EXPECT_EQ(gi.host_numa_id, 0);
    EXPECT_STREQ(gi.pci_bus_id, "0000:10:00.0");  // made up per simulated GPU (for sharing across processes)
    uvm_mem_alloc_params_t ap{};
    ap.size = 1;
    uvm_mem_t *mem = nullptr;
    ASSERT_EQ(uvm_mem_alloc(mgr, &ap, &mem), UVM_OK);
    uvm_mem_info_t info{};
    ASSERT_EQ(uvm_mem_info(mgr, mem, &info), UVM_OK);
    EXPECT_EQ(info.backing, UVM_BACKING_SYSMEM);
    EXPECT_EQ(uvm_mem_free(mgr, mem), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}
