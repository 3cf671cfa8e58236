// Compiled harness of the whole-system top (hw/system.py), loaded by Python as a shared library (ctypes).
// Every input of the top but clk goes through a register (registered_inputs in system.py). With
// INPUTS_AT_RISE (the default build) the registers are loaded at the rising edge, by the clock input
// sim_load raised with clk: the inputs of each cycle are written before the rising edge that starts it,
// so the design sees at each edge the inputs of the cycle before, and the outputs sampled after it are
// evaluated from the inputs just written; the falling edge triggers nothing, each cycle's logic is
// evaluated once. Otherwise they are latched on the falling edge: inputs are written only while the
// clock is high, after a rising edge, and the outputs are sampled after the falling edge.
//
// Template: verif/harness/fastsim/system.py fills the marked fields (top module, GPU count, port table).
// C++ does every per-cycle job of the cocotb testbench verif/tb/system.py, cycle for cycle the same
// (verif/harness/cycler.py's order: after each rising edge every agent drives, then, settled, every agent
// samples, then the quiet-skip rule), so both give the same figures:
//   * per GPU: the memory (sparse, unwritten flits read as verif.harness.gpu_memory.default_word) behind
//     mem_wr / mem_rd_tx / mem_rd_rx (read latency, in order); the descriptor feeder (queue + ready heap)
//     and the desc / cmd / mm_cfg stream drivers; the ready / release monitors;
//   * the switch_cfg driver, the link counters of `probe` (flits per link and direction, fills apart,
//     per bin), the reduction-buffer occupancy samples, SystemEnv.skip's quiet rule and the dropped
//     rounds.
// The window's bookkeeping and the token releases are C++'s too (GpuSide._on_write's window part,
// GpuSide._on_release, SystemEnv.released), from tables Python gives at set-up (sys_rel_*): each window
// row's metadata flit appends the row to its local experts' slots; a TokenRelease takes its slot's window
// row, the row's bytes as they are in the GPU's memory, the token whose dispatched row has exactly those
// bytes, and counts the token's (GPU, expert) pair released; a token whose pairs are all released is
// released (left, released_at) and its combine descriptor (dysharp) goes on its home GPU's ready heap at
// cycle + notify_cycles, as an expert GPU's push of a token (fused-unicast) does once its own pairs are.
// A release the testbench would refuse (a slot with no row, a row that is no token's, a pair not pending)
// stops the run with an error code Python raises (sys_rel_error).
// Python is called (one callback) only on events: a GPU's wake cycle (its next GEMM end) in the drive
// phase, a result or partial row once all its flits have landed (the testbench compares the flits landed
// per row with the row's flits only), a TileReady output, and after any cycle that had one of those or a
// token release, to test the phase's predicate. All stream gates are always open (the testbench's stall = 0).
#include <verilated.h>
#include "V@@TOP@@.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <queue>
#include <string>
#include <unordered_map>
#include <vector>

static constexpr int G = @@GPUS@@;
static constexpr int NPORTS = @@NPORTS@@;
static constexpr int PW = @@PW@@;             // 32-bit words of the widest stream payload held (+ 2: bits())
static constexpr int FW = @@FW@@;             // 32-bit words of a flit (a memory word)
static constexpr int64_t NEVER = INT64_MAX;

typedef unsigned __int128 u128;

struct PortRef { void* p; int w; };
static PortRef P[NPORTS];
static V@@TOP@@* top = nullptr;
static VerilatedContext* ctx = nullptr;

static void bind_ports(V@@TOP@@* t) {
@@BIND@@
}

static inline void pget(const PortRef& r, uint32_t* o) {
    if (r.w <= 8) o[0] = *(CData*)r.p;
    else if (r.w <= 16) o[0] = *(SData*)r.p;
    else if (r.w <= 32) o[0] = *(IData*)r.p;
    else if (r.w <= 64) { QData q = *(QData*)r.p; o[0] = uint32_t(q); o[1] = uint32_t(q >> 32); }
    else std::memcpy(o, r.p, 4 * ((r.w + 31) / 32));
}
static inline uint64_t pget64(const PortRef& r) {
    if (r.w <= 8) return *(CData*)r.p;
    if (r.w <= 16) return *(SData*)r.p;
    if (r.w <= 32) return *(IData*)r.p;
    if (r.w <= 64) return *(QData*)r.p;
    const uint32_t* w = (const uint32_t*)r.p;
    return uint64_t(w[0]) | (uint64_t(w[1]) << 32);
}
static inline void pset(const PortRef& r, const uint32_t* v) {
    if (r.w <= 8) *(CData*)r.p = CData(v[0]);
    else if (r.w <= 16) *(SData*)r.p = SData(v[0]);
    else if (r.w <= 32) *(IData*)r.p = v[0];
    else if (r.w <= 64) *(QData*)r.p = QData(v[0]) | (QData(v[1]) << 32);
    else std::memcpy(r.p, v, 4 * ((r.w + 31) / 32));
}
static inline void pset1(int i, uint32_t v) { pset(P[i], &v); }
static inline bool phigh(int i) { return pget64(P[i]) & 1; }
static inline uint64_t bits(const uint32_t* w, int off, int width) {    // width <= 57
    int i = off / 32, s = off % 32;
    uint64_t x = uint64_t(w[i]) | (uint64_t(w[i + 1]) << 32);
    if (s + width > 64) x = (x >> s) | (uint64_t(w[i + 2]) << (64 - s)); else x >>= s;
    return width == 64 ? x : x & ((uint64_t(1) << width) - 1);
}

