// The lab's cost model, fitted to the calibration file (page_size_costs.h).
#include "lab/page_size_costs.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>

#include "common/assert.h"

namespace uvm::lab {

namespace {

constexpr uint64_t k2M = 2ull << 20;
constexpr uint64_t k4K = 4096;

std::vector<std::string> split(const std::string &line) {
    std::vector<std::string> fields;
    size_t start = 0;
    for (;;) {
        const size_t comma = line.find(',', start);
        fields.push_back(line.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
        if (comma == std::string::npos)
            return fields;
        start = comma + 1;
    }
}

bool to_u64(const std::string &s, uint64_t *out) {
    if (s.empty() || !std::isdigit(static_cast<unsigned char>(s[0])))
        return false;
    char *end = nullptr;
    *out = std::strtoull(s.c_str(), &end, 10);
    return *end == '\0';
}

bool to_double(const std::string &s, double *out) {
    if (s.empty())
        return false;
    char *end = nullptr;
    *out = std::strtod(s.c_str(), &end);
    return *end == '\0' && std::isfinite(*out) && *out >= 0;
}

std::string lower(std::string s) {
    for (char &c : s)
        c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

// The device named `device` exactly (case-insensitive), else the one whose
// name contains it; NOT_FOUND otherwise. An exact name always wins, so that
// fit_costs called with a name validate_costs picked, or "NVIDIA H200"
// beside "NVIDIA H200 NVL", is never ambiguous.
uvm_status_t pick_device(const std::vector<Measurement> &rows, const std::string &device, std::string *name,
                         std::string *error) {
    std::vector<std::string> matches;
    for (const std::string &d : calibration_devices(rows)) {
        if (lower(d) == lower(device)) {
            *name = d;
            return UVM_OK;
        }
        if (lower(d).find(lower(device)) != std::string::npos)
            matches.push_back(d);
    }
    if (matches.size() == 1) {
        *name = matches[0];
        return UVM_OK;
    }
    if (error)
        *error = matches.empty() ? "no device in the calibration file matches '" + device + "'"
                                 : "'" + device + "' matches more than one device in the calibration file";
    return UVM_ERR_NOT_FOUND;
}

// (units, median) of `quantity` rows of `device` with `page` (0: any), leaving
// out rows of `hold_out` bytes; units = bytes / unit.
std::vector<std::pair<double, double>> points(const std::vector<Measurement> &rows, const std::string &device,
                                              const char *quantity, uint64_t page, uint64_t unit, uint64_t hold_out) {
    std::vector<std::pair<double, double>> out;
    for (const Measurement &m : rows)
        if (m.device == device && m.quantity == quantity && (page == 0 || m.page_bytes == page) &&
            m.bytes != hold_out)
            out.emplace_back(double(m.bytes) / double(unit), m.median_us);
    return out;
}

}  // namespace

uvm_status_t read_calibration(std::istream &in, std::vector<Measurement> *out, std::string *error) {
    std::vector<Measurement> rows;
    std::string line;
    for (uint64_t number = 1; std::getline(in, line); ++number) {
        if (!line.empty() && line.back() == '\r')
            line.pop_back();
        if (line.empty() || line[0] == '#' || line.rfind("device,", 0) == 0)
            continue;
        const std::vector<std::string> f = split(line);
        Measurement m;
        uint64_t samples = 0;
        const char *why = nullptr;
        if (f.size() != 9)
            why = "expected 9 fields: device,date,quantity,bytes,page_bytes,samples,median_us,min_us,max_us";
        else if (f[0].empty() || f[2].empty())
            why = "an empty device or quantity";
        else if (!to_u64(f[3], &m.bytes) || !to_u64(f[4], &m.page_bytes) || m.bytes == 0 || m.page_bytes == 0)
            why = "bytes and page_bytes must be positive integers";
        else if (!to_u64(f[5], &samples) || samples == 0 || samples > UINT32_MAX)
            why = "samples must be a positive integer";
        else if (!to_double(f[6], &m.median_us) || !to_double(f[7], &m.min_us) || !to_double(f[8], &m.max_us) ||
                 m.median_us <= 0)
            why = "the times must be non-negative numbers and the median positive";
        if (why) {
            if (error)
                *error = "line " + std::to_string(number) + ": " + why;
            return UVM_ERR_INVALID_ARGUMENT;
        }
        m.device = f[0];
        m.date = f[1];
        m.quantity = f[2];
        m.samples = static_cast<uint32_t>(samples);
        rows.push_back(std::move(m));
    }
    *out = std::move(rows);
    return UVM_OK;
}

LinearCost fit_relative(const std::vector<std::pair<double, double>> &pts) {
    LinearCost c;
    for (const auto &p : pts)
        if (!(p.first > 0) || !(p.second > 0))
            return c;
    if (pts.empty())
        return c;
    if (pts.size() == 1) {
        c.per_unit_us = pts[0].second / pts[0].first;
        return c;
    }
    // Normal equations of rows [1/y, u/y] . [a, b] = 1.
    double s11 = 0, s12 = 0, s22 = 0, r1 = 0, r2 = 0;
    for (const auto &p : pts) {
        const double a = 1 / p.second, b = p.first / p.second;
        s11 += a * a;
        s12 += a * b;
        s22 += b * b;
        r1 += a;
        r2 += b;
    }
    const double det = s11 * s22 - s12 * s12;
    if (std::fabs(det) < 1e-300 * s11 * s22) {  // every point at one size: all per unit
        c.per_unit_us = r2 / s22;
        return c;
    }
    c.call_us = (r1 * s22 - r2 * s12) / det;
    c.per_unit_us = (s11 * r2 - s12 * r1) / det;
    return c;
}

double CostModel::pin_us(uint64_t bytes, uint64_t page_bytes) const {
    if (page_bytes >= k2M)
        return pin_2m.at(double(bytes) / double(k2M));
    return pin_4k.at(double(bytes) / double(k4K));
}

double CostModel::growth_us(uint64_t bytes) const {
    const double handles = double((bytes + k2M - 1) / k2M);
    return handles * (create_us + map_us) + set_access.at(handles);
}

double CostModel::map_object_us() const {
    return map_us + set_access.at(1);
}

uvm_status_t fit_costs(const std::vector<Measurement> &rows, const std::string &device, uint64_t hold_out,
                       CostModel *out, std::string *error) {
    std::string name;
    if (uvm_status_t s = pick_device(rows, device, &name, error))
        return s;
    CostModel m;
    struct Need {
        const char *quantity;
        uint64_t page, unit;
        LinearCost *cost;
    };
    LinearCost create, map;
    const Need needs[] = {
        {"host_register", k4K, k4K, &m.pin_4k}, {"host_register", k2M, k2M, &m.pin_2m},
        {"mem_create", 0, k2M, &create},        {"mem_map", 0, k2M, &map},
        {"set_access", 0, k2M, &m.set_access},  {"copy_h2d", 0, 1, &m.copy_h2d},
        {"copy_d2h", 0, 1, &m.copy_d2h},
    };
    for (const Need &n : needs) {
        // A hold-out leaves the handle calls (one size only) as they are.
        const bool single = n.cost == &create || n.cost == &map;
        const auto pts = points(rows, name, n.quantity, n.page, n.unit, single ? 0 : hold_out);
        if (pts.empty()) {
            if (error)
                *error = name + ": no '" + n.quantity + "' rows" + (hold_out ? " besides the held-out size" : "");
            return UVM_ERR_NOT_FOUND;
        }
        *n.cost = fit_relative(pts);
    }
    m.create_us = create.at(1);
    m.map_us = map.at(1);
    *out = m;
    return UVM_OK;
}

uvm_status_t validate_costs(const std::vector<Measurement> &rows, const std::string &device,
                            std::vector<Validation> *out, std::string *error, CostModel *fitted) {
    std::string name;
    CostModel all;
    if (uvm_status_t s = pick_device(rows, device, &name, error))
        return s;
    if (uvm_status_t s = fit_costs(rows, name, 0, &all, error))
        return s;
    std::vector<Validation> v;
    for (const Measurement &m : rows) {
        if (m.device != name || (m.quantity != "host_register" && m.quantity != "copy_h2d" &&
                                 m.quantity != "copy_d2h" && m.quantity != "growth" && m.quantity != "map_object"))
            continue;  // another device's, or a call the model is built from
        // The same model fitted without this row's size: whether it predicts
        // what it has not seen. Where that leaves a fit without points (a
        // quantity measured at one size only), the full fit stands in.
        CostModel held;
        if (fit_costs(rows, name, m.bytes, &held, nullptr) != UVM_OK)
            held = all;
        const auto predict = [&m](const CostModel &c) {
            if (m.quantity == "host_register")
                return c.pin_us(m.bytes, m.page_bytes);
            if (m.quantity == "copy_h2d")
                return c.migrate_in_us(m.bytes);
            if (m.quantity == "copy_d2h")
                return c.migrate_out_us(m.bytes);
            if (m.quantity == "growth")
                return c.growth_us(m.bytes);
            return c.map_object_us();
        };
        Validation r{m.quantity, m.bytes, m.page_bytes, m.median_us, predict(all), predict(held)};
        v.push_back(r);
    }
    *out = std::move(v);
    if (fitted)
        *fitted = all;
    return UVM_OK;
}

uvm_status_t load_calibration(const std::string &path, std::vector<Measurement> *out, std::string *error) {
    std::vector<std::string> tries;
    if (!path.empty())
        tries.push_back(path);
    else
        tries = {UVM_LAB_CALIBRATION_SOURCE, UVM_LAB_CALIBRATION_INSTALLED};
    for (const std::string &t : tries) {
        std::ifstream in(t);
        if (!in)
            continue;
        std::string why;
        const uvm_status_t s = read_calibration(in, out, &why);
        if (s != UVM_OK && error)
            *error = t + ": " + why;
        return s;
    }
    if (error)
        *error = "cannot open the calibration file " + tries[0];
    return UVM_ERR_NOT_FOUND;
}

uvm_status_t load_costs(const std::string &path, const std::string &device, CostModel *out, std::string *error) {
    std::vector<Measurement> rows;
    if (uvm_status_t s = load_calibration(path, &rows, error))
        return s;
    return fit_costs(rows, device, 0, out, error);
}

std::vector<std::string> calibration_devices(const std::vector<Measurement> &rows) {
    std::vector<std::string> names;
    std::set<std::string> seen;
    for (const Measurement &m : rows)
        if (seen.insert(m.device).second)
            names.push_back(m.device);
    return names;
}

}  // namespace uvm::lab
