// Tests of the page tree, after nvidia-uvm's uvm_page_tree_test.c.
#include <gtest/gtest.h>

#include <random>
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

TEST(PageTree, RemapPointsMappedPagesElsewhereInPlace) {
    for (uint64_t page : {kPageSize4K, kPageSize64K, kPageSize2M}) {
        PageTree tree;
        std::vector<Pte> ptes, moved;
        // Across a PDE0 boundary for the small pages: the walk visits two entries.
        const uint64_t va = kVa + (page == kPageSize2M ? 0 : kPageSize2M - 2 * page);
        for (int i = 0; i < 4; ++i) {
            ptes.push_back(vid((10 + i) * page));
            moved.push_back(vid((100 + i) * page));
        }
        ASSERT_EQ(tree.map(va, page, ptes.data(), ptes.size()), UVM_OK);
        const mmu::PageTreeInfo before = tree.info();
        ASSERT_EQ(tree.remap(va, page, moved.data(), moved.size()), UVM_OK);
        for (int i = 0; i < 4; ++i) {
            Translation t;
            ASSERT_TRUE(tree.translate(va + i * page + 5, &t));
            EXPECT_EQ(t.address, (100 + i) * page + 5);
        }
        const mmu::PageTreeInfo after = tree.info();
        EXPECT_EQ(after.table_bytes, before.table_bytes);
        EXPECT_EQ(after.mapped_bytes[chunk_size_index(page)], 4 * page);
        // Not mapped (one page past the end), or of another page size: nothing changes.
        EXPECT_EQ(tree.remap(va + page, page, ptes.data(), 4), UVM_ERR_NOT_MAPPED);
        const uint64_t other = page == kPageSize2M ? kPageSize64K : kPageSize2M;
        const Pte one = vid(7 * other);
        EXPECT_EQ(tree.remap(kVa, other, &one, 1), UVM_ERR_NOT_MAPPED);
        EXPECT_EQ(tree.remap(va, page, nullptr, 4), UVM_ERR_INVALID_ARGUMENT);
        Translation t;
        ASSERT_TRUE(tree.translate(va, &t));
        EXPECT_EQ(t.address, 100 * page);
        ASSERT_EQ(tree.unmap(va, page, 4), UVM_OK);
        EXPECT_EQ(tree.info().table_bytes, 4096u);
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

// Random maps and unmaps of runs of every page size, some across PDE0 entries
// and PDE0s, against a plain model: one page size per 4 KiB of VA. The tree
// must accept exactly what the model says is free (map) or mapped with that
// page size (unmap), translate every page as the model does, and end empty.
TEST(PageTree, RandomRunsMatchAPlainModel) {
    PageTree tree;
    std::mt19937_64 rng(17);
    const uint64_t base = (1ull << 29) - 8 * kPageSize2M;  // runs cross a PDE0 boundary
    const uint64_t span = 16 * kPageSize2M;
    std::vector<uint64_t> model(span / kPageSize4K, 0);  // page size mapping each 4K, 0 = none
    std::vector<std::pair<uint64_t, std::pair<uint64_t, size_t>>> live;  // va -> (page size, count)
    const uint64_t sizes[] = {kPageSize4K, kPageSize64K, kPageSize2M};
    size_t refused = 0, made = 0;
    for (int step = 0; step < 4000; ++step) {
        if (!live.empty() && rng() % 100 < 40) {
            const size_t i = rng() % live.size();
            const uint64_t va = live[i].first, page = live[i].second.first;
            const size_t count = live[i].second.second;
            // A wrong page size is refused and changes nothing.
            const uint64_t wrong = sizes[(chunk_size_index(page) + 1) % 3];
            if (is_aligned(va, wrong) && count * page / wrong > 0)
                ASSERT_EQ(tree.unmap(va, wrong, count * page / wrong), UVM_ERR_NOT_MAPPED);
            ASSERT_EQ(tree.unmap(va, page, count), UVM_OK);
            for (uint64_t a = va; a < va + count * page; a += kPageSize4K)
                model[(a - base) / kPageSize4K] = 0;
            live[i] = live.back();
            live.pop_back();
            continue;
        }
        const uint64_t page = sizes[rng() % 3];
        const size_t count = 1 + rng() % (page == kPageSize2M ? 3 : page == kPageSize64K ? 48 : 300);
        const uint64_t va = base + (rng() % (span / page)) * page;
        if (va + count * page > base + span)
            continue;
        bool free = true;
        for (uint64_t a = va; a < va + count * page && free; a += kPageSize4K)
            free = model[(a - base) / kPageSize4K] == 0;
        std::vector<Pte> ptes(count);
        for (size_t j = 0; j < count; ++j)
            ptes[j] = vid(0x40000000ull + (va - base) + j * page);
        const uvm_status_t s = tree.map(va, page, ptes.data(), count);
        ASSERT_EQ(s, free ? UVM_OK : UVM_ERR_ALREADY_MAPPED) << "step " << step;
        if (!free) {
            refused++;
            continue;
        }
        made++;
        for (uint64_t a = va; a < va + count * page; a += kPageSize4K)
            model[(a - base) / kPageSize4K] = page;
        live.push_back({va, {page, count}});
        if (step % 50 == 0) {
            for (uint64_t a = base; a < base + span; a += kPageSize4K * 7) {
                Translation t;
                const uint64_t want = model[(a - base) / kPageSize4K];
                ASSERT_EQ(tree.translate(a, &t), want != 0) << a;
                if (want) {
                    EXPECT_EQ(t.page_size, want);
                    EXPECT_EQ(t.address, 0x40000000ull + (a - base));
                }
            }
        }
    }
    EXPECT_GT(refused, 100u);  // the run hit overlaps of every kind, not only free space
    EXPECT_GT(made, 1000u);
    uint64_t mapped = 0;
    for (const auto &l : live)
        mapped += l.second.first * l.second.second;
    const mmu::PageTreeInfo info = tree.info();
    EXPECT_EQ(info.mapped_bytes[0] + info.mapped_bytes[1] + info.mapped_bytes[2], mapped);
    for (const auto &l : live)
        ASSERT_EQ(tree.unmap(l.first, l.second.first, l.second.second), UVM_OK);
    const mmu::PageTreeInfo empty = tree.info();
    EXPECT_EQ(empty.table_bytes, 4096u);  // only the root is left
}