// ------------------------------------------------------------------------------------------ callbacks
enum { EV_WAKE = 1, EV_READY = 3, EV_POLL = 5, EV_LANDED = 6 };
typedef int (*callback_t)(int kind, int g, int64_t cycle, uint64_t arg, const uint32_t* words);
static callback_t cb = nullptr;
static int failed = 0;           // a callback returned < 0 (a Python exception): stop
static bool events = false;      // a callback happened this cycle

static inline int call(int kind, int g, int64_t cycle, uint64_t arg, const uint32_t* words) {
    events = true;
    int r = cb(kind, g, cycle, arg, words);
    if (r < 0) failed = 1;
    return r;
}

// ------------------------------------------------------------------------------------------ memory
struct Word { uint32_t w[FW]; };

// verif.harness.gpu_memory.default_word at FW x 32 bits: x = (addr + 1) * MIX (a 128-bit constant) mod
// 2^(32 FW), then x ^ (x >> 61) ^ (addr << 7), in 64-bit limbs.
static Word default_word(uint64_t addr) {
    constexpr int L = (FW + 1) / 2 + 1;
    const uint64_t lo = 0xF39CC0605CEDC835ULL, hi = 0x9E3779B97F4A7C15ULL;
    uint64_t x[L + 1] = {}, r[L] = {};
    u128 p0 = u128(addr + 1) * lo, p1 = u128(addr + 1) * hi;
    u128 mid = (p0 >> 64) + uint64_t(p1);
    x[0] = uint64_t(p0);
    if (L > 1) x[1] = uint64_t(mid);
    if (L > 2) x[2] = uint64_t((mid >> 64) + (p1 >> 64));
    const int bits_all = 32 * FW;
    for (int i = 0; i < L; i++) {                 // x mod 2^(32 FW)
        int lo_bit = 64 * i;
        if (lo_bit >= bits_all) x[i] = 0;
        else if (bits_all - lo_bit < 64) x[i] &= (uint64_t(1) << (bits_all - lo_bit)) - 1;
    }
    for (int i = 0; i < L; i++) r[i] = x[i] ^ ((x[i] >> 61) | (x[i + 1] << 3));
    r[0] ^= addr << 7;
    if (L > 1) r[1] ^= addr >> 57;
    Word o;
    for (int i = 0; i < FW; i++) o.w[i] = uint32_t(r[i / 2] >> (32 * (i % 2)));
    return o;
}

struct Memory {
    std::unordered_map<uint64_t, Word> m;
    Word read(uint64_t a) const {
        auto it = m.find(a);
        return it == m.end() ? default_word(a) : it->second;
    }
    void write(uint64_t a, const uint32_t* w) { Word& x = m[a]; std::memcpy(x.w, w, 4 * FW); }
};

// ------------------------------------------------------------------------------------------ agents
struct Pay { uint32_t w[PW]; };

struct Driver {                  // verif.harness.stream.StreamDriver, gap 0
    int valid = -1, ready = -1, payload = -1;
    std::deque<Pay> q;
    bool cur = false;
    int64_t sent = 0;
    bool idle() const { return !cur && q.empty(); }
    void drive() {
        if (!cur && !q.empty()) {
            Pay v = q.front(); q.pop_front(); cur = true;
            pset(P[payload], v.w); pset1(valid, 1);
        } else if (!cur) pset1(valid, 0);
    }
    void sample() { if (cur && (ready < 0 || phigh(ready))) { cur = false; sent++; } }
};

struct Monitor {                 // verif.harness.stream.StreamMonitor, stall 0 (ready low only when parked)
    int valid = -1, ready = -1, payload = -1;
    bool ready_now = true, seen_valid = false;
    void drive() { ready_now = true; pset1(ready, 1); }
    void park() { ready_now = false; pset1(ready, 0); }
    bool take() { seen_valid = phigh(valid); return seen_valid && ready_now; }   // a transfer this cycle
};

struct ReadPort {                // verif.harness.gpu_memory.MemReadPort, stall and gap 0
    Monitor req;
    int rvalid = -1, rready = -1, rpayload = -1;
    std::deque<std::pair<int64_t, Word>> pending;
    bool cur = false;
    int64_t latency = 10, requests = 0;
    uint64_t mask = 0;
    bool idle() const { return !cur && pending.empty(); }
    void drive(int64_t cycle) {
        req.drive();
        if (!cur && !pending.empty() && pending.front().first <= cycle) {
            Word v = pending.front().second; pending.pop_front(); cur = true;
            pset(P[rpayload], v.w); pset1(rvalid, 1);
        } else if (!cur) pset1(rvalid, 0);
    }
    void sample(int64_t cycle, const Memory& mem) {
        if (req.take()) {
            requests++;
            pending.emplace_back(cycle + latency, mem.read(pget64(P[req.payload]) & mask));
        }
        if (cur && phigh(rready)) cur = false;
    }
};

struct Ready {                   // a feeder's ready entry; ordered like the testbench's heap tuples
    int64_t cycle, planned, token, seq;
    Pay d;
    bool operator>(const Ready& o) const {
        if (cycle != o.cycle) return cycle > o.cycle;
        if (planned != o.planned) return planned > o.planned;
        if (token != o.token) return token > o.token;
        return seq > o.seq;
    }
};

