// Tuning tables: reading them (a strict JSON reader, the table format) and the pick.
#include "tuning.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <system_error>
#include <unordered_map>
#include <utility>

#include <sys/stat.h>

#if defined(_WIN32)
#include <stdlib.h>
#include <windows.h>
#define environ _environ
#else
#include <dlfcn.h>
#include <unistd.h>
extern char** environ;
#endif

#include "tiledispatch/conv_geometry.hpp"

namespace td {
namespace tuning {
namespace {

// ---- JSON ------------------------------------------------------------------------------

struct Json {
    enum class Type { null, boolean, number, string, array, object };
    Type type = Type::null;
    bool boolean = false;
    double number = 0.0;
    bool integer = false;  // a number written without fraction or exponent
    std::string text;
    std::vector<Json> items;
    std::vector<std::pair<std::string, Json>> members;

    // The member of that key (the last one where a key repeats), or nullptr.
    const Json* get(const char* key) const {
        for (auto it = members.rbegin(); it != members.rend(); ++it)
            if (it->first == key) return &it->second;
        return nullptr;
    }
};

// RFC 8259 JSON, nothing more: no comments, no trailing commas, no NaN, no leading zeros.
class JsonReader {
  public:
    JsonReader(const char* begin, const char* end) : begin_(begin), at_(begin), end_(end) {}

    // The document, or false with the reason in error().
    bool read(Json* out) {
        space();
        if (!value(out, 0)) return false;
        space();
        if (at_ != end_) return fail("unexpected text after the document");
        return true;
    }
    const std::string& error() const { return error_; }

  private:
    static constexpr int kMaxDepth = 64;

    bool fail(const std::string& what) {
        if (!error_.empty()) return false;
        int line = 1, column = 1;
        for (const char* c = begin_; c < at_ && c < end_; ++c) {
            if (*c == '\n') ++line, column = 1;
            else ++column;
        }
        error_ = "line " + std::to_string(line) + " column " + std::to_string(column) + ": " + what;
        return false;
    }

    void space() {
        while (at_ < end_ && (*at_ == ' ' || *at_ == '\t' || *at_ == '\n' || *at_ == '\r')) ++at_;
    }

    bool literal(const char* word) {
        const size_t n = std::strlen(word);
        if ((size_t)(end_ - at_) < n || std::memcmp(at_, word, n) != 0) return fail("expected a value");
        at_ += n;
        return true;
    }

    bool value(Json* out, int depth) {
        if (depth > kMaxDepth) return fail("nested deeper than " + std::to_string(kMaxDepth) + " levels");
        if (at_ == end_) return fail("expected a value, found the end of the file");
        switch (*at_) {
            case '{': return object(out, depth);
            case '[': return array(out, depth);
            case '"': out->type = Json::Type::string; return string(&out->text);
            case 't': out->type = Json::Type::boolean; out->boolean = true; return literal("true");
            case 'f': out->type = Json::Type::boolean; out->boolean = false; return literal("false");
            case 'n': out->type = Json::Type::null; return literal("null");
            default: return number(out);
        }
    }

    bool object(Json* out, int depth) {
        out->type = Json::Type::object;
        ++at_;  // '{'
        space();
        if (at_ < end_ && *at_ == '}') return ++at_, true;
        for (;;) {
            space();
            if (at_ == end_ || *at_ != '"') return fail("expected a member name in double quotes");
            std::string key;
            if (!string(&key)) return false;
            space();
            if (at_ == end_ || *at_ != ':') return fail("expected ':' after a member name");
            ++at_;
            space();
            out->members.emplace_back(std::move(key), Json());
            if (!value(&out->members.back().second, depth + 1)) return false;
            space();
            if (at_ < end_ && *at_ == ',') { ++at_; continue; }
            if (at_ < end_ && *at_ == '}') return ++at_, true;
            return fail("expected ',' or '}' in an object");
        }
    }

    bool array(Json* out, int depth) {
        out->type = Json::Type::array;
        ++at_;  // '['
        space();
        if (at_ < end_ && *at_ == ']') return ++at_, true;
        for (;;) {
            space();
            out->items.emplace_back();
            if (!value(&out->items.back(), depth + 1)) return false;
            space();
            if (at_ < end_ && *at_ == ',') { ++at_; continue; }
            if (at_ < end_ && *at_ == ']') return ++at_, true;
            return fail("expected ',' or ']' in an array");
        }
    }

    static int hex(char c) {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        return -1;
    }

    bool code_unit(unsigned* out) {
        if (end_ - at_ < 4) return fail("a \\u escape needs four hex digits");
        unsigned v = 0;
        for (int i = 0; i < 4; ++i) {
            const int h = hex(at_[i]);
            if (h < 0) return fail("a \\u escape needs four hex digits");
            v = v * 16 + (unsigned)h;
        }
        at_ += 4;
        *out = v;
        return true;
    }

