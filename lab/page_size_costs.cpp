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

std::vector<double> nnls(const std::vector<std::vector<double>> &a, const std::vector<double> &b) {
    const size_t rows = a.size(), cols = rows ? a[0].size() : 0;
    UVM_ASSERT(cols <= 6 && b.size() == rows);
    std::vector<double> scale(cols, 0.0);
    for (const auto &row : a)
        for (size_t j = 0; j < cols; ++j)
            scale[j] = std::max(scale[j], std::fabs(row[j]));
    std::vector<double> best(cols, 0.0);
    double best_residual = 0;
    for (const double v : b)
        best_residual += v * v;  // the empty subset: x = 0
    // A subset must beat the best so far by more than round-off: where a
    // smaller one fits as well, its terms stand and the others stay zero
    // (no 1e-22 bend on a straight line). Subsets go by size for that.
    const double tolerance = 1e-12 * (best_residual + 1e-300);
    std::vector<uint32_t> masks;
    for (uint32_t mask = 1; mask < (1u << cols); ++mask)
        masks.push_back(mask);
    std::stable_sort(masks.begin(), masks.end(),
                     [](uint32_t x, uint32_t y) { return __builtin_popcount(x) < __builtin_popcount(y); });
    for (const uint32_t mask : masks) {
        std::vector<size_t> use;
        for (size_t j = 0; j < cols; ++j)
            if ((mask >> j) & 1 && scale[j] > 0)
                use.push_back(j);
        if (use.size() != size_t(__builtin_popcount(mask)))
            continue;  // a column of zeros adds nothing
        // Normal equations of the scaled subset, solved with partial pivoting.
        const size_t k = use.size();
        std::vector<std::vector<long double>> m(k, std::vector<long double>(k + 1, 0));
        for (size_t r = 0; r < rows; ++r)
            for (size_t i = 0; i < k; ++i) {
                const long double ai = a[r][use[i]] / scale[use[i]];
                for (size_t j = 0; j < k; ++j)
                    m[i][j] += ai * (a[r][use[j]] / scale[use[j]]);
                m[i][k] += ai * b[r];
            }
        bool singular = false;
        for (size_t c = 0; c < k && !singular; ++c) {
            size_t pivot = c;
            for (size_t r = c + 1; r < k; ++r)
                if (std::fabs(double(m[r][c])) > std::fabs(double(m[pivot][c])))
                    pivot = r;
            std::swap(m[c], m[pivot]);
            if (std::fabs(double(m[c][c])) < 1e-12 * std::fabs(double(m[0][0]) + 1e-300)) {
                singular = true;
                break;
            }
            for (size_t r = 0; r < k; ++r)
                if (r != c) {
                    const long double f = m[r][c] / m[c][c];
                    for (size_t j = c; j <= k; ++j)
                        m[r][j] -= f * m[c][j];
                }
        }
        if (singular)
            continue;
        std::vector<double> x(cols, 0.0);
        bool negative = false;
        for (size_t i = 0; i < k; ++i) {
            x[use[i]] = double(m[i][k] / m[i][i]) / scale[use[i]];
            negative = negative || x[use[i]] < 0;
        }
        if (negative)
            continue;
        double residual = 0;
        for (size_t r = 0; r < rows; ++r) {
            double e = -b[r];
            for (size_t j = 0; j < cols; ++j)
                e += a[r][j] * x[j];
            residual += e * e;
        }
        if (residual < best_residual - tolerance) {
            best_residual = residual;
            best = x;
        }
    }
    return best;
}

namespace {

bool all_positive(const std::vector<std::pair<double, double>> &pts) {
    for (const auto &p : pts)
        if (!(p.first > 0) || !(p.second > 0))
            return false;
    return true;
}

// The non-negative fit of call, per-unit and (with a knee) bend, on relative
// error; `*error` = the sum of squared relative errors.
CostCurve fit_with_knee(const std::vector<std::pair<double, double>> &pts, double knee, bool bend,
                        double *error) {
    std::vector<std::vector<double>> a;
    std::vector<double> b;
    for (const auto &p : pts) {
        const double past = p.first > knee ? p.first - knee : 0;
        std::vector<double> row{1 / p.second, p.first / p.second};
        if (bend)
            row.push_back(past * past / p.second);
        a.push_back(row);
        b.push_back(1);
    }
    const std::vector<double> x = nnls(a, b);
    CostCurve c;
    c.call_us = x[0];
    c.per_unit_us = x[1];
    if (bend) {
        c.bend_us = x[2];
        c.knee_units = c.bend_us > 0 ? knee : 0;
    }
    double sum = 0;
    for (const auto &p : pts) {
        const double e = c.at(p.first) / p.second - 1;
        sum += e * e;
    }
    *error = sum;
    return c;
}

}  // namespace