struct Gpu {
    Memory mem;
    Monitor wr;
    ReadPort rtx, rrx;
    Driver desc, cmd, mmcfg;
    Monitor rdy, rel;
    std::deque<Pay> fq;                                                    // feeder queue
    std::priority_queue<Ready, std::vector<Ready>, std::greater<Ready>> fr;   // feeder ready heap
    int64_t issued = 0, wake = NEVER, silence_at = -1;
    int tag_ready = -1;                    // gen_tag_ready's port (-1: the feeder ignores the NIC's tags)
    bool tags = false, stale = false, offered_red = false;   // Feeder.tags / .stale / .offered_red
    int64_t win0 = 0, win_end = 0, stride = 1, meta = 0, out0 = 0, part0 = 0, out_land = 0, part_land = 0, full = 0;
    std::vector<uint32_t> landed[2];       // flits written per result (out) / partial (part) row
    int64_t lo = 0;                                       // the first local expert (global id)
    std::vector<std::vector<int64_t>> slot_rows;          // local expert -> window rows, arrival order
    std::vector<int64_t> arrived;                         // window row -> cycle its metadata flit landed
};

static Gpu gpus[G];
static inline bool is_red(const Pay& d) { return d.w[0] & 1; }     // the descriptor's op: LD_REDUCE
static Driver swcfg, niccfg;            // niccfg: the nic_cfg stream, where the top has one (else ports -1)
static int probe = -1, total = -1, clk = -1, rst = -1;
static int addr_off = 0, addr_w = 0, data_off = 0;        // mem_wr payload layout
static int in_use_off = 0, in_use_w = 0;                  // switch_status__total
static int link_w = 0, vo = 0, co = 0, lo = 0, oo = 0, ow = 0, fill_a = 0, fill_b = 0;
static int64_t seqno = 0;

// links (LinkCounters)
static constexpr int NL = 2 * G;
static bool head[NL][2];
static int kind[NL][2];                      // 0 data, 1 fills
static int64_t counts[NL][2];                // data, fills
static std::vector<int64_t> series[NL];
static int64_t link_bin = 64, t0 = -1, link_quiet = 0;
// occupancy
static int64_t occ_bin = 64, occ_next = 0;
static std::vector<int64_t> occ;             // pairs
// cycler / skip
static int64_t cycle = 0, skipped = 0, dropped = 0, skip_pending = 0, quiet = 0, skip_interrupted = 0;
static int64_t drop_k = 0, drop_period = 0, quiet_min = 64;

// ------------------------------------------------------------------------------------------ token releases
// GpuSide._on_write's window part, GpuSide._on_release and SystemEnv.released (the tables: sys_rel_*).
struct Pair { int64_t g, e, n; };                      // a Counter's entry: (GPU, expert) -> count
struct Push { std::vector<Pair> pairs; int64_t planned; Pay d; };
struct Combine { bool has = false; int64_t home = 0, planned = 0; Pay d; };
static int meta_entries = 0, meta_expert_bits = 15, tile_size = 1, row_flits = 1, ntok = 0;
static int rel_e_off = 0, rel_e_w = 0, rel_t_off = 0, rel_t_w = 0, rel_s_off = 0, rel_s_w = 0;
static int64_t notify = 0, rel_left = 0;
static bool combine_on = false;                        // dysharp: a released token's combine goes ready
static std::unordered_map<std::string, int64_t> row_token;   // a dispatched row's bytes -> its token
static std::vector<std::vector<Pair>> pend;            // per token: its pairs still to be released
static std::vector<int64_t> released_at;               // per token (-1: not yet)
static std::vector<Combine> combine;                   // per token
static std::unordered_map<int64_t, Push> pushes;       // g * ntok + t: an expert GPU's push of a token
static int64_t rel_err[8];                             // the first refused release: code, g, a, b, c, d, cycle

enum { REL_NO_ROW = 1, REL_NO_TOKEN = 2, REL_NOT_PENDING = 3, REL_NO_COMBINE = 4 };
static void rel_fail(int64_t code, int64_t g, int64_t a, int64_t b, int64_t c, int64_t d) {
    failed = 1;
    if (rel_err[0]) return;
    int64_t v[8] = {code, g, a, b, c, d, cycle, 0};
    std::memcpy(rel_err, v, sizeof v);
}

static void on_meta(Gpu& x, int64_t row, const uint32_t* d) {       // GpuSide._on_write, a metadata flit
    x.arrived[row] = cycle;
    const int bits = meta_expert_bits + 1;                           // unpack_token_meta: id, valid bit
    for (int i = 0; i < meta_entries && (i + 1) * bits <= 32 * FW; i++) {
        int w = i * bits / 32, sh = i * bits % 32;
        uint64_t two = d[w] | (w + 1 < FW ? uint64_t(d[w + 1]) << 32 : 0);
        uint64_t entry = (two >> sh) & ((uint64_t(1) << bits) - 1);
        if (!(entry >> meta_expert_bits)) continue;
        int64_t e = int64_t(entry & ((uint64_t(1) << meta_expert_bits) - 1)) - x.lo;
        if (e >= 0 && e < int64_t(x.slot_rows.size())) x.slot_rows[e].push_back(row);
    }
}

static void push_ready(int g, int64_t at, int64_t planned, int64_t token, const Pay& d) {
    gpus[g].fr.push(Ready{at, planned, token, seqno++, d});
}