    static void utf8(unsigned cp, std::string* out) {
        if (cp < 0x80) {
            out->push_back((char)cp);
        } else if (cp < 0x800) {
            out->push_back((char)(0xC0 | (cp >> 6)));
            out->push_back((char)(0x80 | (cp & 0x3F)));
        } else if (cp < 0x10000) {
            out->push_back((char)(0xE0 | (cp >> 12)));
            out->push_back((char)(0x80 | ((cp >> 6) & 0x3F)));
            out->push_back((char)(0x80 | (cp & 0x3F)));
        } else {
            out->push_back((char)(0xF0 | (cp >> 18)));
            out->push_back((char)(0x80 | ((cp >> 12) & 0x3F)));
            out->push_back((char)(0x80 | ((cp >> 6) & 0x3F)));
            out->push_back((char)(0x80 | (cp & 0x3F)));
        }
    }

    bool string(std::string* out) {
        ++at_;  // '"'
        for (;;) {
            if (at_ == end_) return fail("a string runs to the end of the file");
            const char c = *at_++;
            if (c == '"') return true;
            if ((unsigned char)c < 0x20) return --at_, fail("a control character inside a string");
            if (c != '\\') {
                out->push_back(c);
                continue;
            }
            if (at_ == end_) return fail("a string runs to the end of the file");
            const char e = *at_++;
            switch (e) {
                case '"': out->push_back('"'); break;
                case '\\': out->push_back('\\'); break;
                case '/': out->push_back('/'); break;
                case 'b': out->push_back('\b'); break;
                case 'f': out->push_back('\f'); break;
                case 'n': out->push_back('\n'); break;
                case 'r': out->push_back('\r'); break;
                case 't': out->push_back('\t'); break;
                case 'u': {
                    unsigned cp = 0;
                    if (!code_unit(&cp)) return false;
                    if (cp >= 0xD800 && cp < 0xDC00) {  // a surrogate pair
                        unsigned low = 0;
                        if (end_ - at_ < 2 || at_[0] != '\\' || at_[1] != 'u')
                            return fail("a high surrogate without its low half");
                        at_ += 2;
                        if (!code_unit(&low)) return false;
                        if (low < 0xDC00 || low > 0xDFFF) return fail("a high surrogate without its low half");
                        cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
                    } else if (cp >= 0xDC00 && cp < 0xE000) {
                        return fail("a low surrogate without its high half");
                    }
                    utf8(cp, out);
                    break;
                }
                default: return --at_, fail("an unknown escape in a string");
            }
        }
    }

    static bool digit(char c) { return c >= '0' && c <= '9'; }

    bool number(Json* out) {
        const char* start = at_;
        if (at_ < end_ && *at_ == '-') ++at_;
        if (at_ == end_ || !digit(*at_)) return at_ = start, fail("expected a value");
        if (*at_ == '0') {
            ++at_;
            if (at_ < end_ && digit(*at_)) return fail("a number with a leading zero");
        } else {
            while (at_ < end_ && digit(*at_)) ++at_;
        }
        bool integer = true;
        if (at_ < end_ && *at_ == '.') {
            integer = false;
            ++at_;
            if (at_ == end_ || !digit(*at_)) return fail("a digit must follow the decimal point");
            while (at_ < end_ && digit(*at_)) ++at_;
        }
        if (at_ < end_ && (*at_ == 'e' || *at_ == 'E')) {
            integer = false;
            ++at_;
            if (at_ < end_ && (*at_ == '+' || *at_ == '-')) ++at_;
            if (at_ == end_ || !digit(*at_)) return fail("a digit must follow the exponent");
            while (at_ < end_ && digit(*at_)) ++at_;
        }
        double v = 0.0;
        const auto parsed = std::from_chars(start, at_, v);  // locale-independent, correctly rounded
        if (parsed.ec == std::errc::result_out_of_range || parsed.ptr != at_)
            return at_ = start, fail("a number out of range");
        out->type = Json::Type::number;
        out->number = v;
        out->integer = integer;
        return true;
    }

