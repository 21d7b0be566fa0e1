#include <gtest/gtest.h>

#include "mmu/range_allocator.h"

using uvm::mmu::RangeAllocator;

TEST(RangeAllocator, AlignsAndCoalesces) {
    RangeAllocator r(0x1000, 0x100000);
    uint64_t a, b, c;
    ASSERT_EQ(r.alloc(0x1000, 0x1000, &a), UVM_OK);
    EXPECT_EQ(a, 0x1000u);
    ASSERT_EQ(r.alloc(0x10000, 0x10000, &b), UVM_OK);
    EXPECT_EQ(b % 0x10000, 0u);
    ASSERT_EQ(r.alloc(0x1000, 0x1000, &c), UVM_OK);
    EXPECT_EQ(c, 0x2000u);  // first fit, in the gap before the aligned range
    r.free(a, 0x1000);
    r.free(c, 0x1000);
    r.free(b, 0x10000);
    EXPECT_EQ(r.free_bytes(), 0x100000u);
    EXPECT_EQ(r.largest_free_range(), 0x100000u);  // all merged into one range
}

TEST(RangeAllocator, ReserveRefusesOverlapsAndOutside) {
    RangeAllocator r(0x1000, 0x100000);
    ASSERT_EQ(r.reserve(0x8000, 0x2000), UVM_OK);
    EXPECT_EQ(r.reserve(0x9000, 0x1000), UVM_ERR_ADDRESS_IN_USE);
    EXPECT_EQ(r.reserve(0x7000, 0x2000), UVM_ERR_ADDRESS_IN_USE);
    EXPECT_EQ(r.reserve(0x0, 0x1000), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(r.reserve(0x100000, 0x2000), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(r.reserve(0x8000, 0), UVM_ERR_INVALID_ARGUMENT);
    ASSERT_EQ(r.reserve(0xA000, 0x1000), UVM_OK);  // adjacent is fine
    r.free(0x8000, 0x2000);
    ASSERT_EQ(r.reserve(0x9000, 0x1000), UVM_OK);
}

TEST(RangeAllocator, ExhaustionIsAStatus) {
    RangeAllocator r(0x1000, 0x4000);
    uint64_t a;
    EXPECT_EQ(r.alloc(0x5000, 0x1000, &a), UVM_ERR_OUT_OF_MEMORY);
    EXPECT_EQ(r.alloc(0, 0x1000, &a), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(r.alloc(0x1000, 3, &a), UVM_ERR_INVALID_ARGUMENT);
    ASSERT_EQ(r.alloc(0x4000, 0x1000, &a), UVM_OK);
    EXPECT_EQ(r.alloc(0x1000, 0x1000, &a), UVM_ERR_OUT_OF_MEMORY);
}

TEST(RangeAllocator, LargestFreeRangeWithJoinsRangesGivenBackOnlyInTheAnswer) {
    RangeAllocator r(0, 0x10000);
    uint64_t a, b, c;
    ASSERT_EQ(r.alloc(0x4000, 0x1000, &a), UVM_OK);  // [0, 0x4000)
    ASSERT_EQ(r.alloc(0x4000, 0x1000, &b), UVM_OK);  // [0x4000, 0x8000)
    ASSERT_EQ(r.alloc(0x2000, 0x1000, &c), UVM_OK);  // [0x8000, 0xA000)
    EXPECT_EQ(r.largest_free_range(), 0x6000u);
    EXPECT_EQ(r.largest_free_range_with({}), 0x6000u);
    // b and c back: they join the free tail into one range.
    EXPECT_EQ(r.largest_free_range_with({{b, 0x4000}, {c, 0x2000}}), 0xC000u);
    EXPECT_EQ(r.largest_free_range_with({{a, 0x4000}}), 0x6000u);  // alone, not joined
    EXPECT_EQ(r.largest_free_range(), 0x6000u);  // nothing changed
    EXPECT_EQ(r.free_bytes(), 0x6000u);
}