static bool any_positive(const std::vector<Pair>& v) {               // a Counter's ``+c`` is not empty
    for (const Pair& p : v) if (p.n > 0) return true;
    return false;
}

static void released(int g, int64_t e, int64_t t) {                  // SystemEnv.released
    Pair* q = nullptr;
    for (Pair& p : pend[t]) if (p.g == g && p.e == e) q = &p;
    if (!q || q->n != 1) { rel_fail(REL_NOT_PENDING, g, e, t, q ? q->n : 0, 0); return; }
    q->n--;
    if (!any_positive(pend[t])) {
        rel_left--;
        released_at[t] = cycle;
        if (combine_on) {
            const Combine& c = combine[t];
            if (!c.has) { rel_fail(REL_NO_COMBINE, g, e, t, 0, 0); return; }
            push_ready(int(c.home), cycle + notify, c.planned, t, c.d);
        }
    }
    auto it = pushes.find(int64_t(g) * ntok + t);
    if (it != pushes.end()) {
        Push& u = it->second;
        Pair* r = nullptr;
        for (Pair& p : u.pairs) if (p.g == g && p.e == e) r = &p;
        if (r) r->n--; else u.pairs.push_back(Pair{g, e, -1});
        if (!any_positive(u.pairs)) push_ready(g, cycle + notify, u.planned, t, u.d);
    }
}

static void on_release(int g, uint64_t p) {                           // GpuSide._on_release
    Gpu& x = gpus[g];
    events = true;
    auto field = [p](int off, int w) { return int64_t((p >> off) & ((uint64_t(1) << w) - 1)); };
    int64_t e = field(rel_e_off, rel_e_w), tile = field(rel_t_off, rel_t_w), s = field(rel_s_off, rel_s_w);
    int64_t slot = tile * tile_size + s;
    if (e >= int64_t(x.slot_rows.size()) || slot >= int64_t(x.slot_rows[e].size())) {
        rel_fail(REL_NO_ROW, g, e, tile, s, e < int64_t(x.slot_rows.size()) ? int64_t(x.slot_rows[e].size()) : 0);
        return;
    }
    int64_t row = x.slot_rows[e][slot];
    std::string key(size_t(4 * FW * row_flits), '\0');
    for (int i = 0; i < row_flits; i++) {
        Word w = x.mem.read(uint64_t(x.win0 + row * x.stride + i));
        std::memcpy(&key[size_t(4 * FW * i)], w.w, 4 * FW);
    }
    auto it = row_token.find(key);
    if (it == row_token.end()) { rel_fail(REL_NO_TOKEN, g, e, tile, s, row); return; }
    released(g, x.lo + e, it->second);
}


#define INPUTS_AT_RISE @@INPUTS_AT_RISE@@

static double eval_s = 0;                    // seconds inside the Verilated model's eval()
static inline void eval_clk(int v) {         // a clock edge (with INPUTS_AT_RISE, sim_load's too)
    auto a = std::chrono::steady_clock::now();
    top->clk = v;
#if INPUTS_AT_RISE
    top->sim_load = v;
#endif
    top->eval();
    eval_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
}
#if INPUTS_AT_RISE
// The input registers loaded with no clock edge (clk high): the design's state stays, its outputs are
// evaluated from the inputs just written.
static inline void load_inputs() {
    auto a = std::chrono::steady_clock::now();
    top->sim_load = 0;
    top->eval();
    top->sim_load = 1;
    top->eval();
    eval_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
}
#endif

static uint32_t probe_words[(NL * 16 + 31) / 32 + 4];

static bool probe_any() {
    pget(P[probe], probe_words);
    for (int i = 0; i < NL; i++) if (bits(probe_words, i * link_w + vo, 1)) return true;
    return false;
}

static void links_sample() {
    if (!probe_any()) { link_quiet++; return; }
    link_quiet = 0;
    int64_t b = (t0 < 0 || cycle < t0) ? -1 : (cycle - t0) / link_bin;
    for (int i = 0; i < NL; i++) {
        int base = i * link_w;
        if (!bits(probe_words, base + vo, 1)) continue;
        int v = int(bits(probe_words, base + co, 1));
        if (head[i][v]) {
            int op = int(bits(probe_words, base + oo, ow));
            kind[i][v] = (op == fill_a || op == fill_b) ? 1 : 0;
        }
        counts[i][kind[i][v]]++;
        head[i][v] = bits(probe_words, base + lo, 1);
        if (b >= 0) {
            auto& s = series[i];
            if (int64_t(s.size()) < b + 1) s.resize(b + 1, 0);
            s[b]++;
        }
    }
}

static uint64_t in_use() {
    static uint32_t w[64];
    pget(P[total], w);
    return bits(w, in_use_off, in_use_w);
}

static void occ_sample() {
    if (t0 >= 0 && cycle >= occ_next) {
        occ.push_back(cycle - t0);
        occ.push_back(int64_t(in_use()));
        occ_next = t0 + ((cycle - t0) / occ_bin + 1) * occ_bin;
    }
}

static bool quiet_now() {                    // SystemEnv._quiet_now
    if (link_quiet == 0 || !swcfg.idle() || !niccfg.idle()) return false;
    for (int g = 0; g < G; g++) {
        Gpu& x = gpus[g];
        if (!x.fq.empty() || !x.desc.idle() || !x.cmd.idle() || !x.mmcfg.idle() || !x.rtx.idle() ||
            !x.rrx.idle() || x.wr.seen_valid || x.rtx.req.seen_valid || x.rrx.req.seen_valid ||
            x.rdy.seen_valid || x.rel.seen_valid)
            return false;
        if (!x.fr.empty() && x.fr.top().cycle <= cycle) return false;
    }
    return in_use() == 0;
}