    const char* begin_;
    const char* at_;
    const char* end_;
    std::string error_;
};

// ---- the table format ------------------------------------------------------------------

struct Entry {
    TableProblem problem;
    std::vector<double> sizes;
    std::vector<std::string> kernels;
    bool timed = false;               // the entry has latency_ms
    std::vector<double> latency_ms;   // NaN where the table holds null
};

struct Table {
    std::string path;
    std::vector<Entry> entries;
};

bool whole(const Json* v, int64_t lo, int64_t hi, int64_t* out) {
    if (!v || v->type != Json::Type::number || !v->integer || v->number < (double)lo || v->number > (double)hi)
        return false;
    *out = (int64_t)v->number;
    return true;
}

// One key of a conv spec: an integer for every spatial dim, or a list of ndim integers.
bool spatial(const Json* v, int ndim, int64_t lo, int64_t fallback, int64_t out[3], std::string* why,
             const char* key) {
    for (int d = 0; d < 3; ++d) out[d] = d < ndim ? fallback : (lo > 0 ? 1 : 0);
    if (!v) return true;
    const int64_t hi = 1 << 30;
    int64_t x;
    if (v->type == Json::Type::number) {
        if (!whole(v, lo, hi, &x)) return *why = std::string(key) + " is not a valid size", false;
        for (int d = 0; d < ndim; ++d) out[d] = x;
        return true;
    }
    if (v->type != Json::Type::array || (int)v->items.size() != ndim)
        return *why = std::string(key) + " is not a list of " + std::to_string(ndim) + " sizes", false;
    for (int d = 0; d < ndim; ++d) {
        if (!whole(&v->items[d], lo, hi, &x)) return *why = std::string(key) + " is not a list of sizes", false;
        out[d] = x;
    }
    return true;
}

bool text(const Json* v, const char* fallback, std::string* out) {
    if (!v) return *out = fallback, true;
    if (v->type != Json::Type::string) return false;
    *out = v->text;
    return true;
}

// A problem spec: {"op": "gemm", M, N, K, dtype, layout} or {"op": "conv", N, G, C, K, input,
// filter, stride, pad, dilation, direction, dtype} (stride, pad, dilation: an integer or a
// list). Other keys are ignored.
bool read_problem(const Json& spec, TableProblem* p, std::string* why) {
    if (spec.type != Json::Type::object) return *why = "problem is not an object", false;
    const Json* op = spec.get("op");
    if (!op || op->type != Json::Type::string || (op->text != "gemm" && op->text != "conv"))
        return *why = "problem has no op gemm or conv", false;
    p->conv = op->text == "conv";
    if (!text(spec.get("dtype"), "fp32", &p->dtype)) return *why = "dtype is not a string", false;
    const int64_t big = int64_t(1) << 53, small = int64_t(1) << 30;
    if (!p->conv) {
        if (!text(spec.get("layout"), "rcr", &p->layout)) return *why = "layout is not a string", false;
        if (!whole(spec.get("M"), 1, big, &p->M) || !whole(spec.get("N"), 1, big, &p->N) ||
            !whole(spec.get("K"), 1, big, &p->K))
            return *why = "gemm problem without positive integer M, N and K", false;
        return true;
    }
    if (!text(spec.get("direction"), "fwd", &p->direction)) return *why = "direction is not a string", false;
    if (!whole(spec.get("N"), 1, small, &p->N) || !whole(spec.get("G"), 1, small, &p->G) ||
        !whole(spec.get("C"), 1, small, &p->C) || !whole(spec.get("K"), 1, small, &p->K))
        return *why = "conv problem without positive integer N, G, C and K", false;
    const Json* input = spec.get("input");
    if (!input || input->type != Json::Type::array || input->items.empty() || input->items.size() > 3)
        return *why = "conv problem without an input of 1 to 3 sizes", false;
    p->ndim = (int)input->items.size();
    if (!spec.get("filter")) return *why = "conv problem without a filter", false;
    return spatial(input, p->ndim, 1, 1, p->input, why, "input") &&
           spatial(spec.get("filter"), p->ndim, 1, 1, p->filter, why, "filter") &&
           spatial(spec.get("stride"), p->ndim, 1, 1, p->stride, why, "stride") &&
           spatial(spec.get("pad"), p->ndim, 0, 0, p->pad, why, "pad") &&
           spatial(spec.get("dilation"), p->ndim, 1, 1, p->dilation, why, "dilation");
}

bool read_entry(const Json& e, Entry* out, std::string* why) {
    if (e.type != Json::Type::object) return *why = "not an object", false;
    const Json* problem = e.get("problem");
    if (!problem) return *why = "no problem", false;
    if (!read_problem(*problem, &out->problem, why)) return false;
    out->sizes = out->problem.sizes();
    const Json* kernels = e.get("kernels");
    if (!kernels || kernels->type != Json::Type::array) return *why = "no list of kernels", false;
    for (const Json& k : kernels->items) {
        if (k.type != Json::Type::string) return *why = "a kernel name is not a string", false;
        out->kernels.push_back(k.text);
    }
    const Json* latency = e.get("latency_ms");
    out->timed = latency != nullptr;
    if (latency) {
        if (latency->type != Json::Type::array) return *why = "latency_ms is not a list", false;
        for (const Json& ms : latency->items) {
            if (ms.type == Json::Type::null) out->latency_ms.push_back(std::numeric_limits<double>::quiet_NaN());
            else if (ms.type == Json::Type::number) out->latency_ms.push_back(ms.number);
            else return *why = "latency_ms holds something other than numbers", false;
        }
    }
    return true;
}

// Tables by path, read once (nullptr: ignored); the tables already reported as naming
// kernels this library lacks.
struct Store {
    std::mutex lock;
    std::map<std::string, std::shared_ptr<const Table>> tables;
    std::set<std::string> reported_missing;
    std::vector<std::string> messages;
    Json device;  // this process's device (td_tuning_set_device); null: not set, no check
    std::atomic<unsigned> device_changes{0};  // td_tuning_set_device calls: part of selection's cache key
};

Store& store() {
    static Store* s = new Store;  // never destroyed: selection may run while the process exits
    return *s;
}

// A header's value as text: a string as it is, a whole number without a fraction.
std::string shown(const Json& v) {
    if (v.type == Json::Type::string) return v.text;
    if (v.type != Json::Type::number) return "?";
    std::ostringstream out;
    out << v.number;
    return out.str();
}

// The device a header or an identity describes: "NVIDIA H200 (sm_count 132)".
std::string describe_device(const Json& fields, const Json& keys) {
    std::string name, rest;
    for (const auto& member : keys.members) {
        const Json* v = fields.get(member.first.c_str());
        if (!v) continue;
        if (member.first == "device") name = shown(*v);
        else rest += (rest.empty() ? "" : ", ") + member.first + " " + shown(*v);
    }
    if (name.empty()) name = "an unnamed device";
    return rest.empty() ? name : name + " (" + rest + ")";
}

// Where a table's header names another device than this process's (the device fields
// td_tuning_set_device gave, compared where the header has them): "measured on X, this
// device is Y"; "" where it matches, has no header or no device was set. The other header
// fields (build, CUDA and driver versions) are not compared: the library checks the names
// a table lists against its own kernels.
std::string other_device(const Json* header) {
    Json mine;
    {
        std::lock_guard<std::mutex> guard(store().lock);
        mine = store().device;
    }
    if (!header || header->type != Json::Type::object || mine.type != Json::Type::object) return "";
    bool differs = false;
    for (const auto& member : mine.members) {
        const Json* theirs = header->get(member.first.c_str());
        if (!theirs) continue;
        const Json& ours = member.second;
        if (theirs->type != ours.type || (ours.type == Json::Type::string && theirs->text != ours.text) ||
            (ours.type == Json::Type::number && theirs->number != ours.number))
            differs = true;
    }
    if (!differs) return "";
    return "measured on " + describe_device(*header, mine) + ", this device is " + describe_device(mine, mine);
}

// The table at path, or nullptr (with a message) where it is ignored.
std::shared_ptr<const Table> read_table(const std::string& path, const char* target) {
    const std::string ignored = "tuning table " + path + " ignored: ";
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
        note(ignored + "cannot open it (" + std::strerror(errno) + ")");
        return nullptr;
    }
    if (!S_ISREG(st.st_mode)) {
        note(ignored + "not a file");
        return nullptr;
    }
    std::ifstream file(path, std::ios::binary);
    if (!file) {
        note(ignored + "cannot open it");
        return nullptr;
    }
    std::ostringstream buffer;
    buffer << file.rdbuf();
    if (file.bad()) {
        note(ignored + "cannot read it");
        return nullptr;
    }
    const std::string data = buffer.str();
    Json doc;
    JsonReader reader(data.data(), data.data() + data.size());
    if (!reader.read(&doc)) {
        note(ignored + "not JSON: " + reader.error());
        return nullptr;
    }
    if (doc.type != Json::Type::object) {
        note(ignored + "not a JSON object");
        return nullptr;
    }
    const Json* schema = doc.get("schema_version");
    if (!schema || schema->type != Json::Type::number || schema->number != kSchema) {
        std::string found = !schema ? "none" : "not a number";
        if (schema && schema->type == Json::Type::number) {
            std::ostringstream shown;
            shown << schema->number;
            found = shown.str();
        }
        note(ignored + "schema " + found + ", expected " + std::to_string(kSchema));
        return nullptr;
    }
    const Json* measured = doc.get("target");
    if (!measured || measured->type != Json::Type::string) {
        note(ignored + "it names no target");
        return nullptr;
    }
    if (measured->text != target) {
        note(ignored + "measured for target " + measured->text + ", this library is for " + target);
        return nullptr;
    }
    const std::string other = other_device(doc.get("header"));
    if (!other.empty()) {
        note(ignored + other);
        return nullptr;
    }
    auto table = std::make_shared<Table>();
    table->path = path;
    const Json* entries = doc.get("entries");
    if (entries && entries->type != Json::Type::array) {
        note(ignored + "entries is not a list");
        return nullptr;
    }
    if (entries) {
        table->entries.reserve(entries->items.size());
        for (size_t i = 0; i < entries->items.size(); ++i) {
            Entry entry;
            std::string why;
            if (!read_entry(entries->items[i], &entry, &why)) {
                note(ignored + "entry " + std::to_string(i) + ": " + why);
                return nullptr;
            }
            table->entries.push_back(std::move(entry));
        }
    }
    return table;
}

std::shared_ptr<const Table> load(const std::string& path, const char* target) {
    Store& s = store();
    {
        std::lock_guard<std::mutex> guard(s.lock);
        auto it = s.tables.find(path);
        if (it != s.tables.end()) return it->second;
    }
    std::shared_ptr<const Table> table = read_table(path, target);
    std::lock_guard<std::mutex> guard(s.lock);
    return s.tables.emplace(path, table).first->second;  // another thread's read, where it came first
}

// The folder of this library's file ("" where it cannot be found).
std::string library_folder() {
#if defined(_WIN32)
    HMODULE module = nullptr;
    char path[MAX_PATH];
    if (!GetModuleHandleExA(GET_MODULE_HANDLE_EX_FLAG_FROM_ADDRESS | GET_MODULE_HANDLE_EX_FLAG_UNCHANGED_REFCOUNT,
                            reinterpret_cast<LPCSTR>(&library_folder), &module) ||
        !GetModuleFileNameA(module, path, MAX_PATH))
        return "";
    std::string file(path);
    const size_t slash = file.find_last_of("\\/");
#else
    Dl_info info{};
    if (!dladdr(reinterpret_cast<void*>(&library_folder), &info) || !info.dli_fname) return "";
    std::string file(info.dli_fname);
    const size_t slash = file.rfind('/');
#endif
    return slash == std::string::npos ? "." : file.substr(0, slash);
}

bool is_file(const std::string& path) {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

#if defined(_WIN32)
constexpr char kPathSeparator = ';';
#else
constexpr char kPathSeparator = ':';
#endif

const char* env(const char* name) {
    const char* v = std::getenv(name);
    return v ? v : "";
}

// ---- the pick --------------------------------------------------------------------------

const char* const kDtypes[] = {"fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "fp8_e4m3_fnuz", "fp8_e5m2_fnuz"};
const char* const kLayouts[] = {"rcr", "rrr", "crr", "ccr"};
const char* const kDirections[] = {"fwd", "bwd_data", "bwd_weight"};

template <size_t N>
const char* key_of(const char* const (&keys)[N], int code) {
    return code >= 0 && (size_t)code < N ? keys[code] : "";
}

template <size_t N>
int code_of(const char* const (&keys)[N], const std::string& key) {
    for (size_t i = 0; i < N; ++i)
        if (key == keys[i]) return (int)i;
    return -1;
}

// fp16 and bf16 stand in for each other.
const char* stand_in(const std::string& dtype) {
    if (dtype == "fp16") return "bf16";
    if (dtype == "bf16") return "fp16";
    return nullptr;
}

// Sum of |log| ratios, summed as Python (3.12 on) sums floats: Neumaier's compensated
// summation. Distances equal in exact arithmetic (64 -> 128 and 28672 -> 32768 against
// 28672 -> 65536) then round alike where the tile engine's Python rounded them alike, and
// the neighbours' order agrees with it.
double distance(const std::vector<double>& a, const std::vector<double>& b) {
    double sum = 0.0, c = 0.0;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
        const double x = std::fabs(std::log(a[i] / b[i]));
        const double t = sum + x;
        c += std::fabs(sum) >= std::fabs(x) ? (sum - t) + x : (x - t) + sum;
        sum = t;
    }
    return c != 0.0 && std::isfinite(c) ? sum + c : sum;
}

// An entry that serves the query: one of its kind, or (where the tables have none) one of
// its stand-in dtype's, read with the query's dtype and each name's dtype token swapped.
struct Serving {
    const Table* table;
    const Entry* entry;
    const char* twin;  // the stand-in dtype, or nullptr
    std::string dtype;

    std::string kernel(size_t i) const {
        std::string name = entry->kernels[i];
        if (twin) {
            const std::string from = std::string("_") + twin + "_", to = "_" + dtype + "_";
            const size_t at = name.find(from);
            if (at != std::string::npos) name.replace(at, from.size(), to);
        }
        return name;
    }
    TableProblem problem() const {
        TableProblem p = entry->problem;
        p.dtype = dtype;
        return p;
    }
};

// One message per table: the kernels it names (of this library's op) that this library lacks.
void report_missing(const Table& table, const char* op, const std::unordered_map<std::string, size_t>& index) {
    {
        std::lock_guard<std::mutex> guard(store().lock);
        if (!store().reported_missing.insert(table.path).second) return;
    }
    const bool conv = std::strcmp(op, "conv") == 0;
    std::set<std::string> missing;
    for (const Entry& e : table.entries)
        if (e.problem.conv == conv)
            for (const std::string& name : e.kernels)
                if (!index.count(name)) missing.insert(name);
    if (missing.empty()) return;
    std::string shown;
    size_t n = 0;
    for (const std::string& name : missing) {
        if (n == 3) break;
        shown += (n++ ? ", " : "") + name;
    }
    if (missing.size() > 3) shown += " and " + std::to_string(missing.size() - 3) + " more";
    note("tuning table " + table.path + " names " + std::to_string(missing.size()) +
         " kernel(s) this installation does not have (" + shown + "); ignored");
}

// The measured pick: the nearest entries' ranking, calibrated by the cost model (-1: none).
long pick_measured(const std::vector<Serving>& serving, const TableProblem& query, Candidates& kernels,
                   const std::unordered_map<std::string, size_t>& index, const char* op) {
    const std::vector<double> here_sizes = query.sizes();
    std::vector<std::pair<double, size_t>> near;
    near.reserve(serving.size());
    for (size_t i = 0; i < serving.size(); ++i) near.emplace_back(distance(here_sizes, serving[i].entry->sizes), i);
    const size_t keep = std::min(near.size(), (size_t)kNeighbours);
    std::partial_sort(near.begin(), near.begin() + keep, near.end());
    near.resize(keep);
    if (near.empty()) return -1;

    // a registered kernel: in this library and not named_only
    auto registered = [&](const std::string& name) -> long {
        auto it = index.find(name);
        return it == index.end() || kernels.named_only(it->second) ? -1 : (long)it->second;
    };
    for (const auto& n : near) {
        const Serving& s = serving[n.second];
        for (size_t k = 0; k < s.entry->kernels.size(); ++k)
            if (!index.count(s.kernel(k))) {
                report_missing(*s.table, op, index);
                break;
            }
    }

    const Serving& first = serving[near.front().second];
    bool untimed = false;
    for (const auto& n : near) untimed = untimed || !serving[n.second].entry->timed;
    if (near.front().first == 0.0 || untimed) {
        for (size_t k = 0; k < first.entry->kernels.size(); ++k) {
            const long i = registered(first.kernel(k));
            if (i >= 0 && kernels.supports((size_t)i)) return i;
        }
        return -1;
    }

    const double nan = std::numeric_limits<double>::quiet_NaN();
    std::map<size_t, double> model_here;                  // kernel -> its cost here (NaN: rejects)
    std::map<std::string, std::pair<double, double>> scores;  // name -> (weighted sum, weights)
    std::map<std::string, size_t> scored_index;
    for (const auto& n : near) {
        const Serving& s = serving[n.second];
        const double w = 1.0 / (n.first + 0.05);
        std::vector<std::pair<std::string, double>> timed;
        const size_t count = std::min(s.entry->kernels.size(), s.entry->latency_ms.size());
        for (size_t k = 0; k < count; ++k) {
            const double ms = s.entry->latency_ms[k];
            if (ms > 0) timed.emplace_back(s.kernel(k), ms);  // false for NaN (null) and 0
        }
        if (timed.empty()) continue;
        double fastest = timed.front().second;
        for (const auto& t : timed) fastest = std::min(fastest, t.second);
        const TableProblem at = s.problem();
        for (const auto& t : timed) {
            const long i = registered(t.first);
            if (i < 0) continue;
            auto found = model_here.find((size_t)i);
            if (found == model_here.end()) {
                const double cost = kernels.supports((size_t)i) ? kernels.cost((size_t)i) : nan;
                found = model_here.emplace((size_t)i, cost).first;
            }
            const double here = found->second;
            if (!(here > 0)) continue;
            const double there = kernels.cost_at((size_t)i, at);
            if (!(there > 0)) continue;
            auto& acc = scores[t.first];
            acc.first += w * (std::log(t.second / fastest) + kAlpha * std::log(here / there));
            acc.second += w;
            scored_index[t.first] = (size_t)i;
        }
    }
    long best = -1;
    double best_score = 0.0;
    for (const auto& s : scores) {  // by name: the first of equal scores
        const double score = s.second.first / s.second.second;
        if (best < 0 || score < best_score) best = (long)scored_index[s.first], best_score = score;
    }
    return best;
}

}  // namespace

// ---- problems --------------------------------------------------------------------------

bool TableProblem::same_kind(const TableProblem& o) const {
    if (conv != o.conv || dtype != o.dtype) return false;
    return conv ? direction == o.direction && ndim == o.ndim : layout == o.layout;
}

std::vector<double> TableProblem::sizes() const {
    if (!conv) return {(double)M, (double)N, (double)K};
    double pixels = 1.0, taps = 1.0, strides = 1.0, dilations = 1.0;
    for (int d = 0; d < ndim; ++d) {
        pixels *= (double)input[d], taps *= (double)filter[d];
        strides *= (double)stride[d], dilations *= (double)dilation[d];
    }
    // stride and dilation cubed: a stride-2 layer is a different class of problem (other
    // kernels support it, cuDNN's lead differs), three times as far as a doubled size
    return {(double)(N * G), (double)C, (double)K, pixels, taps, strides * strides * strides,
            dilations * dilations * dilations};
}

TableProblem describe(const TdGemmProblem& p) {
    TableProblem t;
    t.dtype = key_of(kDtypes, p.dtype);
    t.layout = key_of(kLayouts, p.layout);
    t.M = p.M, t.N = p.N, t.K = p.K;
    return t;
}

TableProblem describe(const TdConvProblem& p) {
    const ConvProblemC& b = p.base;
    TableProblem t;
    t.conv = true;
    t.dtype = key_of(kDtypes, p.dtype);
    t.direction = key_of(kDirections, b.direction);
    t.ndim = std::max(1, std::min(3, (int)p.ndim));
    t.N = b.N, t.G = b.G, t.C = b.C, t.K = b.K;
    const int64_t in[3] = {b.input_d, b.input_h, b.input_w}, fil[3] = {b.filter_z, b.filter_y, b.filter_x};
    const int64_t st[3] = {b.stride_d, b.stride_h, b.stride_w}, pad[3] = {b.pad_d, b.pad_h, b.pad_w};
    const int64_t dil[3] = {b.dilation_d, b.dilation_h, b.dilation_w};
    for (int d = 0; d < t.ndim; ++d) {
        const int from = 3 - t.ndim + d;  // the last ndim of (d, h, w)
        t.input[d] = in[from], t.filter[d] = fil[from], t.stride[d] = st[from];
        t.pad[d] = pad[from], t.dilation[d] = dil[from];
    }
    return t;
}

bool to_problem(const TableProblem& spec, TdGemmProblem* out) {
    const int dtype = code_of(kDtypes, spec.dtype), layout = code_of(kLayouts, spec.layout);
    if (spec.conv || dtype < 0 || layout < 0) return false;
    *out = TdGemmProblem{};
    out->M = spec.M, out->N = spec.N, out->K = spec.K;
    out->dtype = dtype;
    out->layout = layout;
    out->alpha = 1.0f;
    return true;
}

bool to_problem(const TableProblem& spec, TdConvProblem* out) {
    const int dtype = code_of(kDtypes, spec.dtype), direction = code_of(kDirections, spec.direction);
    if (!spec.conv || dtype < 0 || direction < 0 || spec.ndim < 1 || spec.ndim > 3) return false;
    *out = TdConvProblem{};
    ConvProblemC& b = out->base;
    b.N = (int)spec.N, b.G = (int)spec.G, b.C = (int)spec.C, b.K = (int)spec.K;
    int in[3] = {1, 1, 1}, fil[3] = {1, 1, 1}, st[3] = {1, 1, 1}, pad[3] = {0, 0, 0}, dil[3] = {1, 1, 1};
    for (int d = 0; d < spec.ndim; ++d) {
        const int to = 3 - spec.ndim + d;
        in[to] = (int)spec.input[d], fil[to] = (int)spec.filter[d], st[to] = (int)spec.stride[d];
        pad[to] = (int)spec.pad[d], dil[to] = (int)spec.dilation[d];
    }
    b.input_d = in[0], b.input_h = in[1], b.input_w = in[2];
    b.filter_z = fil[0], b.filter_y = fil[1], b.filter_x = fil[2];
    b.stride_d = st[0], b.stride_h = st[1], b.stride_w = st[2];
    b.pad_d = pad[0], b.pad_h = pad[1], b.pad_w = pad[2];
    b.dilation_d = dil[0], b.dilation_h = dil[1], b.dilation_w = dil[2];
    b.direction = direction;
    out->ndim = spec.ndim;
    out->dtype = dtype;
    ConvGeometry g{};
    return conv_geometry(*out, &g).empty();
}

// ---- tables and the pick ---------------------------------------------------------------

std::vector<std::string> table_paths(const char* target) {
    std::vector<std::string> paths;
    if (std::strcmp(env("TILEDISPATCH_NO_SHIPPED_TUNING"), "1") != 0) {
        static const std::string folder = library_folder();
        const std::string shipped = folder + "/tuning_" + target + ".json";
        if (!folder.empty() && is_file(shipped)) paths.push_back(shipped);
    }
    const std::string user = env("TILEDISPATCH_TUNING");
    size_t start = 0;
    while (start <= user.size()) {
        size_t end = user.find(kPathSeparator, start);
        if (end == std::string::npos) end = user.size();
        if (end > start) paths.push_back(user.substr(start, end - start));
        start = end + 1;
    }
    return paths;
}

void append_environment(std::string* key) {
    // One pass over the environment for both variables (two getenv calls took twice as long:
    // this runs on every selection, the cached ones included).
    const char* tables = nullptr;
    const char* no_shipped = nullptr;
    for (char** e = environ; e && *e; ++e) {
        const char* v = *e;
        if (v[0] != 'T' || v[1] != 'I' || std::strncmp(v, "TILEDISPATCH_", 13) != 0) continue;
        if (std::strncmp(v + 13, "TUNING=", 7) == 0) tables = v + 20;
        else if (std::strncmp(v + 13, "NO_SHIPPED_TUNING=", 18) == 0) no_shipped = v + 31;
    }
    for (const char* value : {tables, no_shipped}) {
        key->push_back(value ? '1' : '0');  // unset and empty apart
        if (value) key->append(value);
        key->push_back('\0');
    }
    const unsigned changes = store().device_changes.load(std::memory_order_relaxed);  // tables read again
    key->append(reinterpret_cast<const char*>(&changes), sizeof changes);
}

void note(const std::string& message) {
    std::lock_guard<std::mutex> guard(store().lock);
    store().messages.push_back(message);
}

long pick(const char* target, const char* op, const TableProblem& query, Candidates& kernels) {
    const std::vector<std::string> paths = table_paths(target);
    if (paths.empty()) return -1;
    std::vector<std::shared_ptr<const Table>> tables;
    for (const std::string& path : paths)
        if (auto table = load(path, target)) tables.push_back(table);

    std::vector<Serving> serving;
    for (const auto& table : tables)
        for (const Entry& e : table->entries)
            if (e.problem.same_kind(query)) serving.push_back({table.get(), &e, nullptr, query.dtype});
    if (const char* twin = serving.empty() ? stand_in(query.dtype) : nullptr) {
        TableProblem twin_kind = query;
        twin_kind.dtype = twin;
        for (const auto& table : tables)
            for (const Entry& e : table->entries)
                if (e.problem.same_kind(twin_kind)) serving.push_back({table.get(), &e, twin, query.dtype});
    }
    if (serving.empty()) return -1;

    std::unordered_map<std::string, size_t> index;
    for (size_t i = 0; i < kernels.count(); ++i) index.emplace(kernels.name(i), i);
    long choice = pick_measured(serving, query, kernels, index, op);
    if (choice < 0) return -1;

    // families the serving entries measured (among the kernels this library has)
    std::set<int> known;
    for (const Serving& s : serving)
        for (size_t k = 0; k < s.entry->kernels.size(); ++k) {
            auto it = index.find(s.kernel(k));
            if (it != index.end()) known.insert(kernels.family(it->second));
        }
    std::vector<size_t> by_name;
    for (size_t i = 0; i < kernels.count(); ++i) by_name.push_back(i);
    std::sort(by_name.begin(), by_name.end(),
              [&](size_t a, size_t b) { return std::strcmp(kernels.name(a), kernels.name(b)) < 0; });
    double base = kernels.cost((size_t)choice);
    for (size_t i : by_name) {
        if (kernels.named_only(i) || known.count(kernels.family(i)) || !kernels.supports(i)) continue;
        const double c = kernels.cost(i);
        if (c < base) choice = (long)i, base = c;
    }
    return choice;
}

}  // namespace tuning
}  // namespace td