CostCurve fit_relative(const std::vector<std::pair<double, double>> &pts) {
    CostCurve c;
    if (pts.empty() || !all_positive(pts))
        return c;
    bool one_size = true;
    for (const auto &p : pts)
        one_size = one_size && p.first == pts[0].first;
    if (one_size) {  // no slope to see: all of it per unit
        double sum = 0;
        for (const auto &p : pts)
            sum += p.second / p.first;
        c.per_unit_us = sum / double(pts.size());
        return c;
    }
    double error;
    return fit_with_knee(pts, 0, false, &error);
}

CostCurve fit_curve(const std::vector<std::pair<double, double>> &pts) {
    if (pts.size() < 3 || !all_positive(pts))
        return fit_relative(pts);
    std::vector<double> knees{0};
    double largest = 0;
    for (const auto &p : pts)
        largest = std::max(largest, p.first);
    for (const auto &p : pts)
        if (p.first < largest)
            knees.push_back(p.first);
    std::sort(knees.begin(), knees.end());
    knees.erase(std::unique(knees.begin(), knees.end()), knees.end());
    CostCurve best;
    double best_error = 0;
    bool have = false;
    for (const double knee : knees) {
        double error;
        const CostCurve c = fit_with_knee(pts, knee, true, &error);
        if (!have || error < best_error * (1 - 1e-9)) {  // a tie keeps the smaller knee
            best = c;
            best_error = error;
            have = true;
        }
    }
    return best;
}

double CostModel::pin_us(uint64_t bytes, uint64_t page_bytes) const {
    if (page_bytes >= k2M)
        return pin_2m.at(double(bytes) / double(k2M));
    return pin_4k.at(double(bytes) / double(k4K));
}

double CostModel::growth_us(uint64_t bytes) const {
    const double handles = double((bytes + k2M - 1) / k2M);
    return handles * (create_us + map_us) + set_access.at(handles) + interleave.at(handles);
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
        CostCurve *cost;
        bool curve;  // may bend (pinning, set_access); else a line
    };
    CostCurve create, map;
    const Need needs[] = {
        {"host_register", k4K, k4K, &m.pin_4k, true},  {"host_register", k2M, k2M, &m.pin_2m, true},
        {"mem_create", 0, k2M, &create, false},        {"mem_map", 0, k2M, &map, false},
        {"set_access", 0, k2M, &m.set_access, false},  {"copy_h2d", 0, 1, &m.copy_h2d, false},
        {"copy_d2h", 0, 1, &m.copy_d2h, false},
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
        *n.cost = n.curve ? fit_curve(pts) : fit_relative(pts);
    }
    m.create_us = create.at(1);
    m.map_us = map.at(1);
    // Growth's interleave: the growth rows' excess over their calls, a call +
    // a cost per handle, both non-negative (a growth that costs less than its
    // parts leaves it zero). Rows: ((parts + c + n e) / y - 1) -> minimise.
    std::vector<std::vector<double>> a;
    std::vector<double> b;
    for (const auto &p : points(rows, name, "growth", 0, k2M, hold_out)) {
        const double parts = p.first * (m.create_us + m.map_us) + m.set_access.at(p.first);
        a.push_back({1 / p.second, p.first / p.second});
        b.push_back(1 - parts / p.second);
    }
    if (!a.empty()) {
        const std::vector<double> x = nnls(a, b);
        m.interleave.call_us = x[0];
        m.interleave.per_unit_us = x[1];
    }
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
        if (m.device != name ||
            (m.quantity != "host_register" && m.quantity != "set_access" && m.quantity != "copy_h2d" &&
             m.quantity != "copy_d2h" && m.quantity != "growth" && m.quantity != "map_object"))
            continue;  // another device's, or a call measured at one size (nothing to hold out)
        // The same model fitted without this row's size: whether it predicts
        // what it has not seen. Where that leaves a fit without points (a
        // quantity measured at one size only), the full fit stands in.
        CostModel held;
        if (fit_costs(rows, name, m.bytes, &held, nullptr) != UVM_OK)
            held = all;
        const auto predict = [&m](const CostModel &c) {
            if (m.quantity == "host_register")
                return c.pin_us(m.bytes, m.page_bytes);
            if (m.quantity == "set_access")
                return c.set_access.at(double(m.bytes) / double(k2M));
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