static int64_t skip_rule() {                 // SystemEnv.skip
    if (!quiet_now()) { quiet = 0; return 0; }
    quiet++;
    if (quiet < quiet_min) return 0;
    int64_t nxt = NEVER;
    for (int g = 0; g < G; g++) {
        nxt = std::min(nxt, gpus[g].wake);
        if (!gpus[g].fr.empty()) nxt = std::min(nxt, gpus[g].fr.top().cycle);
    }
    int64_t n = nxt == NEVER ? 0 : std::max<int64_t>(0, nxt - cycle - 2);
    if (n) drop_period = drop_k;
    return n;
}

static void resumed() {                      // SystemEnv.resumed
    bool busy = false;
    for (int g = 0; g < G && !busy; g++) {
        Gpu& x = gpus[g];
        busy = phigh(x.wr.valid) || phigh(x.rtx.req.valid) || phigh(x.rrx.req.valid) || phigh(x.rdy.valid) ||
               phigh(x.rel.valid);
    }
    if (busy || probe_any()) skip_interrupted++;
}

static void silence(Gpu& x) {           // GpuSide.silence: reads accepted, never answered
    for (ReadPort* p : {&x.rtx, &x.rrx}) {
        p->latency = int64_t(1) << 62;
        for (auto& e : p->pending) e.first = int64_t(1) << 62;
    }
}

static void drive() {
    for (int g = 0; g < G; g++) {
        Gpu& x = gpus[g];
        x.wr.drive();
        x.rtx.drive(cycle);
        x.rrx.drive(cycle);
        if (x.desc.idle()) {                 // Feeder.drive: a ready combine first, else the queue
            // (with the NIC's tag hint: a reduction load first only while its tag is free, if others wait)
            bool gated = x.tag_ready >= 0 && !x.fq.empty() && !x.fr.empty() && is_red(x.fr.top().d);
            if (gated && x.stale) {
                // wait a cycle for the hint of the load just taken
            } else if (!x.fr.empty() && x.fr.top().cycle <= cycle && !(gated && !x.tags)) {
                x.offered_red = is_red(x.fr.top().d);
                x.desc.q.push_back(x.fr.top().d); x.fr.pop(); x.issued++;
            } else if (!x.fq.empty()) {
                x.offered_red = is_red(x.fq.front());
                x.desc.q.push_back(x.fq.front()); x.fq.pop_front(); x.issued++;
            }
        }
        x.desc.drive();
        x.cmd.drive();
        x.mmcfg.drive();
        x.rdy.drive();
        x.rel.drive();
        if (cycle == x.silence_at) silence(x);                          // GpuSide.drive: the fault,
        if (x.wake <= cycle) call(EV_WAKE, g, cycle, 0, nullptr);     // the GEMM ends
    }
    swcfg.drive();
    if (niccfg.valid >= 0) niccfg.drive();
}

static void sample() {
    static uint32_t w[PW];
    for (int g = 0; g < G; g++) {
        Gpu& x = gpus[g];
        if (x.wr.take()) {
            pget(P[x.wr.payload], w);
            uint64_t addr = bits(w, addr_off, addr_w);
            uint32_t d[FW];
            for (int i = 0; i < FW; i++) d[i] = uint32_t(bits(w, data_off + 32 * i, 32));
            x.mem.write(addr, d);
            int64_t a = int64_t(addr);
            if (a >= x.win0 && a < x.win_end) {
                if ((a - x.win0) % x.stride == x.meta) on_meta(x, (a - x.win0) / x.stride, d);
            } else {         // a result row's flit: Python hears of the row once it is whole (or over)
                // each region by its own size: the result rows (one per home token) end below the partials'
                int k = (a >= x.out0 && a < x.out0 + x.out_land) ? 0 : (a >= x.part0 && a < x.part0 + x.part_land) ? 1 : -1;
                if (k >= 0) {
                    uint32_t n = ++x.landed[k][(a - (k ? x.part0 : x.out0)) / x.stride];
                    if (n >= x.full) call(EV_LANDED, g, cycle, addr, &n);
                }
            }
        }
        x.rtx.sample(cycle, x.mem);
        x.rrx.sample(cycle, x.mem);
        if (x.tag_ready >= 0) {                                         // Feeder.sample
            x.stale = x.offered_red && x.desc.cur;
            x.tags = phigh(x.tag_ready);
        }
        x.desc.sample();
        x.cmd.sample();
        x.mmcfg.sample();
        if (x.rdy.take()) call(EV_READY, g, cycle, pget64(P[x.rdy.payload]), nullptr);
        if (x.rel.take()) on_release(g, pget64(P[x.rel.payload]));
    }
    swcfg.sample();
    niccfg.sample();
    links_sample();
    occ_sample();
}

// A skip's stretch: every agent parks its inputs, and the stretch's cycles are clocked (whole rounds of
// ``drop_period`` left out); then the agents read the outputs after its last edge (resumed).
static void park_all() {
    for (int g = 0; g < G; g++) {
        Gpu& x = gpus[g];
        x.wr.park(); x.rtx.req.park(); x.rrx.req.park(); x.rdy.park(); x.rel.park();
    }
}