namespace td {
int fail(int status, const std::string& message);  // common.cpp
void clear_error();
}  // namespace td

extern "C" TD_API int td_tuning_set_device(const char* identity) {
    try {
        td::clear_error();
        td::tuning::Json device;
        if (identity && *identity) {
            td::tuning::JsonReader reader(identity, identity + std::strlen(identity));
            if (!reader.read(&device) || device.type != td::tuning::Json::Type::object)
                return td::fail(TD_ERROR, "td_tuning_set_device: not a JSON object: " + reader.error());
            for (const auto& member : device.members)
                if (member.second.type != td::tuning::Json::Type::string &&
                    member.second.type != td::tuning::Json::Type::number)
                    return td::fail(TD_ERROR, "td_tuning_set_device: " + member.first + " is not a string or number");
        }
        std::lock_guard<std::mutex> guard(td::tuning::store().lock);
        td::tuning::store().device = std::move(device);
        td::tuning::store().tables.clear();  // read again, checked against this device
        td::tuning::store().reported_missing.clear();
        td::tuning::store().device_changes.fetch_add(1);
        return TD_OK;
    } catch (...) {
        return td::fail(TD_ERROR, "td_tuning_set_device: out of host memory");
    }
}

extern "C" TD_API const char* td_tuning_messages(void) {
    static thread_local std::string taken;
    try {
        std::vector<std::string> messages;
        {
            std::lock_guard<std::mutex> guard(td::tuning::store().lock);
            messages.swap(td::tuning::store().messages);
        }
        taken.clear();
        for (const std::string& m : messages) taken += (taken.empty() ? "" : "\n") + m;
    } catch (...) {
        taken.clear();
    }
    return taken.c_str();
}
