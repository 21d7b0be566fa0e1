// The C functions of uvm_observe.h, over api/entry.h.
#include "api/entry.h"
#include "observe/stats.h"

using namespace uvm::api;

extern "C" {

uvm_status_t uvm_leak_report(uvm_report_format_t format, char *buf, size_t size, size_t *needed) {
    return api_call([&]() -> uvm_status_t {
        bool json;
        const uvm_status_t status = check_report(format, buf, size, &json);
        if (status != UVM_OK)
            return status;
        if (!t_leaks.any)
            return uvm::fail(UVM_ERR_NOT_FOUND, "this thread's last uvm_manager_destroy found no leaked objects");
        return copy_out(json ? t_leaks.json : t_leaks.text, buf, size, needed);
    });
}

uvm_status_t uvm_objects_report(uvm_manager_t *m, uvm_report_format_t format, char *buf, size_t size,
                                size_t *needed) {
    return enter(m, [&](Manager &mgr) -> uvm_status_t {
        bool json;
        const uvm_status_t checked = check_report(format, buf, size, &json);
        if (checked != UVM_OK)
            return checked;
        return copy_out(uvm::objects_report(mgr.live_objects(), json, "live objects"), buf, size, needed);
    });
}

uvm_status_t uvm_trace_start(uvm_manager_t *m, uint64_t ring_bytes) {
    return enter(m, [&](Manager &mgr) -> uvm_status_t {
        return mgr.tracer().start(ring_bytes);
    });
}

uvm_status_t uvm_trace_stop(uvm_manager_t *m) {
    return enter(m, [&](Manager &mgr) -> uvm_status_t {
        return mgr.tracer().stop();
    });
}

uvm_status_t uvm_trace_info(uvm_manager_t *m, uvm_trace_info_t *out) {
    return enter(m, [&](Manager &mgr) -> uvm_status_t {
        if (!out)
            return null_argument("out");
        mgr.tracer().info(out);
        return UVM_OK;
    });
}

uvm_status_t uvm_trace_export(uvm_manager_t *m, uvm_trace_format_t format, char *buf, size_t size, size_t *needed) {
    return enter(m, [&](Manager &mgr) -> uvm_status_t {
        const int f = uvm::enum_value(format);
        if (f != UVM_TRACE_CHROME_JSON && f != UVM_TRACE_SVG)
            return uvm::fail(UVM_ERR_INVALID_ARGUMENT, "format %d: no such trace format; UVM_TRACE_CHROME_JSON or _SVG",
                             f);
        const uvm_status_t checked = check_buffer(buf, size);
        if (checked != UVM_OK)
            return checked;
        std::string text;
        const bool any = f == UVM_TRACE_SVG ? uvm::trace_svg(mgr, &text) : uvm::trace_chrome_json(mgr, &text);
        if (!any)
            return uvm::fail(UVM_ERR_NOT_FOUND, "the manager was never traced (uvm_trace_start)");
        return copy_out(text, buf, size, needed);
    });
}

uvm_status_t uvm_oom_report(uvm_manager_t *m, uvm_report_format_t format, char *buf, size_t size, size_t *needed) {
    return enter(m, [&](Manager &mgr) -> uvm_status_t {
        bool json;
        const uvm_status_t checked = check_report(format, buf, size, &json);
        if (checked != UVM_OK)
            return checked;
        std::string text;
        if (!uvm::last_oom_report(mgr, json, &text))
            return uvm::fail(UVM_ERR_NOT_FOUND, "this thread has had no OUT_OF_MEMORY from this manager");
        return copy_out(text, buf, size, needed);
    });
}

uvm_status_t uvm_manager_snapshot(uvm_manager_t *m, char *buf, size_t size, size_t *needed) {
    return enter(m, [&](Manager &mgr) -> uvm_status_t {
        const uvm_status_t checked = check_buffer(buf, size);
        if (checked != UVM_OK)
            return checked;
        return copy_out(uvm::snapshot_json(mgr), buf, size, needed);
    });
}

uvm_status_t uvm_metrics_serve(uvm_manager_t *m, const char *address, uint16_t port, uvm_metrics_server_t **out,
                               uint16_t *bound_port) {
    return enter(m, [&](Manager &mgr) -> uvm_status_t {
        return mgr.metrics_servers().serve(address, port, out, bound_port);
    });
}

uvm_status_t uvm_metrics_stop(uvm_manager_t *m, uvm_metrics_server_t *server) {
    return enter(m, [&](Manager &mgr) -> uvm_status_t {
        if (!server)
            return null_argument("server");
        return mgr.metrics_servers().stop(server);
    });
}

uvm_status_t uvm_manager_metrics(uvm_manager_t *m, char *buf, size_t size, size_t *needed) {
    return enter(m, [&](Manager &mgr) -> uvm_status_t {
        const uvm_status_t checked = check_buffer(buf, size);
        if (checked != UVM_OK)
            return checked;
        return copy_out(uvm::metrics_text(mgr), buf, size, needed);
    });
}

uvm_status_t uvm_gpu_page_tree_info(uvm_manager_t *m, uint32_t gpu, uvm_va_space_kind_t space,
                                    uvm_page_tree_info_t *out) {
    return enter(m, [&](Manager &mgr) -> uvm_status_t {
        uvm_status_t status = check_gpu(mgr, gpu, out);
        if (status != UVM_OK)
            return status;
        const int raw_space = uvm::enum_value(space);
        if (raw_space != UVM_VA_SPACE_KERNEL && raw_space != UVM_VA_SPACE_USER)
            return uvm::fail(UVM_ERR_INVALID_ARGUMENT, "space %d: no such address space; UVM_VA_SPACE_KERNEL or _USER",
                             raw_space);
        const uvm::mmu::PageTreeInfo info = mgr.gpu(gpu).tree(space).info();
        uvm_page_tree_info_t r;
        std::memset(&r, 0, sizeof(r));
        r.level_count = uvm::mmu::PageTreeInfo::kLevels;
        for (int i = 0; i < uvm::mmu::PageTreeInfo::kLevels; ++i) {
            std::snprintf(r.levels[i].name, sizeof(r.levels[i].name), "%s", info.levels[i].name);
            r.levels[i].va_bit_hi = info.levels[i].va_bit_hi;
            r.levels[i].va_bit_lo = info.levels[i].va_bit_lo;
            r.levels[i].tables = info.levels[i].tables;
            r.levels[i].bytes = info.levels[i].bytes;
        }
        r.table_bytes = info.table_bytes;
        for (int i = 0; i < UVM_CHUNK_SIZE_COUNT; ++i)
            r.mapped_bytes[i] = info.mapped_bytes[i];
        *out = r;
        return UVM_OK;
    });
}

uvm_status_t uvm_gpu_stats(uvm_manager_t *m, uint32_t gpu, uvm_gpu_stats_t *out) {
    return enter(m, [&](Manager &mgr) { return uvm::gpu_stats(mgr, gpu, out); });
}

uvm_status_t uvm_manager_stats(uvm_manager_t *m, uvm_manager_stats_t *out) {
    return enter(m, [&](Manager &mgr) { return uvm::manager_stats(mgr, out); });
}

}  // extern "C"