static void quiet_stretch(int64_t n, int64_t* edges) {
    int64_t k = drop_period, d = k ? (n - 1) / k * k : 0;
    for (int64_t i = 0; i < n - d; i++) { eval_clk(0); eval_clk(1); }
    *edges += n - d;
    dropped += d;
    cycle += n;
    skipped += n;
    resumed();
}

// One step of the cycler: the rising edge of the next cycle (a pending skip first), drive, sample, the
// skip rule. ``edges`` gets the rising edges it took (a skip: 1 + the simulated cycles of the stretch).
#if INPUTS_AT_RISE
// The same edges with the inputs registered at the rising edge: each cycle's inputs are driven before its
// rising edge (drive() reads no output of the design), the clock falls after the sample. A skip's stretch:
// the parked inputs are written before its first edge (which loads them), so every later edge of the
// stretch sees them, as the falling-edge latch's; resumed() reads the outputs after the last one, from the
// parked inputs, as there; then the cycle's drive is loaded with no clock edge (load_inputs) and sampled.
static void step(int64_t* edges) {
    cycle++;
    *edges = 1;
    if (skip_pending) {
        int64_t n = skip_pending;
        skip_pending = 0;
        park_all();
        eval_clk(1);
        quiet_stretch(n, edges);
        events = false;
        drive();
        load_inputs();
    } else {
        events = false;
        drive();
        eval_clk(1);
    }
    sample();
    eval_clk(0);
    skip_pending = skip_rule();
}
#else
static void step(int64_t* edges) {
    eval_clk(1);
    cycle++;
    *edges = 1;
    if (skip_pending) {
        int64_t n = skip_pending;
        skip_pending = 0;
        park_all();
        quiet_stretch(n, edges);
    }
    events = false;
    drive();
    eval_clk(0);
    sample();
    skip_pending = skip_rule();
}
#endif

static bool config_idle() {
    for (int g = 0; g < G; g++) if (!gpus[g].mmcfg.idle() || !gpus[g].cmd.idle()) return false;
    return swcfg.idle() && niccfg.idle();
}

