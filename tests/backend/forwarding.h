// Whether a FaultInjectingBackend forwards every capability of the backend
// under it (backend/fault_injection.h): each accessor null exactly where the
// inner backend's is, and every failable call of a capability it forwards
// counted and failed as the core's are. Shared by the sim's fault injection
// tests and the CUDA backend's over the stand-in driver (which has every
// capability). A capability the adaptor forgot would make the manager take
// the "absent" path under fault injection only, and this fails.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <utility>
#include <vector>

#include "backend/fault_injection.h"

namespace uvm_test {

// `inner` is the backend `faults` wraps (still owned by it).
inline void expect_forwards_every_capability(uvm::backend::Backend &inner,
                                             uvm::backend::FaultInjectingBackend &faults) {
    using namespace uvm::backend;
    EXPECT_EQ(faults.streams() != nullptr, inner.streams() != nullptr) << "streams";
    EXPECT_EQ(faults.sharing() != nullptr, inner.sharing() != nullptr) << "sharing";
    EXPECT_EQ(faults.managed() != nullptr, inner.managed() != nullptr) << "managed";
    EXPECT_EQ(faults.placement() != nullptr, inner.placement() != nullptr) << "placement";
    EXPECT_EQ(faults.offload() != nullptr, inner.offload() != nullptr) << "offload";

    // Every failable call, armed to fail at once: it must come back BACKEND
    // with the failure counted, never reaching the backend below (so the
    // arguments need name nothing real).
    std::vector<std::pair<const char *, std::function<uvm_status_t()>>> calls;
    uint64_t u = 0;
    int fd = -1;
    void *p = nullptr;
    HostAllocation host;
    CeAddress a;
    const uvm::mmu::Pte pte{};
    calls.emplace_back("gpu_open", [&] { return faults.gpu_open(0); });
    if (StreamCapability *s = faults.streams()) {
        calls.emplace_back("stream_create", [=, &p] { return s->stream_create(0, nullptr, &p); });
        calls.emplace_back("stream_fence", [=, &u] { return s->stream_fence(nullptr, &u); });
        calls.emplace_back("stream_wait", [=] { return s->stream_wait(nullptr, nullptr, 1); });
        calls.emplace_back("stream_synchronize", [=] { return s->stream_synchronize(nullptr); });
        calls.emplace_back("ce_copy_async", [=, &a] { return s->ce_copy_async(0, nullptr, a, a, 1); });
        calls.emplace_back("ce_memset_async", [=, &a] { return s->ce_memset_async(0, nullptr, a, 0, 1); });
        calls.emplace_back("stream_hold", [=] { return s->stream_hold(nullptr); });
        calls.emplace_back("stream_capture_info", [=] {
            StreamCaptureInfo info;
            return s->stream_capture_info(nullptr, &info);
        });
        // Not failable (it cannot fail): forwarded, and the mode set is the inner backend's.
        const CaptureMode before = s->exchange_capture_mode(CaptureMode::Relaxed);
        EXPECT_EQ(inner.streams()->exchange_capture_mode(before), CaptureMode::Relaxed) << "exchange_capture_mode";
    }
    if (SharingCapability *s = faults.sharing()) {
        EXPECT_EQ(s->export_handle_kind(), inner.sharing()->export_handle_kind());
        calls.emplace_back("root_chunk_export", [=, &fd, &u] { return s->root_chunk_export(0, 0, &fd, &u); });
        calls.emplace_back("roots_import", [=, &fd, &u] { return s->roots_import(0, &fd, &u, 1, &u); });
        calls.emplace_back("sysmem_import", [=, &host] { return s->sysmem_import(-1, 4096, 4096, &host); });
    }
    if (ManagedCapability *m = faults.managed()) {
        calls.emplace_back("managed_alloc", [=, &u] { return m->managed_alloc(0, 4096, &u); });
        calls.emplace_back("managed_advise",
                           [=] { return m->managed_advise(0, 4096, static_cast<uvm_managed_advice_t>(UVM_ADVISE_SET_READ_MOSTLY), 0); });
        calls.emplace_back("managed_prefetch", [=] { return m->managed_prefetch(0, 4096, 0); });
    }
    if (PlacementCapability *pl = faults.placement()) {
        EXPECT_EQ(pl->gpu_user_sysmem_through_cpu(), inner.placement()->gpu_user_sysmem_through_cpu());
        EXPECT_EQ(pl->gpu_user_survives_move(false), inner.placement()->gpu_user_survives_move(false));
        calls.emplace_back("kernel_va_placement",
                           [=, &pte, &u] { return pl->kernel_va_placement(0, 4096, &pte, 1, &u); });
        calls.emplace_back("user_va_placement",
                           [=, &pte, &u] { return pl->user_va_placement(0, 4096, &pte, 1, &u); });
        calls.emplace_back("user_range_reserve", [=, &u] { return pl->user_range_reserve(2 << 20, &u); });
    }
    if (OffloadCapability *o = faults.offload()) {
        calls.emplace_back("root_chunks_offload", [=, &u] { return o->root_chunks_offload(0, &u, 1); });
        calls.emplace_back("root_chunks_restore", [=, &u] { return o->root_chunks_restore(0, &u, 1); });
        calls.emplace_back("root_span_shrink", [=, &u] {
            uint64_t released = 1, copied = 1;
            const uvm_status_t status = o->root_span_shrink(0, u, 1, &released, &copied);
            EXPECT_EQ(released + copied, 0u) << "a failed shrink says it gave nothing back";
            return status;
        });
    }
    for (const auto &[name, call] : calls) {
        faults.fail_call(1);
        EXPECT_EQ(call(), UVM_ERR_BACKEND) << name << " was not failed";
        EXPECT_TRUE(faults.fired()) << name << " was not counted";
        faults.fail_call(0);
    }
}

}  // namespace uvm_test
