// Tests of the page tree, after nvidia-uvm's uvm_page_tree_test.c.
#include <gtest/gtest.h>

#include <vector>

#include "common/sizes.h"
#include "mmu/page_tree.h"

using namespace uvm;
using uvm::mmu::Aperture;
using uvm::mmu::PageTree;
using uvm::mmu::Pte;
using uvm::mmu::Translation;

namespace {
Pte vid(uint64_t address) { return Pte{address, Aperture::Vid, 0}; }
constexpr uint64_t kVa = 0x100000000000ull;  // 16 TiB, 2 MiB aligned
}  // namespace

TEST(PageTree, EmptyTreeHasOnlyTheRoot) {
    PageTree tree;
    const mmu::PageTreeInfo info = tree.info();
    EXPECT_EQ(info.table_bytes, 4096u);
    EXPECT_EQ(info.levels[0].tables, 1u);
    EXPECT_STREQ(info.levels[0].name, "PDE4");
    EXPECT_EQ(info.levels[4].va_bit_hi, 28u);
    EXPECT_EQ(info.levels[4].va_bit_lo, 21u);
    Translation t;
    EXPECT_FALSE(tree.translate(kVa, &t));
}

TEST(PageTree, MapsAndTranslatesEachPageSize) {
    for (uint64_t page : {kPageSize4K, kPageSize64K, kPageSize2M}) {
        PageTree tree;
        std::vector<Pte> ptes;
        for (int i = 0; i < 4; ++i)
            ptes.push_back(vid((10 + 3 * i) * page));  // not contiguous
        ASSERT_EQ(tree.map(kVa, page, ptes.data(), ptes.size()), UVM_OK);
        for (int i = 0; i < 4; ++i) {
            Translation t;
            ASSERT_TRUE(tree.translate(kVa + i * page + 123, &t));
            EXPECT_EQ(t.address, (10 + 3 * i) * page + 123);
            EXPECT_EQ(t.page_size, page);
            EXPECT_EQ(t.aperture, Aperture::Vid);
        }
        Translation t;
        EXPECT_FALSE(tree.translate(kVa + 4 * page, &t));
        EXPECT_EQ(tree.info().mapped_bytes[chunk_size_index(page)], 4 * page);
        ASSERT_EQ(tree.unmap(kVa, page, 4), UVM_OK);
        EXPECT_FALSE(tree.translate(kVa, &t));
        EXPECT_EQ(tree.info().table_bytes, 4096u) << "tables left behind for page " << page;
    }
}

TEST(PageTree, TableCostFollowsThePageSize) {
    // 2 MiB mapped with one 2M PTE needs no page table below PDE0; with 64K
    // pages one 256-byte table; with 4K pages one 4 KiB table.
    const uint64_t expected_below_pde0[] = {4096, 256, 0};
    for (int i = 0; i < 3; ++i) {
        PageTree tree;
        const uint64_t page = chunk_size_of_index(i);
        std::vector<Pte> ptes(kPageSize2M / page);
        for (size_t p = 0; p < ptes.size(); ++p)
            ptes[p] = vid(p * page);
        ASSERT_EQ(tree.map(kVa, page, ptes.data(), ptes.size()), UVM_OK);
        EXPECT_EQ(tree.info().table_bytes, 5 * 4096 + expected_below_pde0[i]);
    }
}

TEST(PageTree, MixesPageSizesInOne2MRegion) {
    PageTree tree;
    const Pte big = vid(0x40000000), small = vid(0x7000);
    ASSERT_EQ(tree.map(kVa, kPageSize64K, &big, 1), UVM_OK);
    ASSERT_EQ(tree.map(kVa + kPageSize64K, kPageSize4K, &small, 1), UVM_OK);
    Translation t;
    ASSERT_TRUE(tree.translate(kVa + 5, &t));
    EXPECT_EQ(t.page_size, kPageSize64K);
    ASSERT_TRUE(tree.translate(kVa + kPageSize64K + 5, &t));
    EXPECT_EQ(t.page_size, kPageSize4K);
    EXPECT_EQ(t.address, 0x7005u);
    EXPECT_EQ(tree.info().levels[5].tables, 1u);
    EXPECT_EQ(tree.info().levels[6].tables, 1u);
    // A 2M page cannot go over either.
    const Pte huge = vid(0);
    EXPECT_EQ(tree.map(kVa, kPageSize2M, &huge, 1), UVM_ERR_ALREADY_MAPPED);
}

