// What a failed operation must leave as it was: the manager's statistics,
// every GPU's statistics and page trees, the given objects' descriptions and
// the trace's counts, compared byte for byte. Shared by the failure-injection
// tests (backend, driver and host allocation failures).
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <algorithm>
#include <initializer_list>
#include <string>
#include <vector>

#include "uvm/uvm.h"

namespace uvm_test {

struct Snapshot {
    uvm_manager_stats_t manager;
    std::vector<uvm_gpu_stats_t> gpus;
    std::vector<uvm_page_tree_info_t> trees;
    std::vector<uvm_mem_info_t> objects;
    uvm_trace_info_t trace;  // a failed call records no event

    static Snapshot take(uvm_manager_t *mgr, std::initializer_list<uvm_mem_t *> objects) {
        Snapshot s;
        std::memset(&s.manager, 0, sizeof(s.manager));
        std::memset(&s.trace, 0, sizeof(s.trace));
        EXPECT_EQ(uvm_manager_stats(mgr, &s.manager), UVM_OK);
        uint32_t n = 0;
        uvm_gpu_count(mgr, &n);
        for (uint32_t g = 0; g < n; ++g) {
            uvm_gpu_stats_t gs;
            std::memset(&gs, 0, sizeof(gs));
            EXPECT_EQ(uvm_gpu_stats(mgr, g, &gs), UVM_OK);
            gs.ce_operations = gs.ce_bytes = gs.ce_translations = 0;  // partial copies count
            s.gpus.push_back(gs);
            for (uvm_va_space_kind_t space : {UVM_VA_SPACE_KERNEL, UVM_VA_SPACE_USER}) {
                uvm_page_tree_info_t t;
                std::memset(&t, 0, sizeof(t));
                EXPECT_EQ(uvm_gpu_page_tree_info(mgr, g, space, &t), UVM_OK);
                s.trees.push_back(t);
            }
        }
        for (uvm_mem_t *m : objects) {
            if (!m)
                continue;
            uvm_mem_info_t i;
            std::memset(&i, 0, sizeof(i));
            EXPECT_EQ(uvm_mem_info(mgr, m, &i), UVM_OK);
            s.objects.push_back(i);
        }
        EXPECT_EQ(uvm_trace_info(mgr, &s.trace), UVM_OK);
        return s;
    }
    // Where two snapshots differ: which part, and which 8-byte word of it.
    std::string differences(const Snapshot &o) const {
        std::string out;
        auto words = [&](const char *what, size_t i, const void *a, const void *b, size_t size) {
            const auto *x = static_cast<const unsigned char *>(a), *y = static_cast<const unsigned char *>(b);
            for (size_t w = 0; w * 8 < size; ++w) {
                uint64_t u = 0, v = 0;
                std::memcpy(&u, x + w * 8, std::min<size_t>(8, size - w * 8));
                std::memcpy(&v, y + w * 8, std::min<size_t>(8, size - w * 8));
                if (u != v)
                    out += std::string(what) + "[" + std::to_string(i) + "] word " + std::to_string(w) + ": " +
                           std::to_string(u) + " -> " + std::to_string(v) + "; ";
            }
        };
        words("manager", 0, &manager, &o.manager, sizeof(manager));
        for (size_t i = 0; i < gpus.size() && i < o.gpus.size(); ++i)
            words("gpu", i, &gpus[i], &o.gpus[i], sizeof(gpus[i]));
        for (size_t i = 0; i < trees.size() && i < o.trees.size(); ++i)
            words("tree", i, &trees[i], &o.trees[i], sizeof(trees[i]));
        for (size_t i = 0; i < objects.size() && i < o.objects.size(); ++i)
            words("object", i, &objects[i], &o.objects[i], sizeof(objects[i]));
        words("trace", 0, &trace, &o.trace, sizeof(trace));
        return out;
    }
    bool operator==(const Snapshot &o) const {
        auto same = [](const auto &a, const auto &b) {
            if (a.size() != b.size())
                return false;
            for (size_t i = 0; i < a.size(); ++i)
                if (std::memcmp(&a[i], &b[i], sizeof(a[i])) != 0)
                    return false;
            return true;
        };
        return std::memcmp(&manager, &o.manager, sizeof(manager)) == 0 && same(gpus, o.gpus) &&
               same(trees, o.trees) && same(objects, o.objects) &&
               std::memcmp(&trace, &o.trace, sizeof(trace)) == 0;
    }
};

}  // namespace uvm_test