// ------------------------------------------------------------------------------------------ C API
extern "C" {

int sys_gpus() { return G; }
int sys_flit_words() { return FW; }
int sys_payload_words() { return PW; }
double sys_eval_seconds() { return eval_s; }
int sys_nports() { return NPORTS; }
int sys_port_width(int i) { return (i >= 0 && i < NPORTS) ? P[i].w : -1; }
void sys_port_read(int i, uint32_t* out) { pget(P[i], out); }
void sys_port_write(int i, const uint32_t* in) { pset(P[i], in); }

// roles: per GPU 27 port indices (wr v/r/p, rd_tx req v/r/p resp v/r/p, rd_rx the same, desc v/r/p,
// cmd v/r/p, mm_cfg v/r/p, ready v/r/p, release v/r/p), then switch_cfg v/r/p, probe, total, clk, rst,
// nic_cfg v/r/p (-1 where the top has the NICs' configuration as ports), gen_tag_ready per GPU (-1: the
// feeder does not gate reduction loads on the NIC's tags).
// cfg: addr_off, addr_w, data_off, in_use_off, in_use_w, link_w, vo, co, lo, oo, ow, fill_a, fill_b,
// latency, addr_mask, drop_k, bin, quiet_min.
int sys_init(callback_t callback, const int32_t* roles, const int64_t* cfg) {
    if (!ctx) {
        ctx = new VerilatedContext;
        top = new V@@TOP@@(ctx);
        bind_ports(top);
    }
    cb = callback;
    const int32_t* r = roles;
    for (int g = 0; g < G; g++) {
        Gpu& x = gpus[g];
        x.wr.valid = *r++; x.wr.ready = *r++; x.wr.payload = *r++;
        for (ReadPort* p : {&x.rtx, &x.rrx}) {
            p->req.valid = *r++; p->req.ready = *r++; p->req.payload = *r++;
            p->rvalid = *r++; p->rready = *r++; p->rpayload = *r++;
            p->latency = cfg[13]; p->mask = uint64_t(cfg[14]);
        }
        for (Driver* d : {&x.desc, &x.cmd, &x.mmcfg}) { d->valid = *r++; d->ready = *r++; d->payload = *r++; }
        for (Monitor* m : {&x.rdy, &x.rel}) { m->valid = *r++; m->ready = *r++; m->payload = *r++; }
    }
    swcfg.valid = *r++; swcfg.ready = *r++; swcfg.payload = *r++;
    probe = *r++; total = *r++; clk = *r++; rst = *r++;
    niccfg.valid = *r++; niccfg.ready = *r++; niccfg.payload = *r++;
    for (int g = 0; g < G; g++) gpus[g].tag_ready = *r++;       // -1: the plain feeder
    addr_off = int(cfg[0]); addr_w = int(cfg[1]); data_off = int(cfg[2]); in_use_off = int(cfg[3]);
    in_use_w = int(cfg[4]); link_w = int(cfg[5]); vo = int(cfg[6]); co = int(cfg[7]); lo = int(cfg[8]);
    oo = int(cfg[9]); ow = int(cfg[10]); fill_a = int(cfg[11]); fill_b = int(cfg[12]);
    drop_k = cfg[15]; link_bin = occ_bin = cfg[16]; quiet_min = cfg[17];
    for (int i = 0; i < NL; i++) { head[i][0] = head[i][1] = true; kind[i][0] = kind[i][1] = 0; }
    return 0;
}

void sys_watch(int g, int64_t win0, int64_t win_end, int64_t stride, int64_t meta, int64_t out0, int64_t part0,
               int64_t out_land, int64_t part_land, int64_t full) {
    Gpu& x = gpus[g];
    x.win0 = win0; x.win_end = win_end; x.stride = stride; x.meta = meta; x.out0 = out0; x.part0 = part0;
    x.out_land = out_land; x.part_land = part_land; x.full = full;
    x.landed[0].assign(out_land / stride + 1, 0);
    x.landed[1].assign(part_land / stride + 1, 0);
}

// The token releases' tables (the testbench's, given once before the run). cfg: META_ENTRIES,
// META_EXPERT_BITS (a metadata entry: the expert id, then its valid bit), tile size, a dispatched row's flits, TokenRelease's expert / tile / slot (offset, width each), notify_cycles, tokens,
// dysharp (a released token's combine goes ready on its home GPU), tokens with pairs to release.
void sys_rel_setup(const int64_t* cfg) {
    meta_entries = int(cfg[0]); meta_expert_bits = int(cfg[1]); tile_size = int(cfg[2]); row_flits = int(cfg[3]);
    rel_e_off = int(cfg[4]); rel_e_w = int(cfg[5]); rel_t_off = int(cfg[6]); rel_t_w = int(cfg[7]);
    rel_s_off = int(cfg[8]); rel_s_w = int(cfg[9]);
    notify = cfg[10]; ntok = int(cfg[11]); combine_on = cfg[12] != 0; rel_left = cfg[13];
    row_token.clear(); pushes.clear();
    pend.assign(ntok, {}); released_at.assign(ntok, -1); combine.assign(ntok, Combine());
    std::memset(rel_err, 0, sizeof rel_err);
}
// GPU g's local experts (global ids lo .. lo + n - 1) and its window's rows.
void sys_rel_gpu(int g, int64_t lo_expert, int64_t n, int64_t rows) {
    Gpu& x = gpus[g];
    x.lo = lo_expert;
    x.slot_rows.assign(n, {});
    x.arrived.assign(rows, -1);
}
// Token t's dispatched row (row_flits flits of FW words).
void sys_rel_row(int64_t t, const uint32_t* w) {
    row_token[std::string((const char*)w, size_t(4 * FW * row_flits))] = t;
}
// Token t's (GPU, expert, count) pairs (SystemEnv.pending[t]).
void sys_rel_pending(int64_t t, int n, const int64_t* v) {
    pend[t].clear();
    for (int i = 0; i < n; i++) pend[t].push_back(Pair{v[3 * i], v[3 * i + 1], v[3 * i + 2]});
}
// Token t's combine descriptor, ready on GPU home once t is released (SystemEnv.combine_items, dysharp).
void sys_rel_combine(int64_t t, int home, int64_t planned, const uint32_t* w) {
    Combine& c = combine[t];
    c.has = true; c.home = home; c.planned = planned;
    std::memcpy(c.d.w, w, sizeof c.d.w);
}
// GPU g's push of token t (planned order), ready once its pairs are released (SystemEnv.push_pending).
void sys_rel_push(int g, int64_t t, int64_t planned, int n, const int64_t* v, const uint32_t* w) {
    Push& u = pushes[int64_t(g) * ntok + t];
    u.pairs.clear();
    for (int i = 0; i < n; i++) u.pairs.push_back(Pair{v[3 * i], v[3 * i + 1], v[3 * i + 2]});
    u.planned = planned;
    std::memcpy(u.d.w, w, sizeof u.d.w);
}
int64_t sys_rel_left() { return rel_left; }
// released_at per token (-1: not released), and every token's pair counts in sys_rel_pending's order.
void sys_rel_read(int64_t* at, int64_t* counts_out) {
    for (int t = 0; t < ntok; t++) {
        at[t] = released_at[t];
        for (const Pair& p : pend[t]) *counts_out++ = p.n;
    }
}
// The first refused release (code 0: none): code, GPU, then per code (REL_NO_ROW: expert, tile, slot,
// rows seen; REL_NO_TOKEN: expert, tile, slot, window row; REL_NOT_PENDING / REL_NO_COMBINE: expert
// (global), token, count), and the cycle.
void sys_rel_error(int64_t* out) { std::memcpy(out, rel_err, sizeof rel_err); }
// Window rows start .. start + n - 1 of local expert e's slots and the cycles their metadata flits landed
// (GpuSide.tile_rows); returns how many there are.
int sys_tile_rows(int g, int e, int64_t start, int n, int64_t* rows, int64_t* arrived) {
    const Gpu& x = gpus[g];
    if (e < 0 || e >= int(x.slot_rows.size())) return 0;
    const auto& v = x.slot_rows[e];
    int k = 0;
    for (int64_t i = start; i < start + n && i < int64_t(v.size()); i++, k++) {
        rows[k] = v[i];
        arrived[k] = x.arrived[v[i]];
    }
    return k;
}

// Cycler.start: reset high for three rising edges with every agent's first drive, then low. The inputs are
// latched on the falling edge (registered_inputs), so they change only while the clock is high: this
// returns after the third rising edge with reset low, the testbench then writes its configuration ports
// (as cocotb's does after that edge) and sys_settle() gives the falling edge that latches them all.
// With INPUTS_AT_RISE this returns before the third rising edge, reset written low, the clock low; the
// testbench writes its configuration ports and sys_settle() gives that edge (which loads them all, the
// design seeing reset high) and the falling one. Either way the first eval() makes no edge (Verilator takes
// the clock's first value as its previous one), so the first rising edge sees the registers' initial
// values (reset high, the rest 0) and the second and third the reset drive.
void sys_reset() {
    pset1(rst, 1);
    for (int g = 0; g < G; g++) {
        Gpu& x = gpus[g];
        x.wr.drive(); x.rtx.drive(0); x.rrx.drive(0); x.desc.drive(); x.cmd.drive(); x.mmcfg.drive();
        x.rdy.drive(); x.rel.drive();
    }
    swcfg.drive();
    if (niccfg.valid >= 0) niccfg.drive();
    eval_clk(0);
    for (int i = 0; i < (INPUTS_AT_RISE ? 2 : 3); i++) {
        eval_clk(1);
        if (INPUTS_AT_RISE || i < 2) eval_clk(0);
    }
    pset1(rst, 0);
}
void sys_settle() {
    if (INPUTS_AT_RISE) eval_clk(1);
    eval_clk(0);
}

void sys_send(int which, int g, const uint32_t* w) {      // 0 desc, 1 cmd, 2 mm_cfg, 3 switch_cfg, 4 nic_cfg
    Pay p; std::memcpy(p.w, w, sizeof p.w);
    Driver* d = which == 4 ? &niccfg : which == 3 ? &swcfg : which == 0 ? &gpus[g].desc : which == 1 ? &gpus[g].cmd
              : &gpus[g].mmcfg;
    d->q.push_back(p);
}
void sys_feed(int g, const uint32_t* w) { Pay p; std::memcpy(p.w, w, sizeof p.w); gpus[g].fq.push_back(p); }
void sys_feed_ready(int g, int64_t at, int64_t planned, int64_t token, const uint32_t* w) {
    Ready e{at, planned, token, seqno++, {}};
    std::memcpy(e.d.w, w, sizeof e.d.w);
    gpus[g].fr.push(e);
}
void sys_set_wake(int g, int64_t at) { gpus[g].wake = at < 0 ? NEVER : at; }
void sys_silence(int g, int64_t at) { gpus[g].silence_at = at; }
void sys_mem_read(int g, int64_t addr, int n, uint32_t* out) {
    for (int i = 0; i < n; i++) {
        Word v = gpus[g].mem.read(uint64_t(addr + i));
        std::memcpy(out + FW * i, v.w, 4 * FW);
    }
}
void sys_mem_write(int g, int64_t addr, int n, const uint32_t* in) {
    for (int i = 0; i < n; i++) gpus[g].mem.write(uint64_t(addr + i), in + FW * i);
}
void sys_start(int64_t at) { t0 = at; occ_next = at; }

// Modes: 0 until the configuration drivers are idle (checked before each step); 1 until the Python
// predicate holds (asked after a step with an event); 2 ``arg`` rising edges as the testbench's
// ``Cycler.cycles`` counts them. Returns 0 done, 1 timeout (more than ``timeout`` cycles from the
// start), 2 a callback failed. ``*seen`` gets the cycle the testbench's coroutine sees at the end.
int sys_run(int mode, int64_t arg, int64_t timeout, int64_t* seen) {
    int64_t start = cycle, edges, left = arg;
    failed = 0;
    for (;;) {
        if (mode == 0 && config_idle()) { *seen = cycle; return 0; }
        if (mode == 2 && left <= 0) { *seen = cycle; return 0; }
        if (mode != 2 && cycle - start > timeout) { *seen = cycle; return 1; }
        if (mode == 2 && skip_pending) {
            int64_t n = skip_pending, k = drop_period, d = k ? (n - 1) / k * k : 0;
            if (left < n - d + 1) {           // the stretch outlasts the wait: seen mid-skip
                *seen = cycle + 1;
                return 0;
            }
        }
        step(&edges);
        if (failed) { *seen = cycle; return 2; }
        if (mode == 2) left -= edges;
        if (mode == 1 && events) {
            int r = call(EV_POLL, -1, cycle, 0, nullptr);
            if (failed) { *seen = cycle; return 2; }
            if (r > 0) { *seen = cycle; return 0; }
        }
    }
}

// State: cycle, skipped, dropped, skip_interrupted, issued per GPU (G values).
void sys_state(int64_t* out) {
    out[0] = cycle; out[1] = skipped; out[2] = dropped; out[3] = skip_interrupted;
    for (int g = 0; g < G; g++) out[4 + g] = gpus[g].issued;
}
// Link counts: per link (2g up, 2g + 1 down) data, fills.
void sys_link_counts(int64_t* out) {
    for (int i = 0; i < NL; i++) { out[2 * i] = counts[i][0]; out[2 * i + 1] = counts[i][1]; }
}
int64_t sys_series_len(int i) { return i < 0 ? int64_t(occ.size()) : int64_t(series[i].size()); }
void sys_series(int i, int64_t* out) {
    const auto& s = i < 0 ? occ : series[i];
    std::memcpy(out, s.data(), 8 * s.size());
}
void sys_finish() {
    if (top) { top->final(); delete top; top = nullptr; delete ctx; ctx = nullptr; }
}

}  // extern "C"