TEST(PageTree, RefusesOverlapsOfAnySize) {
    PageTree tree;
    const Pte p = vid(0);
    ASSERT_EQ(tree.map(kVa, kPageSize2M, &p, 1), UVM_OK);
    EXPECT_EQ(tree.map(kVa + kPageSize64K, kPageSize4K, &p, 1), UVM_ERR_ALREADY_MAPPED);
    EXPECT_EQ(tree.map(kVa + kPageSize64K, kPageSize64K, &p, 1), UVM_ERR_ALREADY_MAPPED);
    const uint64_t next = kVa + kPageSize2M;  // the following 2 MiB region
    ASSERT_EQ(tree.map(next + 16 * kPageSize4K, kPageSize4K, &p, 1), UVM_OK);
    // A 64K page over a 4K one, and a batch of which only the last page overlaps.
    EXPECT_EQ(tree.map(next + 16 * kPageSize4K, kPageSize64K, &p, 1), UVM_ERR_ALREADY_MAPPED);
    std::vector<Pte> run(17);
    for (size_t i = 0; i < run.size(); ++i)
        run[i] = vid(i * kPageSize4K);
    EXPECT_EQ(tree.map(next, kPageSize4K, run.data(), 17), UVM_ERR_ALREADY_MAPPED);
    Translation t;
    EXPECT_FALSE(tree.translate(next, &t));  // nothing of the batch went in
    EXPECT_EQ(tree.info().mapped_bytes[0], kPageSize4K);
}

TEST(PageTree, RefusesBadRequests) {
    PageTree tree;
    const Pte p = vid(0);
    EXPECT_EQ(tree.map(kVa + 4096, kPageSize64K, &p, 1), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(tree.map(kVa, 8192, &p, 1), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(tree.map(kVa, kPageSize4K, &p, 0), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(tree.map(kVa, kPageSize4K, nullptr, 1), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(tree.map(1ull << 57, kPageSize4K, &p, 1), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(tree.map((1ull << 57) - kPageSize4K, kPageSize4K, std::vector<Pte>(2, p).data(), 2),
              UVM_ERR_INVALID_ARGUMENT);
    const Pte misaligned = vid(0x1000);
    EXPECT_EQ(tree.map(kVa, kPageSize64K, &misaligned, 1), UVM_ERR_INVALID_ARGUMENT);
    const Pte invalid{};
    EXPECT_EQ(tree.map(kVa, kPageSize4K, &invalid, 1), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(tree.unmap(kVa, kPageSize4K, 1), UVM_ERR_NOT_MAPPED);
    ASSERT_EQ(tree.map(kVa, kPageSize64K, &p, 1), UVM_OK);
    EXPECT_EQ(tree.unmap(kVa, kPageSize4K, 1), UVM_ERR_NOT_MAPPED);  // wrong page size
    EXPECT_EQ(tree.unmap(kVa, kPageSize64K, 2), UVM_ERR_NOT_MAPPED);  // half of it unmapped
    Translation t;
    EXPECT_TRUE(tree.translate(kVa, &t));  // the failed unmaps took nothing
}

TEST(PageTree, HighAndLowAddressesUseSeparateDirectories) {
    PageTree tree;
    const Pte p = vid(0);
    const uint64_t high = (1ull << 56) + kVa;  // the other PDE4 entry
    ASSERT_EQ(tree.map(kVa, kPageSize2M, &p, 1), UVM_OK);
    ASSERT_EQ(tree.map(high, kPageSize2M, &p, 1), UVM_OK);
    EXPECT_EQ(tree.info().levels[1].tables, 2u);
    ASSERT_EQ(tree.unmap(high, kPageSize2M, 1), UVM_OK);
    EXPECT_EQ(tree.info().levels[1].tables, 1u);
    Translation t;
    EXPECT_TRUE(tree.translate(kVa, &t));
}

TEST(PageTree, PeerAndSysAperturesRoundTrip) {
    PageTree tree;
    const Pte peer{0x200000, Aperture::Peer, 3};
    const Pte sys{0x123456000, Aperture::Sys, 0};
    ASSERT_EQ(tree.map(kVa, kPageSize2M, &peer, 1), UVM_OK);
    ASSERT_EQ(tree.map(kVa + kPageSize2M, kPageSize4K, &sys, 1), UVM_OK);
    Translation t;
    ASSERT_TRUE(tree.translate(kVa + 7, &t));
    EXPECT_EQ(t.aperture, Aperture::Peer);
    EXPECT_EQ(t.peer_gpu, 3);
    ASSERT_TRUE(tree.translate(kVa + kPageSize2M + 7, &t));
    EXPECT_EQ(t.aperture, Aperture::Sys);
    EXPECT_EQ(t.address, 0x123456007u);
}
